"""Reads of the experiments app: models, runs, metric series (downsampled), samples, config diffs."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import FloatField, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from trainer.sink import decode_json_value
from webapp.experiments.downsampling import Series, downsample
from webapp.experiments.models import MetricRow, ModelRef, Run, Sample

X_AXES = ("step", "wall_time", "tokens_seen")
# The number a run is summarised by in the list, per kind (first one present).
KEY_METRICS = {
    "reward_model": ("eval/accuracy", "rewards/accuracy", "loss"),
    "dpo": ("eval/accuracy", "rewards/accuracy", "loss"),
    "sft": ("eval/accuracy", "loss"),
    "grpo": ("reward/mean", "loss"),
    "ppo": ("reward/mean", "loss"),
}


def launchable_kinds() -> list[str]:
    """Run kinds that have a config dataclass and a training loop registered in the trainer."""
    from trainer.cli import TRAIN_MODULES
    from trainer.config import CONFIG_CLASSES

    return [kind for kind in CONFIG_CLASSES if kind in TRAIN_MODULES]


def models_list() -> QuerySet[ModelRef]:
    return ModelRef.objects.select_related("run")


def runs_list(*, status: str = "", kind: str = "", query: str = "") -> QuerySet[Run]:
    runs = Run.objects.select_related("created_by")
    if status:
        runs = runs.filter(status=status)
    if kind:
        runs = runs.filter(kind=kind)
    if query:
        runs = runs.filter(name__icontains=query)
    return runs


@dataclass(frozen=True)
class RunSummary:
    run: Run
    progress: float | None
    eta_s: float | None
    key_metric: str
    key_value: str


def _format_value(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)


def run_summaries(runs: Iterable[Run]) -> list[RunSummary]:
    """Progress (0..1), ETA in seconds (from the mean step time so far) and the key metric of each run."""
    runs = list(runs)
    last_rows = {
        row.run_id: row
        for row in MetricRow.objects.filter(run__in=runs).order_by("run_id", "-step").distinct("run_id")
    } if _distinct_on_supported() else _last_rows_portable(runs)
    summaries = []
    for run in runs:
        progress = run.current_step / run.total_steps if run.total_steps else None
        eta = None
        if run.status == Run.Status.RUNNING and run.started_at and run.total_steps and run.current_step:
            elapsed = (timezone.now() - run.started_at).total_seconds()
            eta = elapsed / run.current_step * (run.total_steps - run.current_step)
        name, value = "", ""
        row = last_rows.get(run.pk)
        if row is not None:
            metrics = decode_json_value(row.metrics)
            for candidate in KEY_METRICS.get(run.kind, ("loss",)):
                if candidate in metrics:
                    name, value = candidate, _format_value(metrics[candidate])
                    break
        summaries.append(RunSummary(run, progress, eta, name, value))
    return summaries


def _distinct_on_supported() -> bool:
    from django.db import connection

    return connection.features.can_distinct_on_fields


def _last_rows_portable(runs: list[Run]) -> dict[int, MetricRow]:
    rows = {}
    for run in runs:
        row = MetricRow.objects.filter(run=run).order_by("-step").first()
        if row is not None:
            rows[run.pk] = row
    return rows


def run_checkpoints(*, run: Run) -> QuerySet[ModelRef]:
    return ModelRef.objects.filter(run=run).order_by("step")


def metric_names(*, run_ids: Iterable[int]) -> list[str]:
    """Every metric any of the runs logged ("loss" first, then by name, so namespaces sort together)."""
    names: set[str] = set()
    for run_names in Run.objects.filter(pk__in=list(run_ids)).values_list("metric_names", flat=True):
        names.update(run_names)
    return sorted(names, key=lambda name: (name != "loss", name))


def metric_series(
    *,
    run_id: int,
    x_axis: str = "step",
    after_step: int | None = None,
    x_min: float | None = None,
    x_max: float | None = None,
    max_points: int | None = None,
) -> dict[str, Any]:
    """Every metric of a run as downsampled series over the chosen x axis.

    `after_step` returns only rows logged after it (live polling); `x_min`/`x_max` a zoomed range, which is
    again at most max_points a series, so zooming in shows full resolution. A metric missing at a step (e.g.
    eval/accuracy between evaluations) has no point there; a non-finite one is a marker.
    """
    if x_axis not in X_AXES:
        raise ValueError(f"x axis must be one of {', '.join(X_AXES)}, got {x_axis!r}")
    max_points = max_points or settings.PREFLAB_METRICS_MAX_POINTS
    rows = MetricRow.objects.filter(run_id=run_id)
    if after_step is not None:
        rows = rows.filter(step__gt=after_step)
    if x_min is not None:
        rows = rows.filter(**{f"{x_axis}__gte": x_min})
    if x_max is not None:
        rows = rows.filter(**{f"{x_axis}__lte": x_max})
    names = metric_names(run_ids=[run_id])
    read = _columns_postgres if connection.vendor == "postgresql" else _columns_portable
    steps, xs, columns = read(rows.order_by("step"), x_axis, names)
    series = {}
    for name, values in zip(names, columns, strict=True):
        present = np.fromiter((value is not None for value in values), dtype=bool, count=len(values))
        if present.any():
            ys = np.array(values, dtype=np.float64)
            series[name] = _series_json(downsample(xs[present], ys[present], max_points))
    last_step = int(steps[-1]) if len(steps) else (after_step or 0)
    return {"run": run_id, "x_axis": x_axis, "last_step": last_step, "series": series}


Columns = tuple[np.ndarray, np.ndarray, list[list[float | None]]]


def _columns_postgres(rows: QuerySet[MetricRow], x_axis: str, names: list[str]) -> Columns:
    """Postgres extracts and casts each metric (float8 reads 'NaN' and 'Infinity'): no JSON decoding here."""
    aliases = {f"metric_{index}": Cast(KeyTextTransform(name, "metrics"), FloatField())
               for index, name in enumerate(names)}
    sql, params = rows.annotate(**aliases).values_list("step", x_axis, *aliases).query.sql_with_params()
    # Straight from the cursor: Django's per-row converters would double the time on 100k rows.
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    if not fetched:
        return np.empty(0), np.empty(0), [[] for _ in names]
    steps, xs, *columns = zip(*fetched, strict=True)
    return np.array(steps), np.array(xs, dtype=np.float64), [list(column) for column in columns]


def _columns_portable(rows: QuerySet[MetricRow], x_axis: str, names: list[str]) -> Columns:
    steps, xs = [], []
    columns: list[list[float | None]] = [[] for _ in names]
    for step, x, metrics in rows.values_list("step", x_axis, "metrics").iterator(chunk_size=5000):
        steps.append(step)
        xs.append(x)
        for column, name in zip(columns, names, strict=True):
            value = metrics.get(name)
            column.append(None if value is None else float(value))  # float() reads "NaN", "Infinity"
    return np.array(steps), np.array(xs, dtype=np.float64), columns


def _series_json(series: Series) -> dict[str, list]:
    return dataclasses.asdict(series)


def samples_at(*, run: Run, step: int | None) -> tuple[list[int], int | None, list[Sample]]:
    """(steps that have samples, the chosen step (the latest when None), that step's samples)."""
    steps = list(Sample.objects.filter(run=run).order_by("step").values_list("step", flat=True).distinct())
    if not steps:
        return [], None, []
    chosen = step if step in steps else steps[-1]
    samples = list(Sample.objects.filter(run=run, step=chosen))
    for sample in samples:
        sample.rewards = decode_json_value(sample.rewards)
    return steps, chosen, samples


def config_diff(runs: list[Run]) -> list[tuple[str, list[Any]]]:
    """(key, value per run) for the config keys whose values differ between the runs (plus kind and data)."""
    # output_dir always differs (one directory per run) and says nothing about how the runs differ.
    flattened = [
        _flatten({"kind": run.kind, "data": run.data_source, **run.config, "output_dir": None}) for run in runs
    ]
    keys = sorted(set().union(*flattened)) if flattened else []
    diff = []
    for key in keys:
        values = [flat.get(key, "—") for flat in flattened]
        if any(value != values[0] for value in values[1:]):
            diff.append((key, values))
    return diff


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
