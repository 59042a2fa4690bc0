"""Sampling jobs: responses sampled from a model for a project's prompts."""

import logging
import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.annotation.models import (
    GENERATION_SETTING_BOUNDS,
    OPTIONAL_SETTINGS,
    WHOLE_NUMBER_SETTINGS,
    Project,
    SamplingJob,
)
from webapp.celery_app import SAMPLE_RESPONSES
from webapp.experiments.models import ModelRef
from webapp.experiments.services import model_resolve
from webapp.queueing import publish_before_commit, publish_on_commit, requeue_lost
from webapp.text import storable_text

logger = logging.getLogger(__name__)


def model_path_check(path: str, *, user: AbstractBaseUser | None = None) -> str:
    """The path to sample from: a causal LM named as the experiments' one resolver accepts (a registered model
    or checkpoint by name or path, as `user` sees them; a directory under the model roots, a hub id)."""
    try:
        resolved = model_resolve(path, user=user)
    except ValidationError as error:
        raise ValidationError(f"model: {' '.join(error.messages)}") from None
    if resolved.architecture == ModelRef.Architecture.CLASSIFIER:
        raise ValidationError(f"model: {path.strip()!r} is a sequence classifier (a reward model); "
                              "sampling needs a causal LM")
    return resolved.path


def generation_settings_check(options: Mapping[str, Any]) -> None:
    """Refuse a sampling job's settings unless each is a number within GENERATION_SETTING_BOUNDS (a whole one where
    it counts), naming the first one at fault."""
    for name in options:
        if name not in GENERATION_SETTING_BOUNDS:
            raise ValidationError({name: f"is not a generation setting; they are {', '.join(GENERATION_SETTING_BOUNDS)}"})
    for name, (least, most) in GENERATION_SETTING_BOUNDS.items():
        value = options.get(name, OPTIONAL_SETTINGS.get(name))
        whole = name in WHOLE_NUMBER_SETTINGS
        if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
            raise ValidationError({name: f"must be {'a whole number' if whole else 'a number'}, got {value!r}"})
        if not (math.isfinite(value) and least <= value <= most):
            raise ValidationError({name: f"must be between {least} and {most}, got {value}"})


SAMPLING_MESSAGE_KIND = "sampling"
SamplingStatus = SamplingJob.Status
_ACTIVE = (SamplingStatus.QUEUED, SamplingStatus.RUNNING)


def sampling_job_create(
    *, project: Project, model_path: str, generation_settings: dict, created_by: AbstractBaseUser
) -> SamplingJob:
    """Store the job and queue it once committed; a job the broker cannot take is removed and QueueUnavailable
    (a ValidationError) says why. Settings out of their bounds are a ValidationError naming the setting."""
    generation_settings_check(generation_settings)
    path = model_path_check(model_path, user=created_by)
    with transaction.atomic():
        job = SamplingJob.objects.create(project=project, model_path=path, generation_settings=generation_settings,
                                         created_by=created_by, queued_at=timezone.now())
        job_id = job.pk
        _sampling_job_publish(job_id, on_failure=lambda reason: SamplingJob.objects.filter(
            pk=job_id, status=SamplingStatus.QUEUED).delete())
    return job


def _sampling_job_publish(job_id: int, *, on_failure: Callable[[str], None]) -> None:
    publish_on_commit(SAMPLE_RESPONSES, kind=SAMPLING_MESSAGE_KIND, object_id=job_id, on_failure=on_failure)


def sampling_job_start(*, job_id: int) -> bool:
    """Claim a queued sampling job for this worker; False, and nothing written, if it is not queued any more (a
    canceled job, or a second message for it)."""
    now = timezone.now()
    claimed = SamplingJob.objects.filter(pk=job_id, status=SamplingStatus.QUEUED).update(
        status=SamplingStatus.RUNNING, started_at=now, heartbeat_at=now
    )
    if not claimed:
        logger.info("sampling job %s is not queued any more; nothing to do", job_id)
    return bool(claimed)


def sampling_job_progress(*, job_id: int, done: int, total: int | None = None) -> None:
    fields = {"progress_done": done} if total is None else {"progress_done": done, "progress_total": total}
    SamplingJob.objects.filter(pk=job_id).update(**fields)


def sampling_job_heartbeat(*, job_id: int) -> None:
    SamplingJob.objects.filter(pk=job_id, status=SamplingStatus.RUNNING).update(heartbeat_at=timezone.now())


def sampling_job_should_stop(*, job_id: int) -> bool:
    """Between batches: stop if a cancel was asked, or if the job is no longer running (the stale check failed it)."""
    status, cancel = SamplingJob.objects.filter(pk=job_id).values_list("status", "cancel_requested").get()
    return cancel or status != SamplingStatus.RUNNING


def sampling_job_fail(*, job_id: int, error: str) -> bool:
    return bool(SamplingJob.objects.filter(pk=job_id, status__in=_ACTIVE).update(
        status=SamplingStatus.FAILED, error=storable_text(error), finished_at=timezone.now()
    ))


def sampling_job_succeed(*, job_id: int) -> bool:
    return bool(SamplingJob.objects.filter(pk=job_id, status=SamplingStatus.RUNNING).update(
        status=SamplingStatus.SUCCEEDED, finished_at=timezone.now()
    ))


def sampling_job_stopped(*, job_id: int) -> None:
    """The worker stopped between batches on a cancel: what it wrote stays."""
    SamplingJob.objects.filter(pk=job_id, status=SamplingStatus.RUNNING).update(
        status=SamplingStatus.CANCELED, finished_at=timezone.now()
    )


def sampling_job_cancel(*, job_id: int) -> None:
    """A queued job is canceled at once; a running one stops after its current batch."""
    if SamplingJob.objects.filter(pk=job_id, status=SamplingStatus.QUEUED).update(
        status=SamplingStatus.CANCELED, cancel_requested=True, finished_at=timezone.now()
    ):
        return
    SamplingJob.objects.filter(pk=job_id, status=SamplingStatus.RUNNING).update(cancel_requested=True)


def sampling_job_resume(*, job_id: int) -> None:
    """Queue a failed or canceled job again: it fills only the prompts still short of responses, so nothing is
    sampled twice. QueueUnavailable (a ValidationError) if the broker cannot take it; the job then stays as it was
    (failed or canceled, with its error)."""
    with transaction.atomic():
        resumed = SamplingJob.objects.filter(
            pk=job_id, status__in=(SamplingStatus.FAILED, SamplingStatus.CANCELED)
        ).update(status=SamplingStatus.QUEUED, error="", cancel_requested=False, finished_at=None,
                 heartbeat_at=None, queued_at=timezone.now())
        if not resumed:
            raise ValidationError(f"sampling job {job_id} is not failed or canceled; only those can be resumed")
        publish_before_commit(SAMPLE_RESPONSES, kind=SAMPLING_MESSAGE_KIND, object_id=job_id)


def sampling_jobs_fail_stale(*, now: datetime | None = None) -> list[int]:
    """Fail every running sampling job whose worker stopped sending heartbeats (killed or lost), saying how far it
    got; the responses it stored stay, and resuming fills the rest."""
    limit = (now or timezone.now()) - timedelta(seconds=settings.PREFLAB_HEARTBEAT_TIMEOUT_S)
    failed = []
    for job in SamplingJob.objects.filter(status=SamplingStatus.RUNNING, heartbeat_at__lt=limit):
        last = job.heartbeat_at.isoformat(timespec="seconds")
        message = (f"the worker stopped sending heartbeats (last at {last}) after {job.progress_done} of "
                   f"{job.progress_total} prompts; resume the job to fill the rest")
        if sampling_job_fail(job_id=job.pk, error=message):
            failed.append(job.pk)
    return failed


def sampling_jobs_requeue_lost(*, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every sampling job queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    return requeue_lost(SAMPLE_RESPONSES, kind=SAMPLING_MESSAGE_KIND, message_ids=message_ids, now=now,
                        queued=SamplingJob.objects.filter(status=SamplingStatus.QUEUED))
