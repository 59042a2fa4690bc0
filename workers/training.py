"""A run's execution on a GPU worker: database rows -> trainer -> database rows (DESIGN section 2).

`run_execute` claims the queued run, builds its config and training rows, calls the kind's train function
with a `DatabaseSink`, and reports the outcome; every write goes through the experiments services.

The database sink (trainer.sink.Sink) batches metric rows and samples, registers checkpoints as models and
reads should_stop from the run. A background thread writes the heartbeat and flushes what the loop logged at
least once a second, so a step slower than the heartbeat timeout still shows the worker alive, and a killed
worker loses at most a second.

A run with more than one process (config.num_processes) is not trained here: workers.torchrun starts torchrun,
one `python -m workers.rank RUN_ID` per process, and watches it.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trainer.config import BaseConfig, config_from_dict
from trainer.kinds import run_kind
from trainer.sink import SampleRow, Sink
from webapp.experiments import services
from webapp.experiments.data_sources import training_rows
from webapp.experiments.models import Run
from workers.heartbeat import Heartbeat
from workers.torchrun import run_distributed

if TYPE_CHECKING:
    from trainer.loop import TrainResult

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


def run_train(run: Run, sink: Sink) -> TrainResult:
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
