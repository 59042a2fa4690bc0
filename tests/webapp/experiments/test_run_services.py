import math
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from tests.webapp.experiments.helpers import ARITHMETIC, small_config
from webapp.experiments import selectors, services
from webapp.experiments.models import MetricRow, ModelRef, Run, Sample
from workers.training import run_execute

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr("webapp.queueing.publish", lambda task, *, kind, object_id, args=(): sent.append(object_id))
    return sent


def _create(tiny_model, researcher, **overrides) -> Run:
    return services.run_create(kind="reward_model", config=small_config(tiny_model, **overrides),
                               data_source=ARITHMETIC, created_by=researcher, name="rm")


def test_run_is_validated_stored_and_queued_after_commit(tiny_model, researcher, queued,
                                                         django_capture_on_commit_callbacks, settings):
    with django_capture_on_commit_callbacks(execute=True):
        run = _create(tiny_model, researcher)
        assert queued == []  # not before the transaction commits
    assert queued == [run.pk]
    assert run.status == Run.Status.QUEUED
    assert run.config["output_dir"] == str(settings.RUNS_DIR / str(run.pk))
    assert run.config["center_coef"] == 0.0  # defaults filled in from the dataclass


def test_bad_config_names_the_field(tiny_model, researcher, queued):
    with pytest.raises(ValidationError) as error:
        _create(tiny_model, researcher, batch_size=3, grad_accum_steps=2)
    assert "batch_size" in error.value.message_dict
    with pytest.raises(ValidationError) as error:
        services.run_create(kind="reward_model", config={**small_config(tiny_model), "model": "/etc"},
                            data_source=ARITHMETIC, created_by=researcher)
    assert "outside the allowed model roots" in error.value.message_dict["model"][0]
    assert not Run.objects.exists()


def test_cancel_a_queued_run_at_once_and_a_running_one_at_its_next_step(tiny_model, researcher, queued):
    first, second = _create(tiny_model, researcher), _create(tiny_model, researcher)
    services.run_cancel(run_id=first.pk)
    first.refresh_from_db()
    assert first.status == Run.Status.CANCELED
    Run.objects.filter(pk=second.pk).update(status=Run.Status.RUNNING)
    services.run_cancel(run_id=second.pk)
    second.refresh_from_db()
    assert second.status == Run.Status.RUNNING and second.cancel_requested


def test_run_execute_leaves_a_run_that_is_not_queued_alone(tiny_model, researcher, queued):
    run = _create(tiny_model, researcher)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, error="killed")
    run_execute(run_id=run.pk)  # e.g. a redelivered task after the worker was killed
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error == "killed"


def test_nan_and_inf_are_stored_as_text_and_returned_as_markers(tiny_model, researcher, queued):
    run = _create(tiny_model, researcher)
    rows = [{"step": step, "wall_time": 1000.0 + step, "tokens_seen": 10 * step,
             "metrics": {"loss": math.nan if step == 3 else 1.0 / step, "kl": math.inf if step == 2 else 0.1}}
            for step in range(1, 5)]
    services.metric_rows_write(run_id=run.pk, rows=rows)
    assert MetricRow.objects.get(run=run, step=3).metrics["loss"] == "NaN"
    series = selectors.metric_series(run_id=run.pk)["series"]
    assert series["loss"]["nonfinite_x"] == [3] and series["loss"]["nonfinite"] == ["NaN"]
    assert series["loss"]["x"] == [1, 2, 4]
    assert series["kl"]["nonfinite"] == ["Infinity"]
    run.refresh_from_db()
    assert run.current_step == 4 and run.tokens_seen == 40
    assert [alert["kind"] for alert in run.alerts] == ["loss_nan"]


def test_kl_and_entropy_alerts_are_raised_once(tiny_model, researcher, queued):
    run = _create(tiny_model, researcher)
    for step in (1, 2):
        services.metric_rows_write(run_id=run.pk, rows=[
            {"step": step, "wall_time": 0.0, "tokens_seen": 0, "metrics": {"kl": 5.0, "entropy": 0.001}}])
    run.refresh_from_db()
    assert [(alert["kind"], alert["step"]) for alert in run.alerts] == [("kl_high", 1), ("entropy_collapse", 1)]


def test_a_run_sets_its_own_alert_thresholds_and_zero_turns_one_off(tiny_model, researcher, queued):
    config = {"model": tiny_model.path, "batch_size": 2, "group_size": 2, "max_new_tokens": 8, "max_length": 40,
              "max_prompt_length": 16, "max_steps": 4, "alert_kl_above": 5.0, "alert_entropy_below": 0}
    run = services.run_create(kind="grpo", config=config, data_source=ARITHMETIC, created_by=researcher, name="grpo")
    for step, kl in ((1, 3.0), (2, 6.0)):
        services.metric_rows_write(run_id=run.pk, rows=[
            {"step": step, "wall_time": 0.0, "tokens_seen": 0, "metrics": {"kl": kl, "entropy": 0.001}}])
    run.refresh_from_db()
    assert [(alert["kind"], alert["step"]) for alert in run.alerts] == [("kl_high", 2)]
    assert run.alerts[0]["message"] == "KL 6 above 5 at step 2"
    with pytest.raises(ValidationError, match="alert_kl_above"):
        services.run_create(kind="grpo", config={**config, "alert_kl_above": -1.0}, data_source=ARITHMETIC,
                            created_by=researcher, name="bad")


def test_stale_heartbeat_fails_the_run_with_the_reason(tiny_model, researcher, queued):
    run = _create(tiny_model, researcher)
    old = timezone.now() - timedelta(seconds=30)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, heartbeat_at=old, started_at=old)
    fresh = _create(tiny_model, researcher)
    Run.objects.filter(pk=fresh.pk).update(status=Run.Status.RUNNING, heartbeat_at=timezone.now())
    with override_settings(PREFLAB_HEARTBEAT_TIMEOUT_S=10):
        assert services.runs_fail_stale() == [run.pk]
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("worker stopped sending heartbeats; last at ")
    assert run.alerts[0]["kind"] == "stale_heartbeat"
    assert Run.objects.get(pk=fresh.pk).status == Run.Status.RUNNING


def test_resume_rewinds_rows_after_the_checkpoint_and_requeues(tiny_model, researcher, queued,
                                                             django_capture_on_commit_callbacks, tmp_path):
    run = _create(tiny_model, researcher)
    services.metric_rows_write(run_id=run.pk, rows=[
        {"step": step, "wall_time": 0.0, "tokens_seen": step, "metrics": {"loss": 1.0}} for step in range(1, 6)])
    services.samples_write(run_id=run.pk, samples=[
        {"step": step, "prompt": "p", "completion": "c", "rewards": {}, "advantage": None} for step in (2, 4)])
    for step in (2, 4):
        services.model_register_checkpoint(run_id=run.pk, step=step, path=str(tmp_path / f"step-{step}"))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, error="worker died")
    checkpoint = ModelRef.objects.get(run=run, step=2)
    with django_capture_on_commit_callbacks(execute=True):
        resumed = services.run_resume(run_id=run.pk, checkpoint_id=checkpoint.pk, remove_later=True)
    assert resumed.status == Run.Status.QUEUED and resumed.error == ""
    assert resumed.config["resume_from"] == checkpoint.path
    assert list(MetricRow.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
    assert list(Sample.objects.filter(run=run).values_list("step", flat=True)) == [2]
    assert list(ModelRef.objects.filter(run=run).values_list("step", flat=True)) == [2]
    assert queued == [run.pk]


def test_a_sample_with_a_nul_character_is_stored_with_a_replacement_character(tiny_model, researcher, queued):
    # a young policy over a byte-level tokenizer can write any byte; Postgres text cannot hold NUL
    run = _create(tiny_model, researcher)
    services.samples_write(run_id=run.pk, samples=[
        {"step": 1, "prompt": "Calculate 1 + 1\n", "completion": "2\x00<answer>", "rewards": {"answer_match": 0.0},
         "advantage": -0.5}])
    assert Sample.objects.get(run=run).completion == "2\ufffd<answer>"


def test_config_diff_shows_only_differing_keys(tiny_model, researcher, queued):
    first = _create(tiny_model, researcher)
    second = _create(tiny_model, researcher, lr=0.001, seed=3)
    assert [key for key, _ in selectors.config_diff([first, second])] == ["lr", "seed"]
    assert selectors.config_diff([first, second])[0][1] == [0.0001, 0.001]


def test_a_new_runs_leftover_output_directory_is_moved_aside_not_counted(tiny_model, researcher, queued, settings):
    first = _create(tiny_model, researcher)
    leftover = settings.RUNS_DIR / str(first.pk + 1) / "checkpoints" / "step-3"
    leftover.mkdir(parents=True)
    earlier = set(settings.RUNS_DIR.iterdir())  # a data directory reused by an earlier test session keeps its own
    second = _create(tiny_model, researcher)
    assert second.pk == first.pk + 1
    assert not (settings.RUNS_DIR / str(second.pk)).exists()
    aside = [path for path in set(settings.RUNS_DIR.iterdir()) - earlier if path.name.startswith(f"{second.pk}.stale-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "step-3").is_dir()


def test_a_kto_runs_kl_alert_is_on_the_scale_of_a_whole_completions_kl(tiny_model, researcher, queued):
    config = {"model": tiny_model.path, "batch_size": 2, "max_steps": 4}
    run = services.run_create(kind="kto", config=config, data_source=ARITHMETIC, created_by=researcher, name="kto")
    assert run.config["alert_kl_above"] == 10.0
    for step, kl in ((1, 1.52), (2, 12.0)):  # 1.52: a normal KTO step (the walk's), above the online kinds' 1.0
        services.metric_rows_write(run_id=run.pk, rows=[
            {"step": step, "wall_time": 0.0, "tokens_seen": 0, "metrics": {"kl": kl}}])
    run.refresh_from_db()
    assert [(alert["kind"], alert["step"]) for alert in run.alerts] == [("kl_high", 2)]
