"""A worker SIGKILLed mid-run: the stale-heartbeat check fails the run, its rows stay, and a resume from the
last checkpoint continues the step axis without duplicates."""

import signal
import time

import pytest
from django.test import override_settings

from tests.webapp.experiments.helpers import ARITHMETIC, run_status, small_config, wait_for
from webapp.experiments import services
from webapp.experiments.models import MetricRow, ModelRef, Run

pytestmark = pytest.mark.django_db(transaction=True)

HEARTBEAT_TIMEOUT_S = 3
# Long enough that the kill lands mid-run on a fast machine (a step of the tiny model takes about 0.1 s; with 30
# steps a whole run once ended, and keep_last had removed its step-4 checkpoint, before the test looked).
STEPS = 200


def test_killed_worker_run_is_failed_then_resumed_with_a_continuous_step_axis(
    celery_worker_factory, tiny_model, researcher
):
    env = {"PREFLAB_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S)}
    worker = celery_worker_factory(queues=("gpu",), **env)
    run = services.run_create(kind="reward_model", config=small_config(tiny_model, max_steps=STEPS),
                              data_source=ARITHMETIC, created_by=researcher, name="killed")
    wait_for(lambda: ModelRef.objects.filter(run=run, step__gte=4).exists(), timeout_s=120,
             what=lambda: f"a checkpoint at step 4 or later\n{worker.log_tail()}")
    wait_for(lambda: Run.objects.get(pk=run.pk).current_step >= 5, timeout_s=60, what="step 5")
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait()
    assert run_status(run.pk) == Run.Status.RUNNING, "the run ended before the worker was killed"
    killed_at = time.time()
    rows_at_kill = list(MetricRow.objects.filter(run=run).values_list("step", "metrics"))
    steps_at_kill = [step for step, _ in rows_at_kill]
    assert steps_at_kill == list(range(1, len(steps_at_kill) + 1))

    with override_settings(PREFLAB_HEARTBEAT_TIMEOUT_S=HEARTBEAT_TIMEOUT_S):
        wait_for(lambda: bool(services.runs_fail_stale()) or run_status(run.pk) == Run.Status.FAILED,
                 timeout_s=HEARTBEAT_TIMEOUT_S + 3, what="the stale-heartbeat check")
    failed_after_s = time.time() - killed_at
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("worker stopped sending heartbeats; last at ")
    assert list(MetricRow.objects.filter(run=run).values_list("step", "metrics")) == rows_at_kill
    print(f"run failed {failed_after_s:.1f} s after SIGKILL (timeout {HEARTBEAT_TIMEOUT_S} s)")

    checkpoint = ModelRef.objects.filter(run=run).order_by("-step").first()
    assert checkpoint.step >= 4
    celery_worker_factory(queues=("gpu",), **env)
    services.run_resume(run_id=run.pk, checkpoint_id=checkpoint.pk)
    wait_for(lambda: run_status(run.pk) in (Run.Status.SUCCEEDED, Run.Status.FAILED), timeout_s=240,
             what="the resumed run")
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    rows = list(MetricRow.objects.filter(run=run).order_by("step").values_list("step", "wall_time", "metrics"))
    assert [step for step, _, _ in rows] == list(range(1, STEPS + 1))
    kept = {step: metrics for step, _, metrics in rows if step <= checkpoint.step}
    assert kept == {step: metrics for step, metrics in rows_at_kill if step <= checkpoint.step}
    assert all(wall_time > killed_at for step, wall_time, _ in rows if step > checkpoint.step)
