"""A run's execution on a GPU worker: database rows -> trainer -> database rows (DESIGN section 2).

`run_execute` claims the queued run, builds its config and training rows, calls the kind's train function
with a `DatabaseSink`, and reports the outcome; every write goes through the experiments services.

The database sink (trainer.sink.Sink) batches metric rows and samples, registers checkpoints as models and
reads should_stop from the run. A background thread writes the heartbeat and flushes what the loop logged at
least once a second, so a step slower than the heartbeat timeout still shows the worker alive, and a killed
worker loses at most a second.

A run with more than one process (config.num_processes) is not trained here: `run_distributed` starts torchrun,
one `python -m workers.rank RUN_ID` per process, and watches it. Rank 0 reports through a `DatabaseSink` and
records the run's end; the worker beats for the whole group while it lives (model loading included) and, when
torchrun fails with the run still running, fails it naming the rank that failed, why, and the tail of its log.
The logs of every launch stay under the run's output directory, in torchrun/<launch>/.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config import BaseConfig, config_from_dict
from trainer.kinds import run_kind
from trainer.sink import SampleRow, Sink
from webapp.experiments import services
from webapp.experiments.data_sources import training_rows
from webapp.experiments.models import Run
from workers.heartbeat import Heartbeat

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 1.0
# Flush early when this many steps are pending, so one write never grows large.
MAX_PENDING_ROWS = 500
TRACEBACK_LINES = 30


def run_execute(*, run_id: int) -> None:
    """Train a queued run in this worker; a run that is not queued (e.g. a redelivered task) is left alone."""
    run = services.run_start(run_id=run_id)
    if run is None:
        return
    config = _config_or_none(run)
    if config is not None and config.num_processes > 1:
        run_distributed(run_id=run_id, config=config)
        return
    sink = DatabaseSink(run_id)
    try:
        result = run_train(run, sink)
    except Exception as error:
        sink.close()
        run_fail_with(run_id, error)
        return
    sink.close()
    services.run_finish(run_id=run_id, stopped=result.stopped)


def run_train(run: Run, sink: Sink) -> Any:
    """The run's config and training rows from the database, trained by its kind (the kind's TrainResult)."""
    config = config_from_dict(run.kind, run.config)
    data, eval_data = training_rows(run.kind, run.data_source)
    return run_kind(run.kind).train_function()(config, data, sink, eval_data=eval_data)


def run_error_text(error: BaseException) -> str:
    tail = "".join(traceback.format_exception(error)).splitlines()[-TRACEBACK_LINES:]
    return f"{type(error).__name__}: {error}\n\n" + "\n".join(tail)


def run_fail_with(run_id: int, error: BaseException) -> None:
    services.run_fail(run_id=run_id, error=run_error_text(error))


def _config_or_none(run: Run) -> BaseConfig | None:
    # a config that does not load fails the run through run_train, with the same message as ever
    try:
        return config_from_dict(run.kind, run.config)
    except Exception:
        return None


class DatabaseSink:
    def __init__(self, run_id: int, *, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.run_id = run_id
        self.flush_interval_s = flush_interval_s
        self._lock = threading.Lock()
        self._rows: list[dict] = []
        self._samples: list[SampleRow] = []
        self._heartbeat = Heartbeat(self._beat, every_s=flush_interval_s, name=f"run-{run_id}-heartbeat").__enter__()

    def start(self, *, total_steps: int, start_step: int) -> None:
        services.run_training_started(run_id=self.run_id, total_steps=total_steps, start_step=start_step)

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        row = {"step": step, "wall_time": time.time(), "tokens_seen": tokens_seen, "metrics": dict(metrics)}
        with self._lock:
            self._rows.append(row)
            full = len(self._rows) >= MAX_PENDING_ROWS
        if full:
            self.flush()

    def sample(self, row: SampleRow) -> None:
        with self._lock:
            self._samples.append(row)

    def should_stop(self) -> bool:
        # The run may also have been failed by the stale check (a step slower than the timeout): stop then too.
        status, cancel = Run.objects.filter(pk=self.run_id).values_list("status", "cancel_requested").get()
        return cancel or status != Run.Status.RUNNING

    def checkpoint(self, step: int, path: str) -> None:
        self.flush()
        services.model_register_checkpoint(run_id=self.run_id, step=step, path=path)

    def checkpoint_removed(self, step: int, path: str) -> bool:
        return services.model_checkpoint_release(run_id=self.run_id, path=path)

    def flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
            samples, self._samples = self._samples, []
            # Written under the lock so rows of two flushes never race (thread and loop).
            services.metric_rows_write(run_id=self.run_id, rows=rows)
            if samples:
                services.samples_write(run_id=self.run_id, samples=samples)

    def close(self) -> None:
        self._heartbeat.stop()
        self.flush()

    def _beat(self) -> None:
        self.flush()
        services.run_heartbeat(run_id=self.run_id)


# --- a run on many processes: torchrun, started and watched by this worker -----------------------------------

RANK_LOG_TAIL_LINES = 30
LAUNCHER_LOG_TAIL_LINES = 30
PR_SET_PDEATHSIG = 1
# What a rank's error says when it only saw another rank vanish (gloo: the peer's socket closed; NCCL: the
# communicator aborted): the rank that vanished is the one to name.
PEER_LOSS = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|DistNetworkError|NCCL communicator was aborted", re.IGNORECASE
)
# One entry of torchrun's failure summary ("Root Cause (first observed failure):" and "Failures:").
SUMMARY_ENTRY = re.compile(
    r"rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<exit_code>-?\d+) \(pid: \d+\)[^\n]*\n"
    r"\s*error_file\s*:\s*(?P<error_file>\S+)"
)
ROOT_CAUSE_HEADING = "Root Cause (first observed failure):"


def is_peer_loss(error: BaseException) -> bool:
    return is_peer_loss_text(f"{type(error).__name__}: {error}")


def is_peer_loss_text(text: str) -> bool:
    return bool(PEER_LOSS.search(text))


def run_distributed(*, run_id: int, config: BaseConfig) -> None:
    """Train the (running) run on config.num_processes processes under torchrun, beating for the group until
    torchrun exits; fail the run when it is still running then."""
    launch_dir = _new_launch_dir(Path(config.output_dir))
    logger.info("run %s: starting %s process(es) with torchrun, logs in %s", run_id, config.num_processes, launch_dir)
    exit_code = torchrun_watch(
        processes=config.num_processes, launch_dir=launch_dir, entry=["-m", "workers.rank", str(run_id)],
        beat=lambda: services.run_heartbeat(run_id=run_id), name=f"run-{run_id}",
    )
    if exit_code == 0:
        message = "torchrun exited normally but rank 0 did not record the run's end"
    else:
        message = torchrun_failure_text(launch_dir, exit_code=exit_code)
    # refused (False) when rank 0 recorded the run's end itself: its own error, a cancel or a success
    if services.run_fail(run_id=run_id, error=message):
        logger.warning("run %s failed: %s", run_id, message.splitlines()[0])


def torchrun_watch(*, processes: int, launch_dir: Path, entry: list[str], beat: Callable[[], None], name: str) -> int:
    """Run torchrun with `entry` on `processes` ranks to its end, calling `beat` every second meanwhile; its exit
    code. torchrun's own output goes to launch_dir/torchrun.log; no rank outlives this call."""
    command = torchrun_command(processes=processes, log_dir=launch_dir, entry=entry)
    with (launch_dir / "torchrun.log").open("w") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_this_worker(),
        )
    try:
        with Heartbeat(beat, every_s=FLUSH_INTERVAL_S, name=f"{name}-torchrun-heartbeat"):
            return process.wait()
    except BaseException:  # the worker is being stopped: the group goes with it
        _kill_group(process)
        raise
    finally:
        survivors = ranks_left_behind(launch_dir, entry=entry)
        if survivors:
            logger.error("%s: rank processes %s outlived torchrun; killed", name, survivors)


def torchrun_command(*, processes: int, log_dir: Path, entry: list[str]) -> list[str]:
    """torchrun starting `processes` copies of `entry` (["-m", "workers.rank", RUN_ID] for a run).

    --standalone: a rendezvous on a free local port; --redirects 3: each rank's stdout and stderr go to
    <log_dir>/<job>/attempt_0/<local_rank>/, beside the error file `record` writes there."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(processes), "--max-restarts", "0", "--log-dir", str(log_dir),
            "--redirects", "3", *entry]


def _new_launch_dir(output_dir: Path) -> Path:
    # a resumed run launches again into the same output directory: each launch keeps its own logs
    parent = output_dir / "torchrun"
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=parent))


def _die_with_this_worker() -> Any:
    """A preexec_fn that makes the kernel SIGKILL torchrun when this worker dies (each rank does the same with
    torchrun, workers.rank.die_with_parent), so a killed worker never leaves a group training. Linux only; the
    signal follows the thread that started torchrun, the task's thread, which lives as long as the worker."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return arm


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def ranks_left_behind(launch_dir: Path, *, entry: list[str]) -> list[int]:
    """Kill every rank of this launch still alive (torchrun stops the survivors when one rank fails, and the
    ranks die with torchrun; this makes sure of it) and return their pids."""
    killed = []
    for pid in rank_pids(launch_dir):
        if _is_rank_of(pid, entry):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def rank_pids(launch_dir: Path) -> list[int]:
    """The pids the ranks of a launch wrote (workers.rank.write_pid_file), in local-rank order."""
    files = sorted(launch_dir.glob("*/attempt_*/*/pid"), key=lambda path: int(path.parent.name))
    return [int(path.read_text()) for path in files if path.read_text().strip().isdigit()]


def _is_rank_of(pid: int, entry: list[str]) -> bool:
    """pid is a live (not zombie) rank running `entry`: a recycled pid is never killed."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and arguments[:-1][-len(entry):] == entry  # cmdline ends with a NUL


@dataclass(frozen=True)
class RankFailure:
    """One failed rank as torchrun's summary reports it (exit_code None: torchrun wrote no summary)."""

    rank: int
    local_rank: int
    exit_code: int | None
    error_file: Path | None
    root_cause: bool = False

    @property
    def error(self) -> dict[str, str] | None:
        """The exception `record` wrote: {"message": "ValueError: …", "traceback": "…"}."""
        if self.error_file is None or not self.error_file.is_file():
            return None
        try:
            message = json.loads(self.error_file.read_text())["message"]
        except (ValueError, KeyError):
            return None
        if isinstance(message, str):
            return {"message": message, "traceback": ""}
        return {"message": message.get("message", ""),
                "traceback": message.get("extraInfo", {}).get("py_callstack", "")}

    @property
    def is_consequence(self) -> bool:
        """This rank failed because another did: it saw its peer vanish, or torchrun stopped it (SIGTERM)."""
        error = self.error
        if error is not None:
            return is_peer_loss_text(error["message"])
        return self.exit_code == -signal.SIGTERM

    def headline(self) -> str:
        error = self.error
        if error is not None:
            return f"rank {self.rank} failed: {error['message']}"
        if self.exit_code is None:
            return f"rank {self.rank} failed"
        if self.exit_code < 0:
            number = -self.exit_code
            return f"rank {self.rank} was killed by signal {number} ({_signal_name(number)})"
        return f"rank {self.rank} exited with code {self.exit_code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def torchrun_failure_text(launch_dir: Path, *, exit_code: int) -> str:
    """Why torchrun failed: the rank that caused it, its error or exit, and the tail of its stderr."""
    launcher_log = launch_dir / "torchrun.log"
    failures = summary_failures(_read_text(launcher_log)) or error_file_failures(launch_dir)
    culprit = failed_rank(failures)
    if culprit is None:
        return (f"torchrun exited with code {exit_code} and named no failed rank; the last lines of its log "
                f"({launcher_log}):\n" + _tail(_read_text(launcher_log), LAUNCHER_LOG_TAIL_LINES))
    parts = [culprit.headline()]
    stderr_log = _rank_log(launch_dir, culprit.local_rank, "stderr.log")
    log_tail = _tail(_read_text(stderr_log), RANK_LOG_TAIL_LINES) if stderr_log is not None else ""
    error = culprit.error
    if log_tail.strip():
        parts.append(f"last lines of rank {culprit.rank}'s stderr ({stderr_log}):\n{log_tail}")
    elif error is not None and error["traceback"]:
        parts.append(_tail(error["traceback"], TRACEBACK_LINES))
    return "\n\n".join(parts)


def summary_failures(launcher_output: str) -> list[RankFailure]:
    """The failed ranks of torchrun's summary (what `torchrun` prints when a rank fails):

        Root Cause (first observed failure):
        [0]:
          time      : 2026-11-25_03:43:28
          host      : localhost
          rank      : 1 (local_rank: 1)
          exitcode  : -9 (pid: 8046)  (SIGKILL)
          error_file: <N/A>
    """
    root_cause_at = launcher_output.rfind(ROOT_CAUSE_HEADING)
    failures = []
    for entry in SUMMARY_ENTRY.finditer(launcher_output):
        error_file = entry["error_file"]
        failures.append(RankFailure(
            rank=int(entry["rank"]), local_rank=int(entry["local_rank"]), exit_code=int(entry["exit_code"]),
            error_file=None if error_file == "<N/A>" else Path(error_file),
            root_cause=root_cause_at != -1 and entry.start() > root_cause_at,
        ))
    return failures


def error_file_failures(launch_dir: Path) -> list[RankFailure]:
    """Ranks that left an error file, when torchrun printed no summary (it was killed, say)."""
    return [RankFailure(rank=int(path.parent.name), local_rank=int(path.parent.name), exit_code=None, error_file=path)
            for path in sorted(launch_dir.glob("*/attempt_*/*/error.json"))]


def failed_rank(failures: list[RankFailure]) -> RankFailure | None:
    """The rank to blame: torchrun's root cause unless it only failed because another rank did (torchrun orders
    failures by the time it saw them, and a rank whose peer died may report first)."""
    ordered = sorted(failures, key=lambda failure: not failure.root_cause)
    causes = [failure for failure in ordered if not failure.is_consequence]
    return (causes or ordered or [None])[0]


def _rank_log(launch_dir: Path, local_rank: int, name: str) -> Path | None:
    return next(iter(sorted(launch_dir.glob(f"*/attempt_*/{local_rank}/{name}"))), None)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _tail(text: str, lines: int) -> str:
    # a progress bar redraws its line with carriage returns: keep what it showed last
    shown = [line.rsplit("\r", 1)[-1] for line in text.rstrip("\n").split("\n")]
    return "\n".join(shown[-lines:])
