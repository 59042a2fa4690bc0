"""How a gpu worker holds a run's training: in processes of their own that it can stop, never in itself.

A run on one process trains in a child, `python -m workers.rank RUN_ID` (workers.training.run_in_child); a run on
many trains in torchrun's ranks (workers.torchrun). Either is started in a process group (a session) of its own that
the kernel kills when the worker dies, and the worker watches it once a second until it exits:

- The heartbeat says the training is alive: the worker writes the run's heartbeat only while the process it started
  (and under torchrun every rank that has started) exists and runs, neither a zombie nor stopped. A thread of the
  worker that beats whatever the training does would keep a dead or frozen run "running" for ever.
- A cancel is answered by the training itself at its next step (the sink's should_stop), which writes a checkpoint
  and records the run canceled. A training that has not done so PREFLAB_CANCEL_GRACE_S after the worker saw the
  cancel (a step stuck in a loop, a hung collective) is killed, its whole group, and the run is marked canceled
  saying so; the worker is then free for its next job.
- A run that ended elsewhere (its training recorded the end, the stale check failed it, another node did) gives its
  processes STOP_GRACE_S to exit, then they are killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from webapp.experiments import selectors, services
from workers.heartbeat import Heartbeat

logger = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
# Once the run has ended, its processes get this long to exit before they are killed.
STOP_GRACE_S = 15.0
PR_SET_PDEATHSIG = 1
# /proc/PID/stat states of a process that is not running: a zombie (exited, not yet reaped), dead, stopped (a
# signal, a debugger).
NOT_RUNNING_STATES = frozenset("ZXxTt")
PROC = Path("/proc")


def start_group(command: list[str], *, stdout: int | IO[Any], env: dict[str, str] | None = None) -> subprocess.Popen:
    """`command` in a session of its own (so that its group can be killed whole), killed by the kernel when this
    worker dies; stderr goes with stdout."""
    return subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=_die_with_this_worker(), env=env,
    )


def _die_with_this_worker() -> Callable[[], None] | None:
    """A preexec_fn that makes the kernel SIGKILL the child when this worker dies (a rank does the same with
    torchrun, workers.rank.die_with_parent), so a killed worker never leaves a training behind. Linux only; the
    signal follows the thread that started the child, the task's thread, which lives as long as the worker."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return arm


def kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def is_running(pid: int) -> bool:
    """The process exists and runs (or waits, as a process does), neither a zombie nor stopped."""
    if not PROC.is_dir():  # not Linux: whether it exists at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in NOT_RUNNING_STATES


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def cancel_unanswered_text(grace_s: float) -> str:
    return (f"did not stop within {grace_s:g} s of the cancel (PREFLAB_CANCEL_GRACE_S); its processes were killed")


class Verdict(Enum):
    TRAIN_ON = "train on"
    ENDED = "ended"  # the run ended elsewhere and its processes are past STOP_GRACE_S (or never started)
    CANCEL_UNANSWERED = "cancel unanswered"


@dataclass
class RunWatch:
    """The run's side of a watch, read once a second: has it ended elsewhere, is its cancel unanswered."""

    run_id: int
    # whether the training processes have started (torchrun's ranks, which on several nodes first wait for the others)
    started: Callable[[], bool] = lambda: True
    # a node of a run on several nodes: a cancel while the nodes still meet (no rank started) ends the wait at once
    several_nodes: bool = False
    grace_s: float = field(default_factory=lambda: settings.PREFLAB_CANCEL_GRACE_S)
    _ended_at: float | None = None
    _cancel_seen_at: float | None = None

    def verdict(self) -> Verdict:
        state = selectors.run_launch_state(run_id=self.run_id)
        now = time.monotonic()
        if not state.running or (self.several_nodes and state.cancel_requested and not self.started()):
            self._ended_at = self._ended_at or now
            if not self.started() or now - self._ended_at > STOP_GRACE_S:
                return Verdict.ENDED
            return Verdict.TRAIN_ON
        self._ended_at = None
        if state.cancel_requested:
            self._cancel_seen_at = self._cancel_seen_at or now
            if now - self._cancel_seen_at > self.grace_s:
                return Verdict.CANCEL_UNANSWERED
        return Verdict.TRAIN_ON


def watch(
    process: subprocess.Popen, *, name: str, alive: Callable[[], bool], beat: Callable[[], Any],
    run: RunWatch | None = None,
) -> int:
    """Wait for `process` (a group leader from start_group) to exit, calling `beat` each second while `alive()` says
    the training lives, and with `run` ending the group when the run says so (the module's docstring); its exit code.
    If this worker is being stopped, the group goes with it."""

    def beat_while_alive() -> None:
        if alive():
            beat()

    try:
        with Heartbeat(beat_while_alive, every_s=HEARTBEAT_S, name=f"{name}-heartbeat"):
            return _wait(process, name=name, run=run)
    except BaseException:
        kill_group(process)
        raise


def _wait(process: subprocess.Popen, *, name: str, run: RunWatch | None) -> int:
    while True:
        try:
            return process.wait(timeout=HEARTBEAT_S)
        except subprocess.TimeoutExpired:
            pass
        verdict = Verdict.TRAIN_ON if run is None else run.verdict()
        if verdict is Verdict.ENDED:
            logger.warning("%s: the run has ended and its processes still run: killed", name)
            kill_group(process)
            return process.returncode
        if verdict is Verdict.CANCEL_UNANSWERED:
            kill_group(process)
            # refused if the training recorded its end in the meantime
            if services.run_cancel_unanswered(run_id=run.run_id, reason=cancel_unanswered_text(run.grace_s)):
                logger.warning("%s: canceled; it %s", name, cancel_unanswered_text(run.grace_s))
            return process.returncode
