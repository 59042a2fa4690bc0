"""A run's execution on a GPU worker: database rows -> trainer -> database rows (docs/architecture.md).

`run_execute` claims the queued run and checks its config; the training itself runs where the worker can stop it
(workers.supervision): a run on one process in a child, `python -m workers.rank RUN_ID` (`run_in_child`), a run on
many under torchrun (workers.torchrun), one such process per rank. The training process builds the config and
reads the training rows (`run_train`: the snapshot frozen at launch, webapp.experiments.data_snapshot), calls the kind's train function with a `DatabaseSink`, and records the outcome; every
write goes through the experiments services. Its output joins the worker's own, as when it trained in the worker.

The database sink (trainer.sink.Sink) batches metric rows and samples, registers checkpoints as models and reads
should_stop from the run. A background thread flushes what the loop logged at least once a second, so a killed
training loses at most a second of it; the run's heartbeat is the worker's, written while the training process runs.
"""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

from trainer.kinds import config_from_dict, run_kind
from trainer.sink import SampleRow, Sink
from webapp.experiments import services
from webapp.experiments.data_snapshot import snapshot_path, snapshot_read
from webapp.experiments.data_sources import training_rows
from webapp.experiments.models import Run
from workers.heartbeat import Heartbeat
from workers.supervision import RunWatch, is_running, signal_name, start_group, watch
from workers.torchrun import run_distributed, tail_lines

if TYPE_CHECKING:
    from trainer.loop import TrainResult

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 1.0
# Flush early when this many steps are pending, so one write never grows large.
MAX_PENDING_ROWS = 500
TRACEBACK_LINES = 30
CHILD_OUTPUT_TAIL_LINES = 30


def run_execute(*, run_id: int) -> None:
    """Train a queued run from this worker; a run that is not queued (e.g. a redelivered task) is left alone."""
    run = services.run_start(run_id=run_id)
    if run is None:
        return
    try:
        config = config_from_dict(run.kind, run.config)
    except Exception as error:  # a config of an older version, say: no process to start
        run_fail_with(run_id, error)
        return
    if config.num_processes > 1:
        run_distributed(run_id=run_id, config=config)
        return
    run_in_child(run_id=run_id)


def run_in_child(*, run_id: int) -> None:
    """Train the (running) run on one process, a child `python -m workers.rank RUN_ID` that records the run's end
    itself, watched as workers.supervision says; when the child exits with the run still running (killed by the
    kernel, say), fail the run saying how it exited, with the last lines of its output."""
    process = start_group([sys.executable, "-m", "workers.rank", str(run_id)], stdout=subprocess.PIPE,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    output = OutputRelay(process.stdout)
    exit_code = watch(process, name=f"run-{run_id}", alive=lambda: is_running(process.pid),
                      beat=lambda: services.run_heartbeat(run_id=run_id), run=RunWatch(run_id))
    output.join()
    if services.run_fail(run_id=run_id, error=child_exit_text(exit_code, output.tail())):
        logger.warning("run %s failed: its training process exited with %s and did not record the end", run_id,
                       exit_code)


def child_exit_text(exit_code: int, output_tail: str) -> str:
    if exit_code < 0:
        headline = f"the training process was killed by signal {-exit_code} ({signal_name(-exit_code)})"
    elif exit_code == 0:
        headline = "the training process exited normally but did not record the run's end"
    else:
        headline = f"the training process exited with code {exit_code}"
    return f"{headline}\n\nits last lines of output:\n{output_tail}" if output_tail.strip() else headline


class OutputRelay:
    """Copies a child's output, line by line as it comes, to this worker's own (where the worker's log is), keeping
    the last lines for a failure message."""

    def __init__(self, stream: IO[bytes], *, keep: int = 200) -> None:
        self._stream = stream
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._thread = threading.Thread(target=self._copy, name="child-output", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        target = sys.__stderr__
        for raw in self._stream:
            line = raw.decode(errors="replace")
            self._lines.append(line.rstrip("\n"))
            if target is not None:
                try:
                    target.write(line)
                    target.flush()
                except (OSError, ValueError):  # the worker's own output is gone: drain the child's all the same,
                    target = None              # or it would block writing to a full pipe
        self._stream.close()

    def join(self, timeout_s: float = 10.0) -> None:
        """Until the output ends: at once once every process holding the pipe (the child's group) is gone."""
        self._thread.join(timeout_s)

    def tail(self, lines: int = CHILD_OUTPUT_TAIL_LINES) -> str:
        return tail_lines("\n".join(self._lines), lines)


def run_train(run: Run, sink: Sink) -> TrainResult:
    """The run's config and its training rows, trained by its kind (the kind's TrainResult). The rows are the
    snapshot frozen at launch where the run has one (webapp.experiments.data_snapshot), else its data source's."""
    config = config_from_dict(run.kind, run.config)
    data, eval_data = run_training_data(run)
    return run_kind(run.kind).train_function()(config, data, sink, eval_data=eval_data)


def run_training_data(run: Run) -> tuple[list[dict], list[dict] | None]:
    if run.data_sha256:
        return snapshot_read(snapshot_path(run.pk), rows=run.data_rows or 0, sha256=run.data_sha256), None
    return training_rows(run.kind, run.data_source)


def run_error_text(error: BaseException) -> str:
    tail = "".join(traceback.format_exception(error)).splitlines()[-TRACEBACK_LINES:]
    return f"{type(error).__name__}: {error}\n\n" + "\n".join(tail)


def run_fail_with(run_id: int, error: BaseException) -> None:
    services.run_fail(run_id=run_id, error=run_error_text(error))


class DatabaseSink:
    def __init__(self, run_id: int, *, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.run_id = run_id
        self.flush_interval_s = flush_interval_s
        self._lock = threading.Lock()
        self._rows: list[dict] = []
        self._samples: list[SampleRow] = []
        self._flusher = Heartbeat(self.flush, every_s=flush_interval_s, name=f"run-{run_id}-flush").__enter__()

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
        return services.run_should_stop(run_id=self.run_id)

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
        self._flusher.stop()
        self.flush()
