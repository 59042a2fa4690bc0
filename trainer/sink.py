"""The protocol a training loop reports through, and a sink that writes JSONL files.

Loops never know where their numbers go: the command line passes a `FileSink`, the Celery worker a
database sink (workers.training), tests a `MemorySink`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypedDict, runtime_checkable

from trainer.formats.jsonl import read_jsonl_file


@runtime_checkable
class Sink(Protocol):
    def start(self, *, total_steps: int, start_step: int) -> None:
        """Called once before the first step; start_step > 0 when resuming from a checkpoint."""

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        """Metrics of one optimizer step (the dashboards' names: docs/architecture.md). NaN/Inf are passed through, never dropped."""

    def sample(self, row: SampleRow) -> None:
        """What the model actually wrote at a step (`row`, made by `sample_row`), with its rewards per function."""

    def should_stop(self) -> bool:
        """True when the run was asked to stop; loops check it at least once per step."""

    def checkpoint(self, step: int, path: str) -> None:
        """A complete, resumable checkpoint was written to `path` for `step`."""

    def checkpoint_removed(self, step: int, path: str) -> bool:
        """The trainer is about to delete an old checkpoint (keep_last). The sink forgets it and returns True,
        or returns False when it must stay (another run uses it as a model): the trainer then keeps it."""


class SampleRow(TypedDict):
    """One sample as every sink keeps it (samples.jsonl, MemorySink, the database's Sample rows)."""

    step: int
    prompt: str
    completion: str
    rewards: dict[str, float]
    advantage: float | None


def sample_row(
    step: int, prompt: str, completion: str, rewards: Mapping[str, float], advantage: float | None = None
) -> SampleRow:
    """The row of a Sink.sample call."""
    return {"step": step, "prompt": prompt, "completion": completion, "rewards": dict(rewards), "advantage": advantage}


# JSON has no NaN/Inf. Non-finite floats are written as the strings "NaN", "Infinity" and "-Infinity"
# (the spellings JavaScript's Number() and Python's float() both parse), and read back as floats.
_NON_FINITE_TEXT = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def encode_json_value(value: object) -> object:
    """A value with non-finite floats replaced by their string spellings (recursively)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {key: encode_json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [encode_json_value(item) for item in value]
    return value


def decode_json_value(value: object) -> object:
    """The inverse of encode_json_value."""
    if isinstance(value, str) and value in _NON_FINITE_TEXT:
        return _NON_FINITE_TEXT[value]
    if isinstance(value, dict):
        return {key: decode_json_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode_json_value(item) for item in value]
    return value


def read_jsonl(path: str | Path) -> list[dict]:
    """Rows of a metrics.jsonl / samples.jsonl file, non-finite numbers restored."""
    return [decode_json_value(row) for row in read_jsonl_file(path)]


class FileSink:
    """Writes metrics.jsonl and samples.jsonl into `output_dir`; stops when `stop_file` appears.

    metrics.jsonl rows: {"step", "time", "tokens_seen", "metrics": {...}}; samples.jsonl rows:
    {"step", "prompt", "completion", "rewards", "advantage"}. Checkpoints are listed in checkpoints.jsonl
    (with "removed": true when keep_last deleted one).
    """

    def __init__(self, output_dir: str | Path, *, stop_file: str | Path | None = None) -> None:
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.stop_file = Path(stop_file) if stop_file is not None else None

    def start(self, *, total_steps: int, start_step: int) -> None:
        self.total_steps = total_steps
        if start_step > 0:
            # a resumed run rewinds to its checkpoint: rows written after it belong to the abandoned branch
            for name in ("metrics.jsonl", "samples.jsonl"):
                self._drop_rows_after(self.output_dir / name, start_step)

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        row = {"step": step, "time": time.time(), "tokens_seen": tokens_seen, "metrics": dict(metrics)}
        self._append("metrics.jsonl", row)

    def sample(self, row: SampleRow) -> None:
        self._append("samples.jsonl", row)

    def should_stop(self) -> bool:
        return self.stop_file is not None and self.stop_file.exists()

    def checkpoint(self, step: int, path: str) -> None:
        self._append("checkpoints.jsonl", {"step": step, "path": path})

    def checkpoint_removed(self, step: int, path: str) -> bool:
        self._append("checkpoints.jsonl", {"step": step, "path": path, "removed": True})
        return True

    def _append(self, name: str, row: Mapping[str, object]) -> None:
        with open(self.output_dir / name, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(encode_json_value(row), allow_nan=False) + "\n")

    @staticmethod
    def _drop_rows_after(path: Path, step: int) -> None:
        if not path.exists():
            return
        kept = [line for line in path.read_text(encoding="utf-8").splitlines() if json.loads(line)["step"] <= step]
        path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


@dataclass
class MemorySink:
    """Keeps everything in lists (tests); `stop_at_step` makes should_stop() true once that step is logged;
    checkpoints whose path is in `in_use` are never released for deletion."""

    stop_at_step: int | None = None
    in_use: set[str] = field(default_factory=set)
    removed: list[tuple[int, str]] = field(default_factory=list)
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    samples: list[SampleRow] = field(default_factory=list)
    checkpoints: list[tuple[int, str]] = field(default_factory=list)
    starts: list[tuple[int, int]] = field(default_factory=list)
    last_step: int = 0

    def start(self, *, total_steps: int, start_step: int) -> None:
        self.starts.append((total_steps, start_step))
        self.last_step = start_step

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        self.metrics.setdefault(step, {}).update(metrics)
        self.metrics[step]["tokens_seen"] = tokens_seen
        self.last_step = step

    def sample(self, row: SampleRow) -> None:
        self.samples.append(row)

    def should_stop(self) -> bool:
        return self.stop_at_step is not None and self.last_step >= self.stop_at_step

    def checkpoint(self, step: int, path: str) -> None:
        self.checkpoints.append((step, path))

    def checkpoint_removed(self, step: int, path: str) -> bool:
        if path in self.in_use:
            return False
        self.removed.append((step, path))
        return True


class ReportingSink:
    """Another sink (the run's files) plus a Preflab server: `python -m trainer run CONFIG --report-to URL`
    reports the run as an external run. `run` is a preflab_client ExternalRun (duck-typed: the trainer does not
    import the client); its log calls never wait for the network, and Cancel on the run's page stops the loop."""

    def __init__(self, inner: Sink, run) -> None:
        self.inner = inner
        self.run = run

    def start(self, *, total_steps: int, start_step: int) -> None:
        self.inner.start(total_steps=total_steps, start_step=start_step)

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        self.inner.log(step, metrics, tokens_seen=tokens_seen)
        self.run.log(metrics, step=step, tokens_seen=tokens_seen)

    def sample(self, row: SampleRow) -> None:
        self.inner.sample(row)
        self.run.log_samples([row], step=row["step"])

    def should_stop(self) -> bool:
        return self.inner.should_stop() or self.run.should_stop

    def checkpoint(self, step: int, path: str) -> None:
        self.inner.checkpoint(step, path)

    def checkpoint_removed(self, step: int, path: str) -> bool:
        return self.inner.checkpoint_removed(step, path)


class NullSink:
    """Reports nothing and never stops: the sink of every process but the main one in a torchrun run (whose
    trainer.modeling.distributed.RankSink forwards only rank 0's reports and gives every rank rank 0's should_stop)."""

    def start(self, *, total_steps: int, start_step: int) -> None:
        pass

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        pass

    def sample(self, row: SampleRow) -> None:
        pass

    def should_stop(self) -> bool:
        return False

    def checkpoint(self, step: int, path: str) -> None:
        pass

    def checkpoint_removed(self, step: int, path: str) -> bool:
        return False
