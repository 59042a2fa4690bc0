"""One lifecycle for every kind of job a worker runs (runs, sampling jobs, import jobs): claimed only while queued,
a heartbeat while it runs, progress, a cancel asked of it, and one end (succeeded, canceled, failed with the
reason). The periodic reconcile (webapp.jobs) fails a job whose worker stopped beating and publishes again one
whose message the broker lost.

Each kind's services call in here with a JobKind that says what differs: how a failure's reason is written, what
the stale check says, which fields its claim and its end also set. Status changes are conditional UPDATEs (or,
for a claim, a locked row), so two writers at once cannot both change a job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from webapp.queueing import requeue_lost

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobKind:
    """What the lifecycle needs to know of one kind of job; its model has status (its Status has QUEUED, RUNNING,
    SUCCEEDED and FAILED), started_at, heartbeat_at and finished_at."""

    model: type[models.Model]
    # "run", "sampling job": in log lines
    noun: str
    # names its queue messages (webapp.queueing)
    message_kind: str
    # the task a worker runs it by (webapp.celery_app), published again when its message is lost
    task_name: str
    # the fields a failure writes from its reason
    failed_fields: Callable[[str], dict[str, Any]]
    # what a job whose heartbeats stopped is failed with, given the job and its last heartbeat ("never" if none)
    stale_reason: Callable[[Any], str]
    # more fields its claim sets, and every end of it
    started_fields: Mapping[str, Any] = field(default_factory=dict)
    ended_fields: Mapping[str, Any] = field(default_factory=dict)
    # called with the job's id once it ended, however (an import's kept upload goes)
    on_end: Callable[[int], None] | None = None
    # running jobs the stale check leaves alone for now (None: none), by the time it checks at
    stale_exempt: Callable[[datetime], Q | None] | None = None
    # queued jobs that are never handed to a worker, so never published again
    never_published: Q | None = None
    # the setting that bounds the silence of a running job's worker, in seconds
    heartbeat_timeout_setting: str = "PREFLAB_HEARTBEAT_TIMEOUT_S"

    @property
    def status(self) -> Any:
        return self.model.Status  # type: ignore[attr-defined]

    @property
    def active(self) -> tuple[str, str]:
        return (self.status.QUEUED, self.status.RUNNING)

    def rows(self, job_id: int) -> QuerySet:
        return self.model.objects.filter(pk=job_id)  # type: ignore[attr-defined]


def job_claim(kind: JobKind, job_id: int) -> bool:
    """Claim a queued job for this worker (queued -> running), its row locked; False, and nothing written, if it is
    not queued any more (canceled, or a second message for it)."""
    now = timezone.now()
    with transaction.atomic():
        status = kind.rows(job_id).select_for_update().values_list("status", flat=True).first()
        if status != kind.status.QUEUED:
            logger.info("%s %s is %s, not queued: nothing to do", kind.noun, job_id, status)
            return False
        kind.rows(job_id).update(status=kind.status.RUNNING, started_at=now, heartbeat_at=now, **kind.started_fields)
    return True


def job_heartbeat(kind: JobKind, job_id: int) -> bool:
    """The job's worker is alive; False (and nothing written) if the job is not running."""
    return bool(kind.rows(job_id).filter(status=kind.status.RUNNING).update(heartbeat_at=timezone.now()))


def job_progress(kind: JobKind, job_id: int, **fields: Any) -> None:
    kind.rows(job_id).update(**fields)


def job_should_stop(kind: JobKind, job_id: int) -> bool:
    """Between steps: stop if a cancel was asked, or if the job is no longer running (the stale check failed it)."""
    status, cancel = kind.rows(job_id).values_list("status", "cancel_requested").get()
    return cancel or status != kind.status.RUNNING


def job_cancel(kind: JobKind, job_id: int) -> None:
    """A queued job is canceled at once; a running one is asked to stop (job_should_stop) and ends itself."""
    if job_end(kind, job_id, kind.status.CANCELED, only_from=(kind.status.QUEUED,), cancel_requested=True):
        return
    kind.rows(job_id).filter(status=kind.status.RUNNING).update(cancel_requested=True)


def job_succeed(kind: JobKind, job_id: int, **fields: Any) -> bool:
    return job_end(kind, job_id, kind.status.SUCCEEDED, only_from=(kind.status.RUNNING,), **fields)


def job_stopped(kind: JobKind, job_id: int) -> bool:
    """The job stopped on a cancel: what it wrote stays."""
    return job_end(kind, job_id, kind.status.CANCELED, only_from=(kind.status.RUNNING,))


def job_fail(kind: JobKind, job_id: int, reason: str, **fields: Any) -> bool:
    """Fail a queued or running job with `reason` (as the kind writes it); False if it had ended already."""
    return job_end(kind, job_id, kind.status.FAILED, only_from=kind.active, **kind.failed_fields(reason), **fields)


def job_end(kind: JobKind, job_id: int, status: str, *, only_from: tuple[str, ...], **fields: Any) -> bool:
    """The job ends with `status` if it is in one of `only_from`; False (and nothing written) if not. The kind's
    on_end runs either way: whatever it frees is not needed once the job has ended."""
    ended = kind.rows(job_id).filter(status__in=only_from).update(
        status=status, finished_at=timezone.now(), **kind.ended_fields, **fields
    )
    if not ended:
        logger.info("%s %s: refused the change to %s", kind.noun, job_id, status)
    if kind.on_end is not None:
        kind.on_end(job_id)
    return bool(ended)


def last_heartbeat(job: Any) -> str:
    """When the job's worker last beat, as a reason says it."""
    return job.heartbeat_at.isoformat(timespec="seconds") if job.heartbeat_at else "never"


def jobs_fail_stale(kind: JobKind, *, now: datetime | None = None,
                    fail: Callable[[int, str], bool] | None = None) -> list[int]:
    """Fail every running job of `kind` whose worker stopped sending heartbeats (killed or lost), with the kind's
    stale reason; the ids failed. `fail` writes the failure where the kind writes more than job_fail does."""
    now = now or timezone.now()
    limit = now - timedelta(seconds=getattr(settings, kind.heartbeat_timeout_setting))
    stale = kind.model.objects.filter(status=kind.status.RUNNING).filter(  # type: ignore[attr-defined]
        Q(heartbeat_at__lt=limit) | Q(heartbeat_at__isnull=True, started_at__lt=limit)
    )
    exempt = kind.stale_exempt(now) if kind.stale_exempt is not None else None
    if exempt is not None:
        stale = stale.exclude(exempt)
    fail = fail or (lambda job_id, reason: job_fail(kind, job_id, reason))
    return [job.pk for job in stale if fail(job.pk, kind.stale_reason(job))]


def jobs_requeue_lost(kind: JobKind, *, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every job of `kind` queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    queued = kind.model.objects.filter(status=kind.status.QUEUED)  # type: ignore[attr-defined]
    if kind.never_published is not None:
        queued = queued.exclude(kind.never_published)
    return requeue_lost(kind.task_name, kind=kind.message_kind, queued=queued, message_ids=message_ids, now=now)
