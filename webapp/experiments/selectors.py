"""Reads of the experiments app: models, runs, metric series (downsampled), samples, config diffs."""

from __future__ import annotations

import hashlib
import math
import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from trainer.config import Preset
from trainer.kinds import KINDS, PRESETS, with_preset
from trainer.sink import decode_json_value
from webapp.accounts.roles import is_admin
from webapp.caching import cache_get, cache_set
from webapp.experiments.downsampling import Series, downsample, evenly_spaced, exponential_moving_average
from webapp.experiments.models import EXTERNAL_KIND, MODEL_FIELDS, ChartPins, MetricRow, ModelRef, Run, Sample
from webapp.text import counted

X_AXES = ("step", "wall_time", "tokens_seen")

# An external run's key metric in the run list: the first of these it logged (it has no trainer kind).
EXTERNAL_KEY_METRICS = ("eval/accuracy", "reward/mean", "loss")


def launchable_kinds() -> list[str]:
    """Run kinds registered in the trainer (trainer/kinds.py), in its order: an external run is not launched here."""
    return list(KINDS)


def run_kind_choices() -> list[tuple[str, str]]:
    """(value, label) of every kind a run can have, for filtering: the trainer's kinds and external runs."""
    return list(Run.Kind.choices)


def launch_presets(kind: str, parent: Run | None) -> dict[str, Preset]:
    """The presets the launch form offers: none for a fork, which starts from its parent's whole config."""
    return {} if parent else PRESETS.get(kind, {})


def launch_initial_config(kind: str, parent: Run | None, preset: str) -> dict[str, Any] | None:
    """The config the launch form starts from: the parent's for a fork (which offers no presets), else the
    named preset's, if any. An unknown preset raises ConfigError naming the choices."""
    if parent is not None:
        return dict(parent.config)
    return with_preset(kind, preset, {}) if preset else None


def fork_initial(parent: Run) -> dict[str, Any]:
    """The launch form's own fields (name and data source) as the parent run had them; its config fields come from
    launch_initial_config. An upload is kept, not shown in a file field: see inherited_upload."""
    source = parent.data_source
    initial: dict[str, Any] = {"name": f"{parent.name} (fork)", "data_source": source.get("type")}
    if source.get("type") == "arithmetic":
        initial.update(level=source.get("level"), size=source.get("size"))
    elif source.get("project_id") is not None:
        initial["project"] = source["project_id"]
        if source.get("aggregation"):
            initial["aggregation"] = source["aggregation"]
        initial.update({key: source[key] for key in ("binarization", "binarization_seed") if key in source})
    return initial


def inherited_upload(parent: Run | None) -> dict[str, Any] | None:
    """The parent's uploaded data source, which its fork trains on unless another file is uploaded; None when the
    parent trained on no upload, or its kept file is gone."""
    if parent is None or parent.data_source.get("type") != "upload":
        return None
    if not Path(str(parent.data_source.get("path", ""))).is_file():
        return None
    return dict(parent.data_source)


def runs_visible_to(user: AbstractBaseUser) -> QuerySet[Run]:
    """The one rule of who reaches a run (its pages, chart data, samples, API, and its checkpoints as models): an
    admin every run; anyone else the runs they launched and the runs whose data source is a project they reach
    (an external run's too: its project_id). Anything else is answered 404, as a run that does not exist."""
    from webapp.annotation.selectors import projects_visible_to

    if is_admin(user):
        return Run.objects.all()
    projects = list(projects_visible_to(user).values_list("pk", flat=True))
    return Run.objects.filter(Q(created_by_id=user.pk) | Q(data_source__project_id__in=projects))


def models_visible_to(user: AbstractBaseUser) -> QuerySet[ModelRef]:
    """Registered base models are the lab's (a directory under the model roots, or a hub id): everyone's. A run's
    checkpoint is visible with its run (runs_visible_to)."""
    if is_admin(user):
        return ModelRef.objects.all()
    return ModelRef.objects.filter(Q(run__isnull=True) | Q(run__in=runs_visible_to(user)))


def models_list(user: AbstractBaseUser) -> QuerySet[ModelRef]:
    return models_visible_to(user).select_related("run")


def models_offered(architectures: Iterable[str], *, user: AbstractBaseUser) -> list[ModelRef]:
    """Models of these kinds (and those whose kind is unknown) that `user` sees, in the order a model field offers
    them: base models by name, then each run's checkpoints, newest run first and its newest step first."""
    wanted = [*architectures, ModelRef.Architecture.UNKNOWN]
    models = models_visible_to(user).filter(architecture__in=wanted).select_related("run")
    bases = models.filter(run__isnull=True).order_by("name")
    checkpoints = models.filter(run__isnull=False).order_by("-run_id", "-step")
    return [*bases, *checkpoints]


def directory_size(path: str) -> int:
    """Bytes of the files under `path` (0 when it is gone)."""
    return sum(
        (Path(root) / name).stat().st_size for root, _, names in os.walk(path) for name in names
    )


def disk_size_text(size: int) -> str:
    """'1.9 GB', '12.3 MB', '512 bytes' (decimal units, as disks and `df -H` count)."""
    for unit, name in ((10**9, "GB"), (10**6, "MB"), (10**3, "kB")):
        if size >= unit:
            return f"{size / unit:.1f} {name}"
    return f"{size} bytes"


def run_directory(run: Run) -> Path:
    return Path(settings.RUNS_DIR) / str(run.pk)


def run_paths(run: Run) -> list[Path]:
    """The run's directory and any checkpoint of it kept elsewhere under RUNS_DIR."""
    directory = run_directory(run)
    paths = [directory]
    for path in ModelRef.objects.filter(run=run).values_list("path", flat=True):
        checkpoint = Path(path)
        if not checkpoint.resolve().is_relative_to(directory.resolve()):
            paths.append(checkpoint)
    return paths


def run_disk_bytes(run: Run) -> int:
    """Bytes of the run's files: checkpoints, samples, training data snapshot, logs."""
    return sum(directory_size(str(path)) for path in run_paths(run))


def runs_using_models(paths: Iterable[str], *, excluding_run_id: int | None = None) -> dict[str, list[Run]]:
    """For each path, the runs whose config names it as a model (policy, reference, reward model, critic)."""
    paths = list(paths)
    condition = Q()
    for field in MODEL_FIELDS:
        condition |= Q(**{f"config__{field}__in": paths})
    runs = Run.objects.filter(condition).exclude(pk=excluding_run_id).order_by("pk") if paths else []
    using: dict[str, list[Run]] = {}
    for run in runs:
        for path in {run.config.get(field) for field in MODEL_FIELDS} & set(paths):
            using.setdefault(path, []).append(run)
    return using


@dataclass
class ResumePlan:
    """What resuming `run` from `checkpoint` does to the run's later checkpoints."""

    checkpoint: ModelRef
    removed: list[ModelRef]
    used_by: dict[str, list[Run]]

    @property
    def blocked(self) -> bool:
        return bool(self.used_by)


def resume_plan(*, run: Run, checkpoint: ModelRef) -> ResumePlan:
    """The run's checkpoints after `checkpoint` (each with `size_bytes` and the runs in `used_by`)."""
    later = [model for model in run_checkpoints_sized(run=run) if model.step > checkpoint.step]
    used_by = runs_using_models([model.path for model in later], excluding_run_id=run.pk)
    for model in later:
        model.used_by = used_by.get(model.path, [])
    return ResumePlan(checkpoint, later, used_by)


ARCHIVED_CHOICES = (("", "not archived"), ("only", "archived"), ("all", "all"))


def _runs_tagged(runs: QuerySet[Run], tag: str) -> QuerySet[Run]:
    if connection.features.supports_json_field_contains:
        return runs.filter(tags__contains=[tag])
    # SQLite (the embedded default) has no JSON containment: the tagged runs' ids are picked here
    return runs.filter(pk__in=[pk for pk, tags in runs.values_list("pk", "tags") if tag in (tags or [])])


def runs_list(*, user: AbstractBaseUser, status: str = "", kind: str = "", query: str = "", tag: str = "",
              group: str = "", archived: str = "") -> QuerySet[Run]:
    """The runs `user` sees (runs_visible_to), narrowed by the filters (`tag`: one of the run's tags); archived
    runs only when asked for (archived: "only" or "all")."""
    runs = runs_visible_to(user).select_related("created_by")
    if tag:
        runs = _runs_tagged(runs, tag)
    if group:
        runs = runs.filter(group=group)
    if archived == "only":
        runs = runs.filter(archived_at__isnull=False)
    elif archived != "all":
        runs = runs.filter(archived_at__isnull=True)
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
    # every step is logged but the run is still running: it saves its final checkpoint and samples
    finishing: bool = False
    # how long a finished run took, or how long a running one has run so far
    duration_s: float | None = None
    # what its files take: checkpoints, samples, training data, logs
    disk_bytes: int = 0

    @property
    def disk_text(self) -> str:
        return disk_size_text(self.disk_bytes)

    @property
    def eta_text(self) -> str:
        return duration_text(self.eta_s) if self.eta_s is not None else ""

    @property
    def duration_text(self) -> str:
        return duration_text(self.duration_s) if self.duration_s is not None else ""


def duration_text(seconds: float) -> str:
    """'42 s', '3 min 5 s', '2 h 07 min'."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, second = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {second} s" if second else "")
    hours, minute = divmod(minutes, 60)
    return f"{hours} h {minute:02d} min"


# How many of a kind's latest succeeded runs its tail (last step to finished) is measured from.
TAIL_SAMPLE_RUNS = 5


def _format_value(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)


def kind_tail_seconds(kind: str) -> float | None:
    """What the end of a run of `kind` takes after its last step (the final checkpoint, the final samples): the
    median, over the kind's latest succeeded runs, of the time from its last metric row to its end. None when no
    such run is known."""
    last_wall_time = MetricRow.objects.filter(run=OuterRef("pk")).order_by("-step").values("wall_time")[:1]
    finished = (Run.objects.filter(kind=kind, status=Run.Status.SUCCEEDED, finished_at__isnull=False)
                .annotate(last_wall_time=Subquery(last_wall_time)).exclude(last_wall_time=None)
                .order_by("-finished_at").values_list("finished_at", "last_wall_time")[:TAIL_SAMPLE_RUNS])
    tails = [max(0.0, finished_at.timestamp() - wall_time) for finished_at, wall_time in finished]
    return statistics.median(tails) if tails else None


def run_duration_seconds(run: Run, *, now: datetime) -> float | None:
    """Started to finished, or to now while it runs; None for a run that never started."""
    if run.started_at is None:
        return None
    end = run.finished_at or (now if run.status == Run.Status.RUNNING else None)
    return max(0.0, (end - run.started_at).total_seconds()) if end else None


def run_eta_seconds(run: Run, *, now: datetime, last_wall_time: float | None, tail_s: float | None) -> float | None:
    """Seconds left of a running run: its remaining steps at the mean step time so far, plus the kind's measured
    tail (tail_s: the final checkpoint and samples). Once every step is logged, what is left of that tail since
    the last step (0 once overdue); None when nothing can be said."""
    if run.status != Run.Status.RUNNING or not run.started_at or not run.total_steps or not run.current_step:
        return None
    tail = tail_s or 0.0
    if run.current_step >= run.total_steps:
        if tail_s is None or last_wall_time is None:
            return None
        return max(0.0, tail - (now.timestamp() - last_wall_time))
    elapsed = (now - run.started_at).total_seconds()
    return elapsed / run.current_step * (run.total_steps - run.current_step) + tail


def run_summaries(runs: Iterable[Run]) -> list[RunSummary]:
    """Progress (0..1), ETA in seconds (the remaining steps at the mean step time so far, plus the kind's measured
    tail: kind_tail_seconds), start and duration, and the key metric of each run."""
    runs = list(runs)
    last_rows = {
        row.run_id: row
        for row in MetricRow.objects.filter(run__in=runs).order_by("run_id", "-step").distinct("run_id")
    } if _distinct_on_supported() else _last_rows_portable(runs)
    tails = {kind: kind_tail_seconds(kind) for kind in {run.kind for run in runs if run.status == Run.Status.RUNNING}}
    now = timezone.now()
    summaries = []
    for run in runs:
        progress = run.current_step / run.total_steps if run.total_steps else None
        row = last_rows.get(run.pk)
        eta = run_eta_seconds(run, now=now, last_wall_time=row.wall_time if row else None, tail_s=tails.get(run.kind))
        finishing = bool(run.status == Run.Status.RUNNING and run.total_steps
                         and run.current_step >= run.total_steps)
        name, value = "", ""
        if row is not None:
            metrics = decode_json_value(row.metrics)
            kind = KINDS.get(run.kind)
            for candidate in kind.key_metrics if kind else EXTERNAL_KEY_METRICS:
                if candidate in metrics:
                    name, value = candidate, _format_value(metrics[candidate])
                    break
        summaries.append(RunSummary(run, progress, eta, name, value, finishing=finishing,
                                    duration_s=run_duration_seconds(run, now=now), disk_bytes=run_disk_bytes(run)))
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


@dataclass(frozen=True)
class DataSourceText:
    """A run's data source in words; `project_id` is set when it is an existing project (the page links it)."""

    text: str
    project_id: int | None = None


PROJECT_SOURCE_WORDS = {"project_pairs": "preference pairs", "project_prompts": "prompts"}
EXTERNAL_SOURCE_WORDS = "Logged through the API by a program outside Preflab"


def data_source_text(source: Mapping[str, Any], *, kind: str | None = None) -> DataSourceText:
    """e.g. "Arithmetic, level 1, 64 problems", "Project «demo»: preference pairs", "Upload: a.jsonl, 200 rows";
    a project's feedback read by a `kind` that trains on unpaired rows (KTO) is "unpaired (KTO) rows"."""
    source_type = source.get("type")
    if source_type == "arithmetic":
        return DataSourceText(f"Arithmetic, level {source.get('level')}, {counted(source.get('size') or 0, 'problem')}")
    if source_type == "upload":
        name = source.get("name") or Path(str(source.get("path", ""))).name
        rows = source.get("rows")
        return DataSourceText(f"Upload: {name}" + (f", {counted(rows, 'row')}" if isinstance(rows, int) else ""))
    if source_type in PROJECT_SOURCE_WORDS:
        project_id = source.get("project_id")
        name = project_name(project_id)
        if name is None:
            return DataSourceText(f"Project #{project_id} (deleted): {PROJECT_SOURCE_WORDS[source_type]}")
        words = PROJECT_SOURCE_WORDS[source_type]
        if source_type == "project_pairs" and kind in KINDS and KINDS[kind].rows == "unpaired":
            words = "unpaired (KTO) rows"
        return DataSourceText(f"Project «{name}»: {words}{_aggregation_words(source)}", project_id)
    if source_type == EXTERNAL_KIND:
        project_id = source.get("project_id")
        if project_id is None:
            return DataSourceText(EXTERNAL_SOURCE_WORDS)
        name = project_name(project_id)
        if name is None:
            return DataSourceText(f"{EXTERNAL_SOURCE_WORDS}, on project #{project_id} (deleted)")
        return DataSourceText(f"{EXTERNAL_SOURCE_WORDS}, on project «{name}»", project_id)
    return DataSourceText(", ".join(f"{key} {value}" for key, value in source.items()))


def _aggregation_words(source: Mapping[str, Any]) -> str:
    """", aggregation: majority" and the like for a pairs source that names its aggregation (how disagreeing
    annotators' pairs combine); "" for one stored before sources named it."""
    aggregation = source.get("aggregation")
    if source.get("type") != "project_pairs" or not isinstance(aggregation, str):
        return ""
    words = f", aggregation: {aggregation}"
    if "binarization" in source or "binarization_seed" in source:  # stored where not the default
        words += (f", ratings binarized: {source.get('binarization', 'random')} "
                  f"(seed {source.get('binarization_seed', 0)})")
    return words


def project_reachable(project_id: int, *, user: AbstractBaseUser | None) -> bool:
    """Whether the project exists and `user` reaches it (webapp.annotation.selectors.projects_visible_to); for no
    user (the demo, a management command), whether it exists."""
    from webapp.annotation.selectors import projects_visible_to

    projects = apps.get_model("annotation", "Project").objects.all() if user is None else projects_visible_to(user)
    return projects.filter(pk=project_id).exists()


def project_name(project_id: Any) -> str | None:
    """The project's name, or None when there is no such project (annotation's model, read without importing it)."""
    return apps.get_model("annotation", "Project").objects.filter(pk=project_id).values_list("name", flat=True).first()


@dataclass(frozen=True)
class RunLaunchState:
    """What the watcher of a run's torchrun (workers.torchrun) reads every second."""

    status: str
    cancel_requested: bool
    rendezvous: dict[str, Any]

    @property
    def running(self) -> bool:
        return self.status == Run.Status.RUNNING


def run_launch_state(*, run_id: int) -> RunLaunchState:
    status, cancel_requested, rendezvous = (
        Run.objects.filter(pk=run_id).values_list("status", "cancel_requested", "rendezvous").get())
    return RunLaunchState(status=status, cancel_requested=cancel_requested, rendezvous=rendezvous)


def run_nodes_text(run: Run) -> str:
    """How many processes on how many nodes the run asks for: "4 processes on 2 nodes"."""
    processes, nodes = run.config.get("num_processes", 1), run.config.get("num_nodes", 1)
    return f"{counted(processes, 'process', 'processes')} on {counted(nodes, 'node')}"


def run_checkpoints(*, run: Run) -> QuerySet[ModelRef]:
    return ModelRef.objects.filter(run=run).order_by("step")


# A running run whose last row or heartbeat is older than this gets a hint on its page: its writer logs (or beats)
# every few seconds, so half a minute of silence means it stopped, hangs, or cannot reach the server.
STALE_HINT_AFTER_S = 30


@dataclass(frozen=True)
class RunSilence:
    """When the run's last row or heartbeat arrived, and whether a running run has been silent too long."""

    last_data_at: datetime | None
    silent_s: int | None
    stale: bool

    @property
    def silent_text(self) -> str:
        return duration_text(self.silent_s or 0)


def run_silence(run: Run, now: datetime | None = None) -> RunSilence:
    """Every row written moves heartbeat_at (metric_rows_write), as does every heartbeat: it is the last sign."""
    if run.heartbeat_at is None:
        return RunSilence(last_data_at=None, silent_s=None, stale=False)
    silent_s = max(0, int(((now or timezone.now()) - run.heartbeat_at).total_seconds()))
    return RunSilence(last_data_at=run.heartbeat_at, silent_s=silent_s,
                      stale=run.status == Run.Status.RUNNING and silent_s > STALE_HINT_AFTER_S)


def chart_pins(*, user: AbstractBaseUser, kind: str) -> list[str]:
    """The metric names the user pinned on run pages of this kind (services.chart_pins_set)."""
    pins = ChartPins.objects.filter(user=user, kind=kind).values_list("metrics", flat=True).first()
    return list(pins or [])


def chart_pins_by_kind(*, user: AbstractBaseUser) -> dict[str, list[str]]:
    return dict(ChartPins.objects.filter(user=user).order_by("kind").values_list("kind", "metrics"))


def run_model_text(run: Run) -> str:
    """The model a run trains: its registered name where the config's `model` is a known path, else the config's
    value as written (an external run's callback sets `model` to the name or path it loaded)."""
    model = run.config.get("model") if isinstance(run.config, Mapping) else None
    if model in (None, ""):
        return ""
    name = ModelRef.objects.filter(path=str(model)).values_list("name", flat=True).first()
    return name or str(model)


def run_checkpoints_sized(*, run: Run) -> list[ModelRef]:
    """The run's checkpoints, each with `size_bytes` on disk."""
    checkpoints = list(run_checkpoints(run=run))
    for checkpoint in checkpoints:
        checkpoint.size_bytes = directory_size(checkpoint.path)
    return checkpoints


def metric_series(
    *,
    run_id: int,
    x_axis: str = "step",
    after_step: int | None = None,
    x_min: float | None = None,
    x_max: float | None = None,
    max_points: int | None = None,
    metrics: Iterable[str] | None = None,
    smoothing: float = 0.0,
) -> dict[str, Any]:
    """The run's metrics (all, or only `metrics`) as downsampled series over the chosen x axis.

    `after_step` returns only rows logged after it (live polling); `x_min`/`x_max` a zoomed range, which is
    again at most max_points a series, so zooming in shows full resolution. A metric missing at a step (e.g.
    eval/accuracy between evaluations) has no point there; a non-finite one is a marker. The full range of a
    finished run is cached under a key that changes with every write to the run (see `_cache_key`).

    `smoothing` (an EMA weight) adds to each series `smoothed_x` and `smoothed`: the EMA of the metric's whole
    series at up to max_points evenly spaced rows, so the smoothed curve is that of every row, not of the
    downsampled ones. A zoomed range is smoothed from the run's first row too. Short series and learning rates are never smoothed
    (`smoothing_applies`); `after_step` answers carry no `smoothed` (a live page asks for the whole series).
    """
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if x_axis not in X_AXES:
        raise ValueError(f"x axis must be one of {', '.join(X_AXES)}, got {x_axis!r}")
    max_points = max_points or settings.PREFLAB_METRICS_MAX_POINTS
    run = Run.objects.only(*CACHE_KEY_FIELDS, "metric_names").get(pk=run_id)
    names = _chosen_names(run.metric_names, metrics)
    full_range = after_step is None and x_min is None and x_max is None
    key = _cache_key(run, x_axis, max_points, names, smoothing) if full_range and not run.is_active else None
    if key is not None and (cached := cache_get(key)) is not None:
        return cached
    smoothing = smoothing if after_step is None else 0.0
    # a smoothed zoom reads from the first row (the EMA carries its history), then keeps the zoomed range
    read_range = (None, None) if smoothing else (x_min, x_max)
    filters = RowFilter(run_id=run_id, x_axis=x_axis, after_step=after_step, x_min=read_range[0], x_max=read_range[1])
    read = COLUMN_READERS.get(connection.vendor, _columns_portable)
    columns = read(filters, names) if names else _no_columns()
    in_range = np.ones(len(columns.x), dtype=bool)
    if smoothing and x_min is not None:
        in_range &= columns.x >= x_min
    if smoothing and x_max is not None:
        in_range &= columns.x <= x_max
    series = {}
    for name, values, missing in zip(names, columns.values, columns.missing, strict=True):
        present = ~missing
        if present.any():
            series[name] = _smoothed_series_json(name, columns.x[present], values[present], in_range[present],
                                                 max_points, smoothing)
    last_step = int(columns.steps[-1]) if len(columns.steps) else (after_step or 0)
    payload = {"run": run_id, "x_axis": x_axis, "last_step": last_step, "series": series}
    if key is not None:
        cache_set(key, payload, METRICS_CACHE_TIMEOUT_S)
    return payload


# Every write of metric rows moves heartbeat_at (and current_step); resuming makes the run active (never
# cached) and finishing it again sets a new finished_at: a finished run's key changes whenever its data can.
CACHE_KEY_FIELDS = ("status", "finished_at", "heartbeat_at", "current_step")
METRICS_CACHE_TIMEOUT_S = 24 * 3600


def _cache_key(run: Run, x_axis: str, max_points: int, names: list[str], smoothing: float) -> str:
    state = "|".join(str(getattr(run, field)) for field in CACHE_KEY_FIELDS)
    digest = hashlib.sha256("\n".join([state, x_axis, str(max_points), repr(smoothing), *names]).encode()).hexdigest()
    return f"experiments:metric-series:{run.pk}:{digest}"


def _chosen_names(logged: list[str], wanted: Iterable[str] | None) -> list[str]:
    names = sorted(logged, key=lambda name: (name != "loss", name))
    if wanted is None:
        return names
    wanted = set(wanted)
    return [name for name in names if name in wanted]


@dataclass(frozen=True)
class RowFilter:
    run_id: int
    x_axis: str
    after_step: int | None
    x_min: float | None
    x_max: float | None


@dataclass(frozen=True)
class Columns:
    """Rows in step order: steps, x, and per metric its values and where it is missing (values there: NaN)."""

    steps: np.ndarray
    x: np.ndarray
    values: list[np.ndarray]
    missing: list[np.ndarray]


def _no_columns() -> Columns:
    return Columns(np.empty(0, dtype=np.int64), np.empty(0), [], [])


def _columns_postgres(filters: RowFilter, names: list[str]) -> Columns:
    """Postgres extracts and casts each metric (float8 reads 'NaN', 'Infinity') and returns one binary array
    per metric, so no Python object is made per value (2M floats for 100k steps x 20 metrics).

    Bucketing in SQL (GROUP BY bucket with min/max of [value, step]) measured slower: extracting the values
    from jsonb dominates either way, and numpy then buckets 20 x 100k values in ~0.15 s.
    """
    table = MetricRow._meta.db_table
    x_column = MetricRow._meta.get_field(filters.x_axis).column
    conditions, params = ["run_id = %s"], [filters.run_id]
    if filters.after_step is not None:
        conditions.append("step > %s")
        params.append(filters.after_step)
    if filters.x_min is not None:
        conditions.append(f"{x_column} >= %s")
        params.append(filters.x_min)
    if filters.x_max is not None:
        conditions.append(f"{x_column} <= %s")
        params.append(filters.x_max)
    extracted = ", ".join(f"(metrics ->> %s)::float8 AS m{index}" for index in range(len(names)))
    arrays = ", ".join(
        f"array_send(array_agg(coalesce(m{index}, 'NaN'))), "
        f"array_send(array_agg(step) FILTER (WHERE m{index} IS NULL))"
        for index in range(len(names))
    )
    # OFFSET 0 keeps the subquery from being flattened, which would extract every metric twice.
    sql = (
        f"SELECT array_send(array_agg(step)), array_send(array_agg(x)), {arrays} "
        f"FROM (SELECT step, {x_column}::float8 AS x, {extracted} FROM {table} "
        f"WHERE {' AND '.join(conditions)} OFFSET 0) AS row_values"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*names, *params])
        fetched = cursor.fetchone()
    steps = _binary_array(fetched[0], ">i4")
    # array_agg keeps one (unspecified) row order for all arrays of the query: sort them all by step.
    order = np.argsort(steps, kind="stable")
    steps = steps[order]
    values, missing = [], []
    for index in range(len(names)):
        values.append(_binary_array(fetched[2 + 2 * index], ">f8")[order])
        missing.append(np.isin(steps, _binary_array(fetched[3 + 2 * index], ">i4")))
    return Columns(steps.astype(np.int64), _binary_array(fetched[1], ">f8")[order], values, missing)


def _binary_array(data: bytes | memoryview | None, element: str) -> np.ndarray:
    """A one-dimensional Postgres array without NULLs from its binary form (array_send).

    Layout (src/backend/utils/adt/arrayfuncs.c, array_send): int32 ndim, int32 has-null flag, int32 element
    type; per dimension int32 length and int32 lower bound; then per element int32 byte length and the bytes.
    """
    native = np.dtype(element).newbyteorder("=")
    if data is None:
        return np.empty(0, dtype=native)
    header = np.frombuffer(data, dtype=">i4", count=3)
    if header[0] == 0:
        return np.empty(0, dtype=native)
    if header[0] != 1 or header[1] != 0:
        raise ValueError(f"expected a one-dimensional array without NULLs, got ndim={header[0]} flags={header[1]}")
    layout = np.dtype([("length", ">i4"), ("value", element)])
    return np.frombuffer(data, dtype=layout, offset=20)["value"].astype(native)


def _columns_portable(filters: RowFilter, names: list[str]) -> Columns:
    rows = MetricRow.objects.filter(run_id=filters.run_id)
    if filters.after_step is not None:
        rows = rows.filter(step__gt=filters.after_step)
    if filters.x_min is not None:
        rows = rows.filter(**{f"{filters.x_axis}__gte": filters.x_min})
    if filters.x_max is not None:
        rows = rows.filter(**{f"{filters.x_axis}__lte": filters.x_max})
    steps, xs = [], []
    columns: list[list[float | None]] = [[] for _ in names]
    for step, x, metrics in rows.order_by("step").values_list("step", filters.x_axis, "metrics").iterator(
        chunk_size=5000
    ):
        steps.append(step)
        xs.append(x)
        for column, name in zip(columns, names, strict=True):
            value = metrics.get(name)
            column.append(None if value is None else float(value))  # float() reads "NaN", "Infinity"
    values = [np.array([math.nan if value is None else value for value in column]) for column in columns]
    missing = [np.array([value is None for value in column], dtype=bool) for column in columns]
    return Columns(np.array(steps, dtype=np.int64), np.array(xs, dtype=np.float64), values, missing)


COLUMN_READERS = {"postgresql": _columns_postgres}


# Fewer finite points than this and a chart shows its raw values only: an EMA over a handful of points (an
# eval every 500 steps) lags behind them and hides the last one. Learning rates are a schedule, not noise.
SHORT_SERIES_POINTS = 50
LEARNING_RATE_NAMES = ("lr", "learning_rate")


def smoothing_applies(name: str, finite_points: int) -> bool:
    leaf = name.rsplit("/", 1)[-1]
    return finite_points >= SHORT_SERIES_POINTS and leaf not in LEARNING_RATE_NAMES


def _smoothed_series_json(name: str, x: np.ndarray, y: np.ndarray, in_range: np.ndarray, max_points: int,
                          smoothing: float) -> dict[str, list]:
    """The downsampled series of the rows in range; with smoothing, also the full series' EMA over that range."""
    finite = np.isfinite(y)
    if not smoothing or not smoothing_applies(name, int(finite.sum())):
        return _series_json(downsample(x[in_range], y[in_range], max_points))
    # NaN/Inf rows take no part in the EMA (they are drawn as markers); the EMA is over the finite rows in order.
    smoothed = np.full_like(y, np.nan)
    smoothed[finite] = exponential_moving_average(y[finite], smoothing)
    # Its own points, evenly spaced: taken at the raw trace's per-bucket extremes, the EMA would follow each
    # extreme's pull (0.4 of a 3-sigma spike at weight 0.6) and zigzag between them.
    kept = in_range & finite
    every = evenly_spaced(int(kept.sum()), max_points)
    return {**_series_json(downsample(x[in_range], y[in_range], max_points)),
            "smoothed_x": x[kept][every].tolist(), "smoothed": smoothed[kept][every].tolist()}


def _series_json(series: Series) -> dict[str, list]:
    # Not dataclasses.asdict: it deep-copies every float (0.5 s for 20 series of 2,000 points).
    return {"x": series.x, "y": series.y, "nonfinite_x": series.nonfinite_x, "nonfinite": series.nonfinite}


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


# How the API spells a stored non-finite value (JSON has no NaN): the words a client may send back.
API_NONFINITE = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}
METRIC_ROWS_PAGE_MAX = 1000


def api_json_value(value: Any) -> Any:
    """A stored metric value (or a dict or list of them) as the API shows it: non-finite as "nan", "inf", "-inf"."""
    if isinstance(value, str):
        return API_NONFINITE.get(value, value)
    if isinstance(value, dict):
        return {key: api_json_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [api_json_value(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


@dataclass(frozen=True)
class MetricRowsPage:
    """Every logged row after a step, in step order (not downsampled); `next_after_step` is where the next page
    starts, None when these were the last."""

    rows: list[dict[str, Any]]
    next_after_step: int | None


def metric_rows_page(*, run_id: int, after_step: int | None = None, limit: int = METRIC_ROWS_PAGE_MAX) -> MetricRowsPage:
    """Up to `limit` of the run's rows after `after_step` (from the first when None), values JSON-safe."""
    limit = max(1, min(limit, METRIC_ROWS_PAGE_MAX))
    rows = MetricRow.objects.filter(run_id=run_id).order_by("step")
    if after_step is not None:
        rows = rows.filter(step__gt=after_step)
    fetched = list(rows.values_list("step", "wall_time", "tokens_seen", "metrics")[: limit + 1])
    page = [
        {"step": step, "wall_time": wall_time, "tokens_seen": tokens_seen, "metrics": api_json_value(metrics)}
        for step, wall_time, tokens_seen, metrics in fetched[:limit]
    ]
    return MetricRowsPage(page, page[-1]["step"] if len(fetched) > limit else None)


def run_samples_list(*, run_id: int, step: int | None = None) -> QuerySet[Sample]:
    """The run's samples in step order (of one step when given)."""
    samples = Sample.objects.filter(run_id=run_id).order_by("step", "id")
    return samples.filter(step=step) if step is not None else samples


def sample_api_row(sample: Sample) -> dict[str, Any]:
    return {"step": sample.step, "prompt": sample.prompt, "completion": sample.completion,
            "rewards": api_json_value(sample.rewards), "advantage": api_json_value(sample.advantage)}
