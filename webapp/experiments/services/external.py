"""External runs: logged through the API by a program outside Preflab (rows, samples, heartbeats, finish).

Reattach after the heartbeat timeout: the reconcile fails a run whose heartbeats stopped and marks it so
(`Run.heartbeat_lost`), but its program may only have lost the server for a while, or have crashed leaving a
journal that another process replays. Such a run still takes rows and samples (idempotent as for a running run;
its status stays failed); a heartbeat of its program reopens it to running (an alert "reopened" says after how
many seconds); a finish ends it with the finish's status (and error). A run failed for any other reason, canceled
or succeeded takes no more writes (409), except a replay of what it already has."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from trainer.sink import decode_json_value, encode_json_value
from webapp.experiments import selectors
from webapp.experiments.models import EXTERNAL_KIND, MetricRow, Run, SampleBatch
from webapp.experiments.services.launches import _name_check
from webapp.experiments.services.metrics import metric_rows_write, samples_write
from webapp.experiments.services.runs import Status, _transition, run_heartbeat
from webapp.text import storable_text, typed_text_problem
from webapp.text_bounds import (
    EXTERNAL_CONFIG_MAX_CHARS,
    NAME_MAX_CHARS,
    PROMPT_MAX_CHARS,
    RESPONSE_MAX_CHARS,
    RUN_ERROR_MAX_CHARS,
    length_problem,
)


def _cut_to_bound(text: str, max_chars: int) -> str:
    """`text`, or its beginning and end with a note of what was cut between them: an error report is kept, not
    refused (refusing a failed run's finish would leave it running until its heartbeats are missed)."""
    if len(text) <= max_chars:
        return text
    note = f"\n[... {len(text) - max_chars:,} characters cut (at most {max_chars:,} are kept) ...]\n"
    kept = max_chars - len(note)
    return text[: kept // 2] + note + text[len(text) - (kept - kept // 2):]


# Bounds of one request, and of the metric names one run may log (each is a chart on the run page).
EXTERNAL_ROWS_MAX = 10_000
EXTERNAL_SAMPLES_MAX = 1_000
RUN_METRIC_NAMES_MAX = 1_000
METRIC_NAME_MAX_LENGTH = NAME_MAX_CHARS
BATCH_ID_MAX_LENGTH = SampleBatch._meta.get_field("batch_id").max_length or 100
# PositiveIntegerField: Postgres integer
STEP_MAX = 2**31 - 1
TOKENS_MAX = 2**63 - 1
# How a client may spell a non-finite number in JSON (which has none); "nan", "inf", "-inf" is the API's own.
NONFINITE_WORDS = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
                   "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf}


FINISHED_STATUSES = (Status.SUCCEEDED, Status.FAILED, Status.CANCELED)


class RunWriteRefused(Exception):
    """A write the run cannot take in its state: it is no longer running, it is not an external run (our own
    runs are written by their worker only), or it holds as many metric names as a run may. The API answers 409."""


@dataclass(frozen=True)
class LoggedRow:
    """One row a client logged; metrics without the names it sent as null; wall time and tokens when given."""

    step: int
    metrics: dict[str, float]
    wall_time: float | None
    tokens_seen: int | None


def _where(index: int, field: str, noun: str = "row") -> str:
    return f'{noun} {index}, field "{field}"'


def _logged_number(value: Any, where: str) -> float | None:
    """A float from a number, null (None: no value) or a non-finite number's word."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise ValidationError(f"{where}: {value} is too large for a float") from None
    if isinstance(value, str) and value.strip().lower() in NONFINITE_WORDS:
        return NONFINITE_WORDS[value.strip().lower()]
    raise ValidationError(f'{where}: expected a number, null or "nan", "inf", "-inf"; got {_shown(value)}')


def _whole_number(value: Any, where: str, *, maximum: int) -> int:
    if isinstance(value, float) and value.is_integer():  # JSON has one type of number: 10.0 is 10
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ValidationError(f"{where}: expected a whole number from 0 to {maximum:,}; got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _metric_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(f"{where}: a metric name must be a non-empty string; got {_shown(name)}")
    problem = typed_text_problem(name, max_length=METRIC_NAME_MAX_LENGTH)
    if problem:
        raise ValidationError(f"{where}: the metric name {_shown(name)} {problem}")
    return name


def _check_list(items: Any, *, field: str, maximum: int, per: str) -> None:
    """A client's list of rows or samples, of at most `maximum` items; ValidationError naming the field."""
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise ValidationError(f'field "{field}": expected a list of {field}')
    if len(items) > maximum:
        raise ValidationError(f'field "{field}": {len(items):,} {field}; at most {maximum:,} {per}')


def _logged_rows(rows: Sequence[Any]) -> list[LoggedRow]:
    """Parse a client's rows; ValidationError naming the row (0-based) and field of the first problem."""
    _check_list(rows, field="rows", maximum=EXTERNAL_ROWS_MAX, per="a request")
    parsed = []
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValidationError(f"row {index}: expected an object with step and metrics; got {_shown(row)}")
        unknown = sorted(set(row) - {"step", "metrics", "wall_time", "tokens_seen"})
        if unknown:
            raise ValidationError(f'{_where(index, unknown[0])}: unknown field; a row has step, metrics, wall_time '
                                  "and tokens_seen")
        step = _whole_number(row.get("step"), _where(index, "step"), maximum=STEP_MAX)
        metrics = row.get("metrics")
        if not isinstance(metrics, Mapping):
            raise ValidationError(f"{_where(index, 'metrics')}: expected an object of metric names to numbers")
        values = {}
        for name, value in metrics.items():
            name = _metric_name(name, _where(index, "metrics"))
            number = _logged_number(value, _where(index, f"metrics.{name}"))
            if number is not None:
                values[name] = number
        wall_time = _logged_number(row.get("wall_time"), _where(index, "wall_time"))
        if wall_time is not None and not math.isfinite(wall_time):
            raise ValidationError(f"{_where(index, 'wall_time')}: must be a finite number of seconds")
        tokens = row.get("tokens_seen")
        tokens = None if tokens is None else _whole_number(tokens, _where(index, "tokens_seen"), maximum=TOKENS_MAX)
        parsed.append(LoggedRow(step, values, wall_time, tokens))
    return parsed


def _merged_by_step(rows: list[LoggedRow]) -> dict[int, LoggedRow]:
    """Rows of one request for the same step are one row: later values win, as they would in two requests."""
    merged: dict[int, LoggedRow] = {}
    for row in rows:
        earlier = merged.get(row.step)
        if earlier is not None:
            row = LoggedRow(row.step, {**earlier.metrics, **row.metrics},
                            row.wall_time if row.wall_time is not None else earlier.wall_time,
                            row.tokens_seen if row.tokens_seen is not None else earlier.tokens_seen)
        merged[row.step] = row
    return merged


def _external_run_locked(run_id: int) -> Run:
    """The run, locked for this transaction; RunWriteRefused if Preflab runs it itself."""
    run = Run.objects.select_for_update().get(pk=run_id)
    if not run.is_external:
        raise RunWriteRefused(f"run {run_id} is a {run.kind} run that Preflab runs; only external runs (POST "
                              "/runs/external) take rows, samples, heartbeats and finish from a client")
    return run


def _takes_late_writes(run: Run) -> bool:
    """Running, or failed only because its heartbeats stopped (the module's docstring)."""
    return run.status == Status.RUNNING or (run.status == Status.FAILED and run.heartbeat_lost)


def _not_running(run: Run) -> RunWriteRefused:
    return RunWriteRefused(f"run {run.pk} is {run.status}, no longer running; it takes no more writes")


def _storable_json(value: Any) -> Any:
    """Any JSON a client sent, as Postgres jsonb can hold it: non-finite floats spelled as the metrics spell them,
    NUL characters (which jsonb refuses) replaced."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        return {storable_text(str(key)): _storable_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_storable_json(item) for item in value]
    return encode_json_value(value)


TAGS_MAX = 50
TAG_MAX_CHARS = 64
GROUP_MAX_CHARS = Run._meta.get_field("group").max_length or 200


def _json_object(field: str, value: Any) -> dict[str, Any]:
    """A JSON object a client sent for `field` (config, summary), storable and within the config's bound."""
    if not isinstance(value, Mapping):
        raise ValidationError({field: f"expected a JSON object; got {_shown(value)}"})
    problem = length_problem(json.dumps(value, default=str), EXTERNAL_CONFIG_MAX_CHARS)
    if problem:
        raise ValidationError({field: f"as JSON, the {field} {problem} (it is shown on the run's page)"})
    return _storable_json(dict(value))


def _tags(tags: Any) -> list[str]:
    """Tags as sent, blanks around each removed, each once, in their order."""
    if not isinstance(tags, list | tuple):
        raise ValidationError({"tags": f"expected a list of texts; got {_shown(tags)}"})
    if len(tags) > TAGS_MAX:
        raise ValidationError({"tags": f"{len(tags)} tags; at most {TAGS_MAX}"})
    kept: list[str] = []
    for index, tag in enumerate(tags):
        if not isinstance(tag, str) or not tag.strip():
            raise ValidationError({"tags": f"tag {index}: expected a non-blank text; got {_shown(tag)}"})
        if len(tag.strip()) > TAG_MAX_CHARS:
            raise ValidationError({"tags": f"tag {index}: {len(tag.strip())} characters; at most {TAG_MAX_CHARS}"})
        if tag.strip() not in kept:
            kept.append(storable_text(tag.strip()))
    return kept


def _group(group: Any) -> str:
    if not isinstance(group, str):
        raise ValidationError({"group": f"expected text; got {_shown(group)}"})
    if len(group.strip()) > GROUP_MAX_CHARS:
        raise ValidationError({"group": f"{len(group.strip())} characters; at most {GROUP_MAX_CHARS}"})
    return storable_text(group.strip())


def external_run_create(
    *, name: str, config: Mapping[str, Any], created_by: AbstractBaseUser | None, project_id: int | None = None,
    total_steps: int | None = None, tags: Sequence[str] = (), group: str = "",
) -> Run:
    """A run a program outside Preflab logs through the API: running from now (its heartbeat too), never queued.

    Its config is any JSON object, stored as sent (it is shown and compared, never validated); `project_id` names
    the project whose data it trains on, if any."""
    _name_check(name)
    config = _json_object("config", config)
    tags, group = _tags(list(tags)), _group(group)
    if total_steps is not None:
        _whole_number_field("total_steps", total_steps, minimum=1, maximum=STEP_MAX)
    data_source: dict[str, Any] = {"type": EXTERNAL_KIND}
    if project_id is not None:
        if not isinstance(project_id, int) or not selectors.project_reachable(project_id, user=created_by):
            raise ValidationError({"project_id": f"there is no project {_shown(project_id)}"})
        data_source["project_id"] = project_id
    now = timezone.now()
    return Run.objects.create(
        name=name.strip() or "external run", kind=EXTERNAL_KIND, config=config, tags=tags, group=group,
        data_source=data_source, status=Status.RUNNING, started_at=now, heartbeat_at=now, total_steps=total_steps,
        created_by=created_by,
    )


def _whole_number_field(field: str, value: Any, *, minimum: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValidationError({field: f"expected a whole number from {minimum} to {maximum:,}; got {_shown(value)}"})


def external_metrics_log(*, run_id: int, rows: Sequence[Any]) -> int:
    """Store a client's rows; the number of steps whose stored row changed.

    Idempotent by (run, step): a row for a stored step merges its metrics into the stored ones (a trainer logs
    train and eval metrics at one step in two calls), and a row equal to the stored one writes nothing, so a
    replayed request answers 0 even once the run has finished. Any other write to a run that is no longer running
    is RunWriteRefused. Non-finite values are stored; a null value means "no value at this step" and leaves a
    stored one alone. Progress, alerts and the run's metric names move as for our own runs."""
    logged = _merged_by_step(_logged_rows(rows))
    if not logged:
        return 0
    with transaction.atomic():
        run = _external_run_locked(run_id)
        stored = {row.step: row for row in MetricRow.objects.filter(run=run, step__in=list(logged))}
        now = time.time()
        changed = []
        for step, row in sorted(logged.items()):
            old = stored.get(step)
            metrics = {**(decode_json_value(old.metrics) if old else {}), **row.metrics}
            wall_time = row.wall_time if row.wall_time is not None else (old.wall_time if old else now)
            tokens = row.tokens_seen if row.tokens_seen is not None else (old.tokens_seen if old else run.tokens_seen)
            same = old is not None and (old.wall_time, old.tokens_seen, old.metrics) == (
                wall_time, tokens, encode_json_value(metrics))
            if not same:
                changed.append({"step": step, "wall_time": wall_time, "tokens_seen": tokens, "metrics": metrics})
        if not _takes_late_writes(run):
            if changed:
                raise _not_running(run)
            return 0
        if not changed:
            run_heartbeat(run_id=run.pk)
            return 0
        names = set(run.metric_names).union(*(row["metrics"] for row in changed))
        if len(names) > RUN_METRIC_NAMES_MAX:
            raise RunWriteRefused(f"run {run.pk} would log {len(names):,} metric names; at most "
                                  f"{RUN_METRIC_NAMES_MAX:,} (each is a chart)")
        metric_rows_write(run_id=run.pk, rows=changed, progress_never_back=True)
    return len(changed)


def _logged_samples(samples: Sequence[Any]) -> list[dict[str, Any]]:
    _check_list(samples, field="samples", maximum=EXTERNAL_SAMPLES_MAX, per="a batch")
    parsed = []
    for index, sample in enumerate(samples):
        if not isinstance(sample, Mapping):
            raise ValidationError(f"sample {index}: expected an object with step, prompt and completion")
        unknown = sorted(set(sample) - {"step", "prompt", "completion", "rewards", "advantage"})
        if unknown:
            raise ValidationError(f"{_where(index, unknown[0], 'sample')}: unknown field; a sample has step, prompt, "
                                  "completion, rewards and advantage")
        step = _whole_number(sample.get("step"), _where(index, "step", "sample"), maximum=STEP_MAX)
        texts = {}
        for field, max_chars in (("prompt", PROMPT_MAX_CHARS), ("completion", RESPONSE_MAX_CHARS)):
            if not isinstance(sample.get(field), str):
                raise ValidationError(f"{_where(index, field, 'sample')}: expected text; got {_shown(sample.get(field))}")
            problem = length_problem(sample[field], max_chars)
            if problem:
                raise ValidationError(f"{_where(index, field, 'sample')}: the text {problem}")
            texts[field] = sample[field]
        rewards = sample.get("rewards")
        rewards = {} if rewards is None else rewards
        if not isinstance(rewards, Mapping):
            raise ValidationError(f"{_where(index, 'rewards', 'sample')}: expected an object of reward names to numbers")
        numbers = {}
        for name, value in rewards.items():
            name = _metric_name(name, _where(index, "rewards", "sample"))
            number = _logged_number(value, _where(index, f"rewards.{name}", "sample"))
            if number is not None:
                numbers[name] = number
        advantage = _logged_number(sample.get("advantage"), _where(index, "advantage", "sample"))
        parsed.append({"step": step, **texts, "rewards": numbers, "advantage": advantage})
    return parsed


def external_samples_log(*, run_id: int, batch_id: str, samples: Sequence[Any]) -> int:
    """Store a client's batch of samples once: a batch id already applied to the run writes nothing and answers
    0 (a retried request), even once the run has finished. The id is recorded in the samples' transaction."""
    if not isinstance(batch_id, str) or not batch_id.strip():
        raise ValidationError({"batch_id": "give the batch an id (a UUID the client makes), so a retry is recognised"})
    problem = typed_text_problem(batch_id, max_length=BATCH_ID_MAX_LENGTH)
    if problem:
        raise ValidationError({"batch_id": f"the batch id {problem}"})
    parsed = _logged_samples(samples)
    with transaction.atomic():
        run = _external_run_locked(run_id)
        if SampleBatch.objects.filter(run=run, batch_id=batch_id).exists():
            return 0
        if not _takes_late_writes(run):
            raise _not_running(run)
        SampleBatch.objects.create(run=run, batch_id=batch_id, sample_count=len(parsed))
        samples_write(run_id=run.pk, samples=parsed)
        run_heartbeat(run_id=run.pk)
    return len(parsed)


def external_run_heartbeat(*, run_id: int) -> None:
    """The client is alive: a run failed for missing heartbeats is running again (reopened); RunWriteRefused if
    the run is not an external one, or ended otherwise."""
    with transaction.atomic():
        run = _external_run_locked(run_id)
        if run.status == Status.FAILED and run.heartbeat_lost:
            _reopen(run)
        elif not run_heartbeat(run_id=run.pk):
            raise _not_running(run)


def _reopen(run: Run) -> None:
    """A run failed for missing heartbeats whose program beats again: running, with an alert that says so."""
    now = timezone.now()
    away_s = round((now - run.finished_at).total_seconds()) if run.finished_at else 0
    alerts = [alert for alert in run.alerts if alert.get("kind") != "reopened"] + [{
        "kind": "reopened", "step": run.current_step,
        "message": f"reopened after {away_s} s: its program beat again after the heartbeat timeout had failed it"}]
    Run.objects.filter(pk=run.pk).update(status=Status.RUNNING, heartbeat_lost=False, heartbeat_at=now,
                                         finished_at=None, error="", alerts=alerts)


class RunNotYours(Exception):
    """A reattach to an external run another user logged: the API answers 403."""


def external_run_reattach(*, run_id: int, user: AbstractBaseUser) -> Run:
    """Its program (or a new process of it) takes the run up again (`Client.init_run(..., run_id=N)`): running
    again whatever its end was, its rows, samples and config kept; rows for steps it has merge as ever.
    RunWriteRefused for a run Preflab runs itself, RunNotYours for another user's run."""
    with transaction.atomic():
        run = _external_run_locked(run_id)
        if run.created_by_id != user.pk:
            owner = run.created_by.get_username() if run.created_by else "a removed user"
            raise RunNotYours(f"run {run_id} was logged by {owner}; only the user who logged a run can reattach to "
                              "it (init_run without run_id starts a run of your own)")
        now = timezone.now()
        if run.status == Status.RUNNING:
            run_heartbeat(run_id=run.pk)
        else:
            alerts = [*run.alerts, {"kind": "resumed", "step": run.current_step,
                                    "message": f"its program reattached to it at step {run.current_step} after it "
                                               f"had {run.status}"}]
            Run.objects.filter(pk=run.pk).update(status=Status.RUNNING, heartbeat_lost=False, heartbeat_at=now,
                                                 finished_at=None, error="", cancel_requested=False, alerts=alerts)
    run.refresh_from_db()
    return run


def external_run_finish(*, run_id: int, status: str, error: str = "") -> Run:
    """The client's loop ended: succeeded, failed (with its error) or canceled (e.g. on cancel_requested).

    Finishing again with the status it already has is a replay (a retried request) and changes nothing; any other
    change of a finished run is RunWriteRefused."""
    if status not in FINISHED_STATUSES:
        raise ValidationError({"status": f"expected one of {', '.join(FINISHED_STATUSES)}; got {_shown(status)}"})
    if not isinstance(error, str):
        raise ValidationError({"error": f"expected text; got {_shown(error)}"})
    with transaction.atomic():
        run = _external_run_locked(run_id)
        if status == Status.FAILED and not error.strip():
            error = "the client reported the run failed, without a reason"
        error = storable_text(_cut_to_bound(error, RUN_ERROR_MAX_CHARS))
        if run.status == Status.FAILED and run.heartbeat_lost:  # its program's finish, late: it has the last word
            Run.objects.filter(pk=run.pk).update(status=status, heartbeat_lost=False, finished_at=timezone.now(),
                                                 error=error)
            run.refresh_from_db()
            return run
        if run.status == status:
            return run
        if run.status != Status.RUNNING:
            raise _not_running(run)
        _transition(run.pk, status, only_from=Status.RUNNING, finished_at=timezone.now(), error=error)
    run.refresh_from_db()
    return run


def external_run_update(*, run_id: int, summary: Mapping[str, Any] | None = None,
                        config: Mapping[str, Any] | None = None, tags: Sequence[str] | None = None) -> int:
    """The run's metadata changed by its program (W&B's run.summary.update, config.update, run.tags = ...):
    `summary` and `config` are merged into the stored ones key by key, `tags` replace the stored tags. Returns 1
    when something changed, 0 when the update was already applied (a replay, answered even after the run ended);
    a change to a run no longer running is RunWriteRefused."""
    summary = None if summary is None else _json_object("summary", summary)
    config = None if config is None else _json_object("config", config)
    tags = None if tags is None else _tags(list(tags))
    with transaction.atomic():
        run = _external_run_locked(run_id)
        changed = {}
        if summary is not None and {**run.summary, **summary} != run.summary:
            changed["summary"] = _json_object("summary", {**run.summary, **summary})
        if config is not None and {**run.config, **config} != run.config:
            changed["config"] = _json_object("config", {**run.config, **config})
        if tags is not None and tags != run.tags:
            changed["tags"] = tags
        if not changed:
            return 0
        if run.status != Status.RUNNING:
            raise _not_running(run)
        Run.objects.filter(pk=run.pk).update(**changed)
        run_heartbeat(run_id=run.pk)
    return 1
