"""Issue 27: a run trains in a child process of its worker, which the worker can end. A step stuck for ever, deaf to
the cancel (the test-only debug_hang_at_step), is killed PREFLAB_CANCEL_GRACE_S after the worker saw the cancel and
the run marked canceled saying so, with no process left and the worker free for the next run; the heartbeat follows
the training process (none while it is stopped), and a training process killed from outside fails its run naming
the signal. Real worker processes, the tiny model."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.webapp.experiments.helpers import (
    ARITHMETIC,
    run_status,
    small_config,
    wait_for,
)
from webapp.experiments import services
from webapp.experiments.models import MetricRow, Run
from workers.supervision import HEARTBEAT_S, is_running

pytestmark = pytest.mark.django_db(transaction=True)

GRACE_S = 3
# The bound the README states: the grace, plus a second for the worker to see the cancel and one for it to act.
CANCEL_BOUND_S = GRACE_S + 2 * HEARTBEAT_S
FINISHED = (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELED)


def training_processes(run_id: int) -> list[int]:
    """The pids of the run's training process(es), `python -m workers.rank RUN_ID`, as /proc shows them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if arguments[-3:] == [b"-m", b"workers.rank", str(run_id).encode()]:
            found.append(int(entry.name))
    return found


def _launch(tiny_model, researcher, name: str, **config) -> Run:
    return services.run_create(kind="reward_model", config=small_config(tiny_model, **config), data_source=ARITHMETIC,
                               created_by=researcher, name=name)


def _stuck_at_step_3(tiny_model, researcher, worker, name: str, **config) -> Run:
    """A run whose third step hangs for ever, deaf to a cancel, once it has logged its second."""
    run = _launch(tiny_model, researcher, name, debug_hang_at_step=3, checkpoint_every=0, **config)
    wait_for(lambda: Run.objects.get(pk=run.pk).current_step == 2, timeout_s=180,
             what=lambda: f"two steps\n{worker.log_tail()}")
    return run


def _cancel_and_wait(run: Run, worker) -> float:
    """Cancel the run and wait for its end: the seconds from the cancel to the run's end."""
    services.run_cancel(run_id=run.pk)
    canceled_at = time.monotonic()
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=CANCEL_BOUND_S + 10,
             what=lambda: f"the cancel\n{worker.log_tail()}")
    run.refresh_from_db()
    return time.monotonic() - canceled_at


def _heartbeat(run: Run) -> float:
    return Run.objects.get(pk=run.pk).heartbeat_at.timestamp()


def test_a_step_deaf_to_the_cancel_is_killed_within_the_bound_and_the_worker_runs_the_next_run(
    celery_worker_factory, tiny_model, researcher
):
    worker = celery_worker_factory(queues=("gpu",), PREFLAB_CANCEL_GRACE_S=str(GRACE_S))
    stuck = _stuck_at_step_3(tiny_model, researcher, worker, "stuck at step 3")
    (child,) = training_processes(stuck.pk)
    assert child != worker.process.pid
    # stuck, and alive: no step after 2, and the heartbeat goes on, written by the worker while its child runs
    beat = _heartbeat(stuck)
    wait_for(lambda: _heartbeat(stuck) > beat, timeout_s=5, what="a heartbeat while the step hangs")
    assert Run.objects.get(pk=stuck.pk).current_step == 2 and run_status(stuck.pk) == Run.Status.RUNNING

    ended_after_s = _cancel_and_wait(stuck, worker)
    print(f"a step deaf to the cancel: canceled {ended_after_s:.1f} s after the cancel (grace {GRACE_S} s, bound "
          f"{CANCEL_BOUND_S:g} s)")
    assert stuck.status == Run.Status.CANCELED
    assert stuck.error == f"did not stop within {GRACE_S} s of the cancel (PREFLAB_CANCEL_GRACE_S); its processes " \
                          "were killed"
    assert GRACE_S <= ended_after_s <= CANCEL_BOUND_S
    assert not MetricRow.objects.filter(run=stuck, step__gt=2).exists()
    wait_for(lambda: not is_running(child) and not training_processes(stuck.pk), timeout_s=5,
             what="the stuck training process to be gone")

    after = _launch(tiny_model, researcher, "the next run", max_steps=3)
    wait_for(lambda: run_status(after.pk) in FINISHED, timeout_s=120, what=lambda: f"the next run\n{worker.log_tail()}")
    after.refresh_from_db()
    assert after.status == Run.Status.SUCCEEDED, after.error
    assert worker.process.poll() is None


def test_no_heartbeat_while_the_training_is_stopped_and_a_killed_one_fails_its_run_naming_the_signal(
    celery_worker_factory, tiny_model, researcher
):
    worker = celery_worker_factory(queues=("gpu",))
    run = _stuck_at_step_3(tiny_model, researcher, worker, "stopped, then killed")
    (child,) = training_processes(run.pk)
    os.kill(child, signal.SIGSTOP)
    try:
        time.sleep(2 * HEARTBEAT_S)  # a beat under way when it stopped may still land
        beat = _heartbeat(run)
        time.sleep(3 * HEARTBEAT_S)
        assert _heartbeat(run) == beat, "the worker beat for a stopped training"
    finally:
        os.kill(child, signal.SIGCONT)
    wait_for(lambda: _heartbeat(run) > beat, timeout_s=5, what="the heartbeat once the training runs again")

    os.kill(child, signal.SIGKILL)
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=10, what=lambda: f"the failure\n{worker.log_tail()}")
    run.refresh_from_db()
    print(f"--- the run's error ---\n{run.error}")
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("the training process was killed by signal 9 (SIGKILL)\n\nits last lines of output:")
    assert "debug_hang_at_step: step 3 hangs for ever" in run.error  # the tail of what it wrote
    assert worker.process.poll() is None and not training_processes(run.pk)


def test_a_run_on_two_processes_deaf_to_the_cancel_is_ended_whole_within_the_bound(
    celery_worker_factory, tiny_model, researcher
):
    worker = celery_worker_factory(queues=("gpu",), PREFLAB_CANCEL_GRACE_S=str(GRACE_S))
    run = _stuck_at_step_3(tiny_model, researcher, worker, "two stuck ranks", num_processes=2)
    group = training_processes(run.pk)
    assert len(group) == 3  # torchrun and its two ranks, whose command lines end alike
    ended_after_s = _cancel_and_wait(run, worker)
    print(f"two ranks deaf to the cancel: canceled {ended_after_s:.1f} s after the cancel")
    assert run.status == Run.Status.CANCELED and run.error.startswith(f"did not stop within {GRACE_S} s of the cancel")
    assert ended_after_s <= CANCEL_BOUND_S
    wait_for(lambda: not any(map(is_running, group)) and not training_processes(run.pk), timeout_s=10,
             what=f"torchrun and the ranks {group} to be gone")
