"""A run's lifecycle: create, queue, start, cancel, fail (also when stale), resume, finish; one write path per
status change (TRANSITIONS)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from trainer.config import ConfigError, check_data_size, config_to_dict
from trainer.kinds import KINDS, config_from_dict, run_kind
from webapp import job_lifecycle as lifecycle
from webapp.celery_app import RUN_TRAINING
from webapp.experiments import selectors
from webapp.experiments.data_snapshot import SNAPSHOTTED_SOURCES, snapshot_path, snapshot_write
from webapp.experiments.data_sources import (
    data_source_check,
    data_source_rewards_check,
    data_source_rows,
    training_rows,
)
from webapp.experiments.models import EXTERNAL_KIND, MODEL_FIELDS, MetricRow, ModelRef, Run, Sample
from webapp.experiments.services.registry import _resolved_model_fields, model_resolve
from webapp.queueing import publish_before_commit, publish_on_commit
from webapp.text import storable_text

logger = logging.getLogger(__name__)


Status = Run.Status
# Status changes allowed by the run's services; anything else is refused (e.g. a late "succeeded" after
# the stale-heartbeat check already failed the run).
TRANSITIONS: dict[str, set[str]] = {
    # failed: its message could not be published
    Status.QUEUED: {Status.RUNNING, Status.CANCELED, Status.FAILED},
    Status.RUNNING: {Status.SUCCEEDED, Status.FAILED, Status.CANCELED},
    Status.SUCCEEDED: {Status.QUEUED},
    Status.FAILED: {Status.QUEUED},
    Status.CANCELED: {Status.QUEUED},
}
# Set by the service, never by a form: where the run writes, and which checkpoint it continues from.
SERVICE_FIELDS = ("output_dir", "resume_from")
# names a run's queue messages (webapp.queueing)
RUN_MESSAGE_KIND = "run"


def _validated_config(kind: str, config: Mapping[str, Any], output_dir: str) -> dict[str, Any]:
    if kind not in KINDS:
        raise ValidationError({"kind": f"unknown run kind {kind!r}; choose one of {', '.join(KINDS)}"})
    values = {key: value for key, value in config.items() if key not in SERVICE_FIELDS}
    values.update(_resolved_model_fields(kind, values))
    try:
        validated = config_from_dict(kind, {**values, "output_dir": output_dir})
    except ConfigError as error:
        raise ValidationError({error.field: error.message}) from None
    except TypeError as error:
        raise ValidationError({"config": str(error)}) from None
    return config_to_dict(validated)


def _data_size_check(kind: str, config: dict[str, Any], data_source: Mapping[str, Any]) -> None:
    """The config's bounds that follow from the data's size (trainer.config.check_data_size): the batch, and the steps
    of `epochs` passes. The trainer checks them again when it reads the data, which may have changed meanwhile."""
    rows = data_source_rows(kind, data_source)
    if rows is None:
        return
    if rows == 0:
        rows_are = {"prompts": "prompts", "unpaired": "thumbs, rankings or ratings (KTO's unpaired rows)"}.get(
            run_kind(kind).rows, "preference pairs")
        raise ValidationError({"project": f"the project has no {rows_are} to train on yet"})
    try:
        check_data_size(config_from_dict(kind, config), rows)
    except ConfigError as error:
        raise ValidationError({error.field: error.message}) from None


def _queue(run: Run, *, on_failure: Callable[[str], None]) -> None:
    """Mark the run queued now and publish its message once committed; on_failure undoes the launch if the broker
    cannot be reached (QueueUnavailable then reaches the caller)."""
    Run.objects.filter(pk=run.pk).update(queued_at=timezone.now())
    publish_on_commit(RUN_TRAINING, kind=RUN_MESSAGE_KIND, object_id=run.pk, on_failure=on_failure)


def _queue_before_commit(run: Run) -> None:
    """Mark the run queued now and publish its message before the caller's transaction commits: a broker that
    cannot be reached undoes it all (QueueUnavailable reaches the caller), so a resumed run stays as it was."""
    Run.objects.filter(pk=run.pk).update(queued_at=timezone.now())
    publish_before_commit(RUN_TRAINING, kind=RUN_MESSAGE_KIND, object_id=run.pk)


def _forget_unqueued_run(run_id: int) -> Callable[[str], None]:
    """A new run that could not be queued is removed: the user is told, and no 'queued' row waits for ever."""
    return lambda reason: Run.objects.filter(pk=run_id, status=Status.QUEUED).delete()


def runs_requeue_lost(*, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every run queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    return lifecycle.jobs_requeue_lost(RUN_JOB, message_ids=message_ids, now=now)


@transaction.atomic
def run_create(
    *,
    kind: str,
    config: Mapping[str, Any],
    data_source: Mapping[str, Any],
    created_by: AbstractBaseUser | None,
    name: str = "",
    parent: Run | None = None,
) -> Run:
    """Validate the config with the trainer's dataclass and against its data, store the run and queue it once
    committed."""
    _models_check(config, user=created_by)
    checked = _validated_config(kind, config, str(settings.RUNS_DIR / "new"))
    data_source_check(kind, data_source)
    _data_size_check(kind, checked, data_source)
    data_source_rewards_check(kind, checked, data_source)
    run = Run.objects.create(
        name=name.strip() or f"{kind} run", kind=kind, config={}, data_source=dict(data_source),
        created_by=created_by, parent=parent,
    )
    output_dir = settings.RUNS_DIR / str(run.pk)
    _set_aside_stale_output(output_dir)
    run.config = _validated_config(kind, config, str(output_dir))
    run.save(update_fields=["config"])
    _snapshot_training_data(run)
    _queue(run, on_failure=_forget_unqueued_run(run.pk))
    return run


def _snapshot_training_data(run: Run) -> None:
    """Freeze the rows the run will train on (webapp.experiments.data_snapshot), recording their count and hash."""
    if run.data_source.get("type") not in SNAPSHOTTED_SOURCES:
        return
    rows, _ = training_rows(run.kind, run.data_source)
    snapshot = snapshot_write(rows, snapshot_path(run.pk))
    run.data_rows, run.data_sha256 = snapshot.rows, snapshot.sha256
    run.save(update_fields=["data_rows", "data_sha256"])


def _models_check(config: Mapping[str, Any], *, user: AbstractBaseUser | None) -> None:
    """A run's models are models its launcher sees: another team's checkpoint is refused as an unknown model."""
    if user is None:
        return
    for field in MODEL_FIELDS:
        value = config.get(field)
        if isinstance(value, str) and value.strip():
            try:
                model_resolve(value, user=user)
            except ValidationError as error:
                raise ValidationError({field: error.messages}) from None


def _set_aside_stale_output(output_dir: Path) -> None:
    """A new run's id is new, so anything already in its output directory was left by an earlier database (a
    reset one, or a test session's): moved aside, never deleted, so keep_last cannot count or remove it."""
    if not output_dir.exists():
        return
    aside = output_dir.with_name(f"{output_dir.name}.stale-{timezone.now():%Y%m%dT%H%M%S%f}")
    output_dir.rename(aside)
    logger.warning("run output %s existed before its run; moved to %s", output_dir, aside)


def _transition(run_id: int, target: str, *, only_from: str | None = None, **fields: Any) -> bool:
    """Move a run to `target` if that is allowed from its current status; False (and nothing written) if not."""
    sources = [status for status, targets in TRANSITIONS.items() if target in targets]
    if only_from is not None:
        sources = [status for status in sources if status == only_from]
    changed = Run.objects.filter(pk=run_id, status__in=sources).update(status=target, **fields)
    if not changed:
        logger.info("run %s: refused the change to %s", run_id, target)
    return bool(changed)


def run_cancel(*, run_id: int) -> None:
    """A queued run is canceled at once; a running one stops at its next step (the sink's should_stop)."""
    lifecycle.job_cancel(RUN_JOB, run_id)


def run_cancel_unanswered(*, run_id: int, reason: str) -> bool:
    """A running run whose training did not answer its cancel, and whose worker killed it: canceled with `reason` as
    its error text; False (and nothing written) if the run is no longer running."""
    if not Run.objects.filter(pk=run_id, cancel_requested=True).exists():
        return False
    return _transition(run_id, Status.CANCELED, only_from=Status.RUNNING, finished_at=timezone.now(),
                       error=storable_text(reason))


def run_fail(*, run_id: int, error: str, alert: str | None = None) -> bool:
    error = storable_text(error)  # an error can quote what the model wrote
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        alerts = list(run.alerts)
        if alert and not any(item["kind"] == alert for item in alerts):
            alerts.append({"kind": alert, "step": run.current_step, "message": error.splitlines()[0]})
        return lifecycle.job_fail(RUN_JOB, run_id, error, alerts=alerts)


def runs_fail_stale(*, now: datetime | None = None) -> list[int]:
    """Fail every running run whose worker (or, for an external run, whose client) stopped sending heartbeats:
    it was killed or lost."""
    return lifecycle.jobs_fail_stale(RUN_JOB, now=now, fail=_run_fail_stale)


@transaction.atomic
def _run_fail_stale(run_id: int, reason: str) -> bool:
    """Fail the run for its missing heartbeats, marked as such (heartbeat_lost): an external run's program may be
    alive behind a network outage and come back (webapp.experiments.services.external)."""
    failed = run_fail(run_id=run_id, error=reason, alert="stale_heartbeat")
    if failed:
        Run.objects.filter(pk=run_id).update(heartbeat_lost=True)
    return failed


def _stale_reason(run: Run) -> str:
    # an external run has no worker: its own program logs and beats through the API
    sender = "the client" if run.kind == EXTERNAL_KIND else "worker"
    return f"{sender} stopped sending heartbeats; last at {lifecycle.last_heartbeat(run)}"


@transaction.atomic
def run_resume(*, run_id: int, checkpoint_id: int, remove_later: bool = False) -> Run:
    """Continue a finished run from one of its checkpoints: later rows are rewound, the step axis continues. If
    the broker cannot be reached nothing changes (QueueUnavailable): its status, rows and checkpoints stay.

    The run's checkpoints after the chosen one belong to the abandoned branch: they are removed (rows and
    directories) only when `remove_later` confirms it, and never while another run uses one as a model."""
    run = Run.objects.select_for_update().get(pk=run_id)
    if run.is_external:
        raise ValidationError({"kind": f"run {run_id} is an external run, logged by its own program; it cannot be "
                                       "resumed here"})
    checkpoint = ModelRef.objects.filter(pk=checkpoint_id, run=run).first()
    if checkpoint is None or checkpoint.step is None:
        raise ValidationError({"checkpoint": f"checkpoint {checkpoint_id} does not belong to run {run_id}"})
    if run.is_active:
        raise ValidationError({"status": f"run {run_id} is {run.status}; only a finished run can be resumed"})
    plan = selectors.resume_plan(run=run, checkpoint=checkpoint)
    if plan.blocked:
        users = "; ".join(
            f"step {model.step} is a model of " + ", ".join(f"run #{user.pk} {user.name}" for user in plan.used_by[model.path])
            for model in plan.removed if model.path in plan.used_by
        )
        raise ValidationError({"checkpoint": ValidationError(
            f"resuming from step {checkpoint.step} would remove later checkpoints that other runs use ({users}); "
            f"fork the run from step {checkpoint.step} instead", code="in_use")})
    if plan.removed and not remove_later:
        steps = ", ".join(f"step {model.step}" for model in plan.removed)
        raise ValidationError({"checkpoint": ValidationError(
            f"resuming from step {checkpoint.step} removes the later checkpoints {steps}; confirm to remove them",
            code="confirm")})
    _rewind(run, checkpoint.step, plan.removed)
    run.config = {**run.config, "resume_from": checkpoint.path}
    run.save(update_fields=["config"])
    _transition(
        run_id, Status.QUEUED, error="", cancel_requested=False, finished_at=None, current_step=checkpoint.step,
        checkpoint_path=checkpoint.path,
        alerts=[alert for alert in run.alerts if alert.get("step", 0) <= checkpoint.step and alert["kind"] != "stale_heartbeat"],
    )
    _queue_before_commit(run)
    run.refresh_from_db()
    return run


def _rewind(run: Run, step: int, later_checkpoints: list[ModelRef]) -> None:
    MetricRow.objects.filter(run=run, step__gt=step).delete()
    Sample.objects.filter(run=run, step__gt=step).delete()
    ModelRef.objects.filter(pk__in=[model.pk for model in later_checkpoints]).delete()
    directories = [Path(model.path) for model in later_checkpoints]
    # Disk follows the rows only once they are gone for good.
    transaction.on_commit(lambda: _remove_run_directories(directories))


def _remove_run_directories(directories: list[Path]) -> None:
    runs_dir = Path(settings.RUNS_DIR).resolve()
    for directory in directories:
        if directory.resolve().is_relative_to(runs_dir):
            shutil.rmtree(directory, ignore_errors=True)
        else:
            logger.warning("not removing %s: it is outside the runs directory %s", directory, runs_dir)


def run_start(*, run_id: int) -> Run | None:
    """Claim a queued run for this worker (queued -> running); None, and nothing written, if it is not queued
    (e.g. a redelivered task after its worker was killed)."""
    return Run.objects.get(pk=run_id) if lifecycle.job_claim(RUN_JOB, run_id) else None


def run_finish(*, run_id: int, stopped: bool) -> bool:
    """The loop returned: canceled if it stopped on request, else succeeded (refused if the run failed meanwhile)."""
    return lifecycle.job_stopped(RUN_JOB, run_id) if stopped else lifecycle.job_succeed(RUN_JOB, run_id)


def run_heartbeat(*, run_id: int) -> bool:
    """The run's worker or client is alive; False (and nothing written) if the run is not running."""
    return lifecycle.job_heartbeat(RUN_JOB, run_id)


def run_should_stop(*, run_id: int) -> bool:
    """Between steps: stop if a cancel was asked, or if the run is no longer running (the stale check failed it, say)."""
    return lifecycle.job_should_stop(RUN_JOB, run_id)


RUN_JOB = lifecycle.JobKind(
    model=Run, noun="run", message_kind=RUN_MESSAGE_KIND, task_name=RUN_TRAINING,
    failed_fields=lambda reason: {"error": storable_text(reason)},
    stale_reason=_stale_reason,
    # a run claimed again (resumed) starts clean
    started_fields={"error": "", "finished_at": None},
    # an external run is never queued; excluded all the same, since publishing one would hand it to a worker
    never_published=Q(kind=EXTERNAL_KIND),
)
