"""Archiving and deleting runs, checkpoints and projects: rows and files gone, the size freed measured on real
files, refusals that say why (a running run, a checkpoint in use, someone else's run)."""

from pathlib import Path

import pytest
from django.conf import settings

from tests.webapp.annotation.factories import make_project
from webapp.accounts.services import user_create
from webapp.annotation.models import ImportJob, Project, Prompt, SamplingJob
from webapp.annotation.selectors import own_progress, project_list
from webapp.annotation.services.removal import project_archive, project_delete, project_disk_bytes
from webapp.experiments.models import MetricRow, ModelRef, Run, Sample
from webapp.experiments.selectors import disk_size_text, run_disk_bytes, runs_list
from webapp.experiments.services.removal import (
    RemovalRefused,
    checkpoint_delete,
    run_archive,
    run_delete,
)

pytestmark = pytest.mark.django_db(transaction=True)  # files are removed once the delete has committed


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def make_run_with_files(user, *, status: str = Run.Status.SUCCEEDED, name: str = "with files") -> Run:
    """A finished run with two checkpoints (3,000 + 4,000 bytes), samples and a log (500 + 250): 7,750 bytes."""
    run = Run.objects.create(name=name, kind="sft", config={}, created_by=user, status=status, current_step=20,
                             total_steps=20, data_source={"type": "arithmetic", "level": 1, "size": 8})
    directory = Path(settings.RUNS_DIR) / str(run.pk)
    for step, size in ((10, 3000), (20, 4000)):
        _write(directory / f"checkpoint-{step}" / "model.safetensors", size)
        ModelRef.objects.create(name=f"{run.name} step {step}", path=str(directory / f"checkpoint-{step}"),
                                source=ModelRef.Source.CHECKPOINT, run=run, step=step)
    _write(directory / "samples.jsonl", 500)
    _write(directory / "logs" / "train.log", 250)
    run.checkpoint_path = str(directory / "checkpoint-20")
    run.save()
    MetricRow.objects.create(run=run, step=10, wall_time=1.0, tokens_seen=0, metrics={"loss": 1.0})
    Sample.objects.create(run=run, step=10, prompt="2+2=", completion="4")
    return run


def test_a_run_s_size_is_its_files_and_deleting_it_removes_rows_and_files_and_says_what_it_freed(researcher):
    run = make_run_with_files(researcher)
    directory = Path(settings.RUNS_DIR) / str(run.pk)
    assert run_disk_bytes(run) == 7750
    freed = run_delete(run_id=run.pk, user=researcher)
    assert freed.bytes == 7750 and freed.text == "7.8 kB"
    assert not directory.exists()
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not ModelRef.objects.filter(run_id=run.pk).exists()
    assert not MetricRow.objects.filter(run_id=run.pk).exists() and not Sample.objects.filter(run_id=run.pk).exists()
    assert [disk_size_text(size) for size in (1_900_000_000, 512)] == ["1.9 GB", "512 bytes"]


@pytest.mark.parametrize("status", [Run.Status.RUNNING, Run.Status.QUEUED])
def test_a_queued_or_running_run_is_not_deleted(researcher, status):
    run = make_run_with_files(researcher, status=status)
    with pytest.raises(RemovalRefused, match=f"run #{run.pk} is {status}: cancel it first"):
        run_delete(run_id=run.pk, user=researcher)
    assert Run.objects.filter(pk=run.pk).exists() and run_disk_bytes(run) == 7750


def test_someone_else_s_run_is_refused_and_an_admin_may(researcher):
    run = make_run_with_files(researcher)
    other, _ = user_create(username="rene", role="researcher", password="rene-password-1")
    with pytest.raises(RemovalRefused, match="launched by someone else") as refused:
        run_delete(run_id=run.pk, user=other)
    assert refused.value.status == 403
    admin, _ = user_create(username="ada", role="researcher", password="ada-password-1")
    admin.is_staff = True
    admin.save()
    assert run_delete(run_id=run.pk, user=admin).bytes == 7750


def test_a_checkpoint_in_use_by_a_running_run_or_a_sampling_job_is_refused_saying_which(researcher):
    run = make_run_with_files(researcher)
    checkpoint = ModelRef.objects.get(run=run, step=20)
    user = Run.objects.create(name="uses it", kind="dpo", config={"model": checkpoint.path}, created_by=researcher,
                              status=Run.Status.RUNNING, data_source={"type": "arithmetic", "level": 1, "size": 8})
    with pytest.raises(RemovalRefused, match=rf"step 20: run #{user.pk} \(running\)"):
        checkpoint_delete(checkpoint_id=checkpoint.pk, user=researcher)
    with pytest.raises(RemovalRefused, match=rf"step 20: run #{user.pk} \(running\)"):
        run_delete(run_id=run.pk, user=researcher)
    Run.objects.filter(pk=user.pk).update(status=Run.Status.SUCCEEDED)
    project = make_project(items=1, owner=researcher)
    job = SamplingJob.objects.create(project=project, model_path=checkpoint.path, status=SamplingJob.Status.RUNNING)
    with pytest.raises(RemovalRefused, match=f"sampling job {job.pk}"):
        checkpoint_delete(checkpoint_id=checkpoint.pk, user=researcher)
    assert Path(checkpoint.path).is_dir()


def test_deleting_a_checkpoint_frees_its_directory_and_the_run_points_at_the_one_left(researcher):
    run = make_run_with_files(researcher)
    latest = ModelRef.objects.get(run=run, step=20)
    assert checkpoint_delete(checkpoint_id=latest.pk, user=researcher).bytes == 4000
    assert not Path(latest.path).exists() and not ModelRef.objects.filter(pk=latest.pk).exists()
    run.refresh_from_db()
    assert run.checkpoint_path == ModelRef.objects.get(run=run, step=10).path
    assert run_disk_bytes(run) == 3750


def test_an_archived_run_is_hidden_from_the_list_unless_asked_for_and_can_be_unarchived(researcher):
    run = make_run_with_files(researcher)
    run_archive(run_id=run.pk, user=researcher)
    assert run not in runs_list(user=researcher)
    assert run in runs_list(user=researcher, archived="only") and run in runs_list(user=researcher, archived="all")
    run_archive(run_id=run.pk, user=researcher, archived=False)
    assert run in runs_list(user=researcher)


def test_a_project_is_archived_and_deleted_with_its_uploads_and_refused_while_a_run_trains_on_it(researcher,
                                                                                                   annotator):
    project = make_project(items=2, owner=researcher, members=[annotator])
    upload = Path(settings.DATA_DIR) / "uploads" / f"project-{project.pk}.jsonl"
    _write(upload, 1234)
    ImportJob.objects.create(project=project, file_name="p.jsonl", file_format="jsonl", upload_path=str(upload),
                             status=ImportJob.Status.SUCCEEDED)
    assert project_disk_bytes(project) == 1234
    assert [row.project for row in own_progress(user=annotator)] == [project]
    project_archive(project_id=project.pk, user=researcher)
    assert Project.objects.get(pk=project.pk).archived_at is not None
    assert own_progress(user=annotator) == []  # no longer offered to its annotators
    assert list(project_list(researcher)) == [] and list(project_list(researcher, archived=True)) == [project]
    run = Run.objects.create(name="on it", kind="dpo", config={}, created_by=researcher, status=Run.Status.RUNNING,
                             data_source={"type": "project_pairs", "project_id": project.pk})
    with pytest.raises(RemovalRefused, match=rf"in use by run #{run.pk} \(running\)"):
        project_delete(project_id=project.pk, user=researcher)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    assert project_delete(project_id=project.pk, user=researcher).bytes == 1234
    assert not upload.exists()
    assert not Project.objects.filter(pk=project.pk).exists() and not Prompt.objects.filter(project_id=project.pk).exists()
    assert Run.objects.filter(pk=run.pk).exists()  # the run keeps its own copy of the data
