"""A run on many processes, started and watched by its gpu worker (workers.training.run_execute hands it over).

`run_distributed` starts torchrun, one `python -m workers.rank RUN_ID` per process, and watches it. Rank 0 reports
through a `DatabaseSink` and records the run's end; the worker beats for the whole group while it lives (model
loading included) and, when torchrun fails with the run still running, fails it naming the rank that failed, why,
and the tail of its log. The logs of every launch stay under the run's output directory, in torchrun/<launch>/.
No rank outlives the watch: torchrun dies with the worker, the ranks die with torchrun, and any left is killed.
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer.config import BaseConfig
from trainer.distributed import torchrun_command
from webapp.experiments import services
from workers.heartbeat import Heartbeat

logger = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
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
    command = torchrun_command(processes, *entry, log_dir=str(launch_dir))
    with (launch_dir / "torchrun.log").open("w") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_this_worker(),
        )
    try:
        with Heartbeat(beat, every_s=HEARTBEAT_S, name=f"{name}-torchrun-heartbeat"):
            return process.wait()
    except BaseException:  # the worker is being stopped: the group goes with it
        _kill_group(process)
        raise
    finally:
        survivors = ranks_left_behind(launch_dir, entry=entry)
        if survivors:
            logger.error("%s: rank processes %s outlived torchrun; killed", name, survivors)


def _new_launch_dir(output_dir: Path) -> Path:
    # a resumed run launches again into the same output directory: each launch keeps its own logs
    parent = output_dir / "torchrun"
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=parent))


def _die_with_this_worker() -> Callable[[], None] | None:
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
        parts.append(_tail(error["traceback"], RANK_LOG_TAIL_LINES))
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
    # a progress bar redraws its line with carriage returns: keep what it showed last; blank lines say nothing
    shown = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n")]
    return "\n".join([line for line in shown if line.strip()][-lines:])
