"""A run on many processes, started and watched by its gpu worker (workers.training.run_execute hands it over).

`run_distributed` starts torchrun, one `python -m workers.rank RUN_ID` per process, and watches it as
workers.supervision says: it beats for the run while torchrun and every rank it started run (model loading
included), ends the group once the run has ended or its cancel went unanswered, and when torchrun fails with the run
still running, fails the run naming the rank that failed, why, and the tail of its log. Rank 0 reports through a
`DatabaseSink` and records the run's end. The logs of every launch stay under the run's output directory, in
torchrun/<launch>/. No rank outlives the watch: torchrun dies with the worker, the ranks die with torchrun, and any
left is killed.

A run on several nodes (num_nodes N): the worker that claimed it is node 0. It holds the rendezvous (a TCP store
at PREFLAB_NODE_ADDRESS and a free port), records it on the run and publishes N - 1 `run_node_join` messages on
the gpu queue; each idle gpu worker that takes one claims its node rank (`run_node_execute`) and starts its own
torchrun on that rendezvous. Every node's worker watches its own torchrun as above: it beats for the run, fails
it naming its node, the rank and the rank's log tail, and stops its ranks once the run has ended. Nodes that do
not join within PREFLAB_NODE_JOIN_TIMEOUT_S fail the run with that reason.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from trainer.config import BaseConfig
from trainer.kinds import config_from_dict
from trainer.modeling.distributed import torchrun_command
from webapp.experiments import selectors, services
from webapp.queueing import QueueUnavailable
from workers.supervision import RunWatch, is_running, signal_name, start_group, watch

logger = logging.getLogger(__name__)

RANK_LOG_TAIL_LINES = 30
LAUNCHER_LOG_TAIL_LINES = 30
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
# what torchrun logs as it stops the ranks that are left once one has failed
STOPPING_RANK = re.compile(r"Sending process (?P<pid>\d+) closing signal SIGTERM")
# What node 0's torchrun says when the other nodes did not all join in time (the static rendezvous's TCP store).
JOIN_TIMEOUT = re.compile(r"Timed out after \d+ seconds waiting for clients\. (?P<joined>\d+)/(?P<nodes>\d+) clients joined")
# A node whose ranks only saw another node's ranks vanish waits this long for that node's worker to say why.
PEER_FAILURE_GRACE_S = 10.0


@dataclass(frozen=True)
class NodePlace:
    """This worker's part of a run on `count` nodes: node `rank`, meeting the others at `endpoint` (HOST:PORT)."""

    rank: int
    count: int
    endpoint: str
    rendezvous_id: str
    worker: str

    def torchrun_arguments(self) -> dict[str, Any]:
        return {"nodes": self.count, "node_rank": self.rank, "endpoint": self.endpoint,
                "rendezvous_id": self.rendezvous_id, "join_timeout_s": settings.PREFLAB_NODE_JOIN_TIMEOUT_S}


def is_peer_loss(error: BaseException) -> bool:
    return is_peer_loss_text(f"{type(error).__name__}: {error}")


def is_peer_loss_text(text: str) -> bool:
    return bool(PEER_LOSS.search(text))


def run_distributed(*, run_id: int, config: BaseConfig) -> None:
    """Train the (running) run on config.num_processes processes under torchrun, beating for the group until
    torchrun exits; fail the run when it is still running then. On several nodes this worker is node 0: it holds
    the rendezvous and asks the other nodes to join first."""
    node = None
    if config.num_nodes > 1:
        node = _open_rendezvous(run_id, nodes=config.num_nodes)
        if node is None:
            return
    _run_node(run_id=run_id, config=config, node=node)


def run_node_execute(*, run_id: int, node_rank: int, rendezvous_id: str) -> None:
    """Join a run on several nodes as node `node_rank`, as its node 0 asked (run_distributed); a message for a run
    no longer running, for an earlier launch of it, or for a node another worker took does nothing."""
    worker = worker_name()
    run = services.run_node_claim(run_id=run_id, node_rank=node_rank, rendezvous_id=rendezvous_id, worker=worker)
    if run is None:
        return
    node = NodePlace(rank=node_rank, count=run.rendezvous["nodes"], endpoint=run.rendezvous["endpoint"],
                     rendezvous_id=rendezvous_id, worker=worker)
    try:
        config = config_from_dict(run.kind, run.config)
    except Exception as error:  # node 0 read the same config: only a worker of another version would refuse it
        services.run_fail(run_id=run_id, error=f"node {node_rank} ({worker}): {type(error).__name__}: {error}")
        return
    _run_node(run_id=run_id, config=config, node=node)


def worker_name() -> str:
    """Which worker this is, in a run's rendezvous and its errors: this machine and this process."""
    return f"{socket.gethostname()} pid {os.getpid()}"


def _open_rendezvous(run_id: int, *, nodes: int) -> NodePlace | None:
    """Node 0's place (the rendezvous at this machine's address and a free port), recorded on the run with the
    other nodes asked to join; None when the run is no longer running or could not ask them (failed, saying why)."""
    address = settings.PREFLAB_NODE_ADDRESS
    port = free_port(address)
    node = NodePlace(rank=0, count=nodes, endpoint=f"[{address}]:{port}" if ":" in address else f"{address}:{port}",
                     rendezvous_id=uuid.uuid4().hex, worker=worker_name())
    try:
        opened = services.run_rendezvous_open(run_id=run_id, rendezvous_id=node.rendezvous_id,
                                              endpoint=node.endpoint, nodes=nodes, worker=node.worker)
    except QueueUnavailable:
        return None
    return node if opened else None


def free_port(address: str) -> int:
    """A TCP port free on every interface now (node 0's torchrun listens on it a moment later)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _run_node(*, run_id: int, config: BaseConfig, node: NodePlace | None) -> None:
    """Start this node's ranks (all of them on one node) under torchrun, watch them to their end and record why
    they ended, when the run is still running then."""
    launch_dir = _new_launch_dir(Path(config.output_dir), node)
    where = "" if node is None else f" as node {node.rank} of {node.count} at {node.endpoint}"
    logger.info("run %s: starting %s process(es) with torchrun%s, logs in %s", run_id, config.processes_per_node,
                where, launch_dir)
    exit_code = torchrun_watch(
        processes=config.processes_per_node, launch_dir=launch_dir, entry=["-m", "workers.rank", str(run_id)],
        beat=lambda: services.run_heartbeat(run_id=run_id),
        name=f"run-{run_id}" if node is None else f"run-{run_id}-node-{node.rank}", node=node,
        run=RunWatch(run_id, started=lambda: bool(rank_pids(launch_dir)), several_nodes=node is not None),
    )
    first_rank = 0 if node is None else node.rank * config.processes_per_node
    _record_exit(run_id=run_id, launch_dir=launch_dir, exit_code=exit_code, node=node, first_rank=first_rank)


def _record_exit(*, run_id: int, launch_dir: Path, exit_code: int, node: NodePlace | None, first_rank: int) -> None:
    """Fail the run with why this node's torchrun exited (its ranks are first_rank, first_rank + 1, ...), if it is
    still running (rank 0, on node 0, records a success, a cancel and its own errors)."""
    first_node = node is None or node.rank == 0
    if exit_code == 0 and not first_node:
        return
    if node is not None:
        if not rank_pids(launch_dir) and selectors.run_launch_state(run_id=run_id).cancel_requested:
            services.run_finish(run_id=run_id, stopped=True)  # canceled before its nodes had met
            return
        if exit_code != 0 and _only_lost_peers(launch_dir, first_rank=first_rank):
            # its ranks only saw another node's vanish: that node's worker says why, unless it cannot (killed)
            _wait_for_the_end(run_id, timeout_s=PEER_FAILURE_GRACE_S)
    if exit_code == 0:
        message = "torchrun exited normally but rank 0 did not record the run's end"
    else:
        message = (_join_timeout_text(launch_dir, run_id) if first_node else None) or torchrun_failure_text(
            launch_dir, exit_code=exit_code, first_rank=first_rank)
    if node is not None:
        message = f"node {node.rank} ({node.worker}): {message}"
    # refused (False) when the run's end was recorded already: by rank 0 (its own error, a cancel or a success),
    # by another node, or by the stale check
    if services.run_fail(run_id=run_id, error=message):
        logger.warning("run %s failed: %s", run_id, message.splitlines()[0])


def _wait_for_the_end(run_id: int, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and selectors.run_launch_state(run_id=run_id).running:
        time.sleep(0.2)


def _join_timeout_text(launch_dir: Path, run_id: int) -> str | None:
    """Node 0's torchrun gave up waiting for the other nodes: how many joined, and which were never taken by a
    worker or were taken but did not reach the rendezvous."""
    timed_out = JOIN_TIMEOUT.search(_read_text(launch_dir / "torchrun.log"))
    if timed_out is None:
        return None
    rendezvous = selectors.run_launch_state(run_id=run_id).rendezvous
    nodes, joined = rendezvous.get("nodes", int(timed_out["nodes"])), rendezvous.get("joined", {})
    text = (f"only {timed_out['joined']} of {nodes} nodes joined the rendezvous at {rendezvous.get('endpoint')} "
            f"within {settings.PREFLAB_NODE_JOIN_TIMEOUT_S} s (PREFLAB_NODE_JOIN_TIMEOUT_S)")
    untaken = [str(rank) for rank in range(1, nodes) if str(rank) not in joined]
    if untaken:
        return (f"{text}: no free gpu worker took the message asking node {', '.join(untaken)} to join (each node "
                "is another idle worker on the gpu queue)")
    taken = ", ".join(f"node {rank} by {worker}" for rank, worker in sorted(joined.items()) if rank != "0")
    return (f"{text}: taken ({taken}) but not reached; check that PREFLAB_NODE_ADDRESS of node 0 is an address the "
            "other nodes reach it by, and that they can connect to its ports")


def torchrun_watch(
    *, processes: int, launch_dir: Path, entry: list[str], beat: Callable[[], Any], name: str,
    node: NodePlace | None = None, run: RunWatch | None = None,
) -> int:
    """Run torchrun with `entry` on `processes` ranks (of this node: `node`'s part of a run on several) to its end,
    calling `beat` every second while torchrun and the ranks it started run; its exit code. torchrun's own output goes
    to launch_dir/torchrun.log; no rank outlives this call. With `run`, the group is ended as the run says
    (workers.supervision: the run ended elsewhere, or its cancel went unanswered)."""
    command = torchrun_command(processes, *entry, log_dir=str(launch_dir),
                               **(node.torchrun_arguments() if node is not None else {}))
    with (launch_dir / "torchrun.log").open("w") as log:
        process = start_group(command, stdout=log)
    try:
        return watch(process, name=f"{name}-torchrun", beat=beat, run=run,
                     alive=lambda: is_running(process.pid) and all(map(is_running, rank_pids(launch_dir))))
    finally:
        survivors = ranks_left_behind(launch_dir, entry=entry)
        if survivors:
            logger.error("%s: rank processes %s outlived torchrun; killed", name, survivors)


def _new_launch_dir(output_dir: Path, node: NodePlace | None = None) -> Path:
    # a resumed run launches again into the same output directory: each launch (and node) keeps its own logs
    parent = output_dir / "torchrun"
    parent.mkdir(parents=True, exist_ok=True)
    prefix = time.strftime("%Y%m%d-%H%M%S-") + ("" if node is None else f"node{node.rank}-")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


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
    stopped_by_torchrun: bool = False

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
        if self.stopped_by_torchrun:
            return True
        error = self.error
        if error is not None:
            return is_peer_loss_text(error["message"])
        return self.exit_code == -signal.SIGTERM

    def headline(self) -> str:
        error = self.error
        if error is not None:
            return f"rank {self.rank} failed: {error['message']}"
        if self.exit_code is None and self.error_file is None:
            return (f"rank {self.rank} ended without reporting an error, and torchrun did not stop it (killed by a "
                    "signal, or it exited); torchrun failed before saying how")
        if self.exit_code is None:
            return f"rank {self.rank} failed"
        if self.exit_code < 0:
            number = -self.exit_code
            return f"rank {self.rank} was killed by signal {number} ({signal_name(number)})"
        return f"rank {self.rank} exited with code {self.exit_code}"


def torchrun_failure_text(launch_dir: Path, *, exit_code: int, first_rank: int = 0) -> str:
    """Why torchrun failed: the rank that caused it, its error or exit, and the tail of its stderr. first_rank: the
    rank of this node's local rank 0 (on a node but the first of several)."""
    launcher_log = launch_dir / "torchrun.log"
    culprit = failed_rank(_failures(launch_dir, first_rank=first_rank))
    if culprit is None:
        return (f"torchrun exited with code {exit_code} and named no failed rank; the last lines of its log "
                f"({launcher_log}):\n" + tail_lines(_read_text(launcher_log), LAUNCHER_LOG_TAIL_LINES))
    parts = [culprit.headline()]
    stderr_log = _rank_log(launch_dir, culprit.local_rank, "stderr.log")
    log_tail = tail_lines(_read_text(stderr_log), RANK_LOG_TAIL_LINES) if stderr_log is not None else ""
    error = culprit.error
    if log_tail.strip():
        parts.append(f"last lines of rank {culprit.rank}'s stderr ({stderr_log}):\n{log_tail}")
    elif error is not None and error["traceback"]:
        parts.append(tail_lines(error["traceback"], RANK_LOG_TAIL_LINES))
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


def error_file_failures(launch_dir: Path, *, first_rank: int = 0, launcher_output: str = "") -> list[RankFailure]:
    """The ranks, when torchrun printed no summary (it was killed, or it failed itself: torch 2.13's torchrun can
    crash reading the error file a rank it stopped is still writing): the ranks that left an error file, and once
    torchrun logged stopping ranks (it saw one fail) every rank that left its pid, those with an error file first;
    a rank torchrun stopped is a consequence."""
    stopped = {int(match["pid"]) for match in STOPPING_RANK.finditer(launcher_output)}
    patterns = ("*/attempt_*/*/error.json", "*/attempt_*/*/pid") if stopped else ("*/attempt_*/*/error.json",)
    rank_dirs = {path.parent for pattern in patterns for path in launch_dir.glob(pattern)}
    failures = []
    for rank_dir in sorted(rank_dirs, key=lambda path: int(path.name)):
        error_file = rank_dir / "error.json"
        pid_text = _read_text(rank_dir / "pid").strip()
        failures.append(RankFailure(
            rank=first_rank + int(rank_dir.name), local_rank=int(rank_dir.name), exit_code=None,
            error_file=error_file if error_file.is_file() else None,
            stopped_by_torchrun=pid_text.isdigit() and int(pid_text) in stopped,
        ))
    return sorted(failures, key=lambda failure: failure.error_file is None)


def _failures(launch_dir: Path, *, first_rank: int) -> list[RankFailure]:
    launcher_output = _read_text(launch_dir / "torchrun.log")
    return (summary_failures(launcher_output)
            or error_file_failures(launch_dir, first_rank=first_rank, launcher_output=launcher_output))


def _only_lost_peers(launch_dir: Path, *, first_rank: int) -> bool:
    """This node's ranks failed only because ranks elsewhere vanished (or torchrun stopped them)."""
    culprit = failed_rank(_failures(launch_dir, first_rank=first_rank))
    return culprit is not None and culprit.is_consequence


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


def tail_lines(text: str, lines: int) -> str:
    # a progress bar redraws its line with carriage returns: keep what it showed last; blank lines say nothing
    shown = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n")]
    return "\n".join([line for line in shown if line.strip()][-lines:])
