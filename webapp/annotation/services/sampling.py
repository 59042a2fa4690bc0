"""Sampling jobs: responses sampled from a model for a project's prompts."""

import math
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp import job_lifecycle as lifecycle
from webapp.annotation.models import (
    GENERATION_SETTING_BOUNDS,
    OPTIONAL_SETTINGS,
    WHOLE_NUMBER_SETTINGS,
    Project,
    Prompt,
    Round,
    SamplingJob,
)
from webapp.annotation.services.rounds import PREVIOUS, round_create
from webapp.celery_app import SAMPLE_RESPONSES
from webapp.experiments.models import ModelRef
from webapp.experiments.services import model_resolve
from webapp.queueing import publish_before_commit, publish_on_commit
from webapp.text import storable_text


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


def sampling_job_create(
    *, project: Project, model_path: str, generation_settings: dict, created_by: AbstractBaseUser,
    compare_with: Round | None | str = PREVIOUS,
) -> SamplingJob:
    """Store the job, a new round of the project (services/rounds.py: compared with its previous round unless
    `compare_with` says otherwise), and queue it once committed; a job the broker cannot take is removed with its
    round and QueueUnavailable (a ValidationError) says why. Settings out of their bounds are a ValidationError
    naming the setting."""
    generation_settings_check(generation_settings)
    path = model_path_check(model_path, user=created_by)
    if not Prompt.objects.filter(project=project, annotatable=True, origin__isnull=True).exists():
        raise ValidationError({"__all__": ["the project has no prompts to sample responses for: import prompts first"]})
    with transaction.atomic():
        round_ = round_create(project=project, source=Round.Source.SAMPLED, model=model_path,
                              responses_per_prompt=int(generation_settings["responses_per_prompt"]),
                              compared_with=compare_with)
        job = SamplingJob.objects.create(project=project, model_path=path, generation_settings=generation_settings,
                                         created_by=created_by, queued_at=timezone.now(), round=round_)
        job_id, round_id = job.pk, round_.pk
        _sampling_job_publish(job_id, on_failure=lambda reason: _sampling_job_remove(job_id, round_id))
    return job


def _sampling_job_remove(job_id: int, round_id: int) -> None:
    if SamplingJob.objects.filter(pk=job_id, status=SamplingStatus.QUEUED).delete()[0]:
        Round.objects.filter(pk=round_id).delete()


def _sampling_job_publish(job_id: int, *, on_failure: Callable[[str], None]) -> None:
    publish_on_commit(SAMPLE_RESPONSES, kind=SAMPLING_MESSAGE_KIND, object_id=job_id, on_failure=on_failure)


def sampling_job_start(*, job_id: int) -> bool:
    """Claim a queued sampling job for this worker; False, and nothing written, if it is not queued any more (a
    canceled job, or a second message for it)."""
    return lifecycle.job_claim(SAMPLING_JOB, job_id)


def sampling_job_progress(*, job_id: int, done: int, total: int | None = None) -> None:
    fields = {"progress_done": done} if total is None else {"progress_done": done, "progress_total": total}
    lifecycle.job_progress(SAMPLING_JOB, job_id, **fields)


def sampling_job_heartbeat(*, job_id: int) -> None:
    lifecycle.job_heartbeat(SAMPLING_JOB, job_id)


def sampling_job_should_stop(*, job_id: int) -> bool:
    """Between batches: stop if a cancel was asked, or if the job is no longer running (the stale check failed it)."""
    return lifecycle.job_should_stop(SAMPLING_JOB, job_id)


def sampling_job_fail(*, job_id: int, error: str) -> bool:
    return lifecycle.job_fail(SAMPLING_JOB, job_id, error)


def sampling_job_succeed(*, job_id: int) -> bool:
    return lifecycle.job_succeed(SAMPLING_JOB, job_id)


def sampling_job_stopped(*, job_id: int) -> None:
    """The worker stopped between batches on a cancel: what it wrote stays."""
    lifecycle.job_stopped(SAMPLING_JOB, job_id)


def sampling_job_cancel(*, job_id: int) -> None:
    """A queued job is canceled at once; a running one stops after its current batch."""
    lifecycle.job_cancel(SAMPLING_JOB, job_id)


def sampling_job_resume(*, job_id: int) -> None:
    """Queue a failed or canceled job again: it samples only the prompts its round has not reached, so nothing is
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
    return lifecycle.jobs_fail_stale(SAMPLING_JOB, now=now)


def _stale_reason(job: SamplingJob) -> str:
    last = lifecycle.last_heartbeat(job)
    return (f"the worker stopped sending heartbeats (last at {last}) after {job.progress_done} of "
            f"{job.progress_total} prompts; resume the job to fill the rest")


def sampling_jobs_requeue_lost(*, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every sampling job queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    return lifecycle.jobs_requeue_lost(SAMPLING_JOB, message_ids=message_ids, now=now)


SAMPLING_JOB = lifecycle.JobKind(
    model=SamplingJob, noun="sampling job", message_kind=SAMPLING_MESSAGE_KIND, task_name=SAMPLE_RESPONSES,
    failed_fields=lambda reason: {"error": storable_text(reason)}, stale_reason=_stale_reason,
)
