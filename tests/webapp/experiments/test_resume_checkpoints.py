"""Resuming from an earlier checkpoint removes the later ones only when confirmed (rows and directories), never
one another run uses as a model, and says which."""

from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.experiments.helpers import ARITHMETIC, finished_run_with_checkpoints, small_config
from webapp.experiments import services
from webapp.experiments.models import MetricRow, ModelRef, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished_run(settings, tmp_path, tiny_model, tiny_model_dir, researcher, monkeypatch):
    """A failed run with checkpoints at steps 2, 4 and 6 on disk, and metric rows up to step 6."""
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")
    settings.RUNS_DIR = tmp_path / "runs"
    return finished_run_with_checkpoints(tiny_model, tiny_model_dir, researcher)


def _checkpoint(run: Run, step: int) -> ModelRef:
    return ModelRef.objects.get(run=run, step=step)


def test_without_confirmation_nothing_is_removed_and_the_message_names_the_later_steps(finished_run):
    with pytest.raises(ValidationError, match="removes the later checkpoints step 4, step 6; confirm"):
        services.run_resume(run_id=finished_run.pk, checkpoint_id=_checkpoint(finished_run, 2).pk)
    assert list(ModelRef.objects.filter(run=finished_run).values_list("step", flat=True).order_by("step")) == [2, 4, 6]
    assert all(Path(model.path).is_dir() for model in ModelRef.objects.filter(run=finished_run))
    assert MetricRow.objects.filter(run=finished_run).count() == 6
    assert Run.objects.get(pk=finished_run.pk).status == Run.Status.FAILED


def test_confirmed_the_later_checkpoints_rows_and_directories_are_removed(finished_run,
                                                                         django_capture_on_commit_callbacks):
    later = [Path(_checkpoint(finished_run, step).path) for step in (4, 6)]
    with django_capture_on_commit_callbacks(execute=True):
        resumed = services.run_resume(run_id=finished_run.pk, checkpoint_id=_checkpoint(finished_run, 2).pk,
                                      remove_later=True)
    assert resumed.status == Run.Status.QUEUED and resumed.config["resume_from"] == _checkpoint(finished_run, 2).path
    assert list(ModelRef.objects.filter(run=finished_run).values_list("step", flat=True)) == [2]
    assert not any(directory.exists() for directory in later)
    assert Path(_checkpoint(finished_run, 2).path).is_dir()


def test_resuming_from_the_newest_asks_nothing(finished_run):
    resumed = services.run_resume(run_id=finished_run.pk, checkpoint_id=_checkpoint(finished_run, 6).pk)
    assert resumed.status == Run.Status.QUEUED
    assert ModelRef.objects.filter(run=finished_run).count() == 3


def test_a_later_checkpoint_another_run_uses_is_never_removed(finished_run, tiny_model, researcher):
    used = _checkpoint(finished_run, 6)
    user = services.run_create(kind="dpo", config={**small_config(tiny_model), "model": used.name},
                               data_source=ARITHMETIC, created_by=researcher, name="built on step 6")
    with pytest.raises(ValidationError) as error:
        services.run_resume(run_id=finished_run.pk, checkpoint_id=_checkpoint(finished_run, 2).pk, remove_later=True)
    assert f"step 6 is a model of run #{user.pk} built on step 6" in error.value.messages[0]
    assert "fork the run from step 2 instead" in error.value.messages[0]
    assert ModelRef.objects.filter(run=finished_run).count() == 3 and Path(used.path).is_dir()
    assert Run.objects.get(pk=finished_run.pk).status == Run.Status.FAILED


def test_the_trainer_may_delete_an_old_checkpoint_only_when_no_other_run_uses_it(finished_run, tiny_model,
                                                                                researcher):
    services.run_create(kind="dpo", config={**small_config(tiny_model), "model": _checkpoint(finished_run, 4).path},
                        data_source=ARITHMETIC, created_by=researcher, name="user")
    assert not services.model_checkpoint_release(run_id=finished_run.pk, path=_checkpoint(finished_run, 4).path)
    assert services.model_checkpoint_release(run_id=finished_run.pk, path=_checkpoint(finished_run, 2).path)
    assert list(ModelRef.objects.filter(run=finished_run).values_list("step", flat=True).order_by("step")) == [4, 6]


def test_only_the_newest_checkpoint_keeps_its_optimizer_state(finished_run):
    flags = dict(ModelRef.objects.filter(run=finished_run).values_list("step", "has_optimizer_state"))
    assert flags == {2: False, 4: False, 6: True}
