"""Runs trained by a real Celery worker process through the DatabaseSink, on the tiny model."""

import time

import pytest

from tests.webapp.experiments.helpers import ARITHMETIC, run_status, small_config, wait_for
from webapp.experiments import selectors, services
from webapp.experiments.models import MetricRow, ModelRef, Run

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELED)


def _create(tiny_model, researcher, **overrides) -> Run:
    return services.run_create(kind="reward_model", config=small_config(tiny_model, **overrides),
                               data_source=ARITHMETIC, created_by=researcher, name="rm")


def test_a_run_succeeds_with_metrics_checkpoints_as_models_and_a_nan_run_fails_naming_the_step(
    celery_worker_factory, tiny_model, researcher
):
    worker = celery_worker_factory(queues=("gpu",))
    good = _create(tiny_model, researcher)
    diverging = _create(tiny_model, researcher, debug_nan_at_step=3)
    wait_for(lambda: run_status(diverging.pk) in FINISHED, timeout_s=240, what=lambda: f"both runs\n{worker.log_tail()}")
    good.refresh_from_db()
    assert good.status == Run.Status.SUCCEEDED, good.error
    assert list(MetricRow.objects.filter(run=good).values_list("step", flat=True)) == [1, 2, 3, 4, 5, 6]
    assert good.current_step == good.total_steps == 6 and good.heartbeat_at is not None
    assert {"loss", "rewards/accuracy", "grad_norm", "lr"} <= set(MetricRow.objects.get(run=good, step=6).metrics)
    checkpoints = ModelRef.objects.filter(run=good, source=ModelRef.Source.CHECKPOINT).order_by("step")
    assert [checkpoint.step for checkpoint in checkpoints] == [2, 4, 6]
    assert good.checkpoint_path == checkpoints.last().path

    diverging.refresh_from_db()
    assert diverging.status == Run.Status.FAILED
    assert diverging.error.startswith("TrainingDiverged: loss is NaN at step 3"), diverging.error
    assert "Traceback" in diverging.error
    assert MetricRow.objects.get(run=diverging, step=3).metrics["loss"] == "NaN"
    loss = selectors.metric_series(run_id=diverging.pk)["series"]["loss"]
    assert loss["nonfinite_x"] == [3] and loss["nonfinite"] == ["NaN"]
    assert [alert["kind"] for alert in diverging.alerts] == ["loss_nan"]


def test_a_running_run_is_canceled_within_one_step(celery_worker_factory, tiny_model, researcher):
    worker = celery_worker_factory(queues=("gpu",))
    run = _create(tiny_model, researcher, max_steps=500, checkpoint_every=0)
    wait_for(lambda: Run.objects.get(pk=run.pk).current_step >= 2, timeout_s=120,
             what=lambda: f"two steps\n{worker.log_tail()}")
    services.run_cancel(run_id=run.pk)
    # From the moment the cancel is committed: a step that checked should_stop just before it may still run.
    canceled_at = time.time()
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=60, what="the cancel")
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELED
    # At most the step that was under way when the cancel arrived is logged after it.
    assert MetricRow.objects.filter(run=run, wall_time__gt=canceled_at).count() <= 1
    last_step = MetricRow.objects.filter(run=run).order_by("-step").first().step
    assert last_step < 500
    assert ModelRef.objects.filter(run=run, step=last_step).exists()  # a stop writes a checkpoint to resume from
