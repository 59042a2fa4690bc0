"""Suggestion jobs: machine suggestions for a round's items (or every annotatable item of a project), computed on a
GPU worker (workers/suggesting.py) from a reward-model run's scores or a judge model's verdicts, stored as
Suggestion rows with their job, agent and confidence (trainer/suggestions.py says how each is computed).

An item holds one computed suggestion per question and agent: storing a newer job's suggestion for it removes the
older one of the same agent. A job resumed after a failure (a worker restarted) or a cancel skips the items it
stored suggestions for already."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from webapp import job_lifecycle as lifecycle
from webapp.annotation.models import Project, Prompt, Ranking, ResponseLabel, Round, Suggestion, SuggestionJob
from webapp.annotation.services.sampling import model_path_check
from webapp.annotation.services.scoring import reward_run_check, round_items
from webapp.celery_app import SUGGEST_ANSWERS
from webapp.experiments.models import Run
from webapp.queueing import publish_before_commit, publish_on_commit
from webapp.text import storable_text

SUGGESTING_MESSAGE_KIND = "suggesting"
RANKING_QUESTION = "ranking"
THUMB_QUESTION = "thumb"
LABEL_MODES = ("thumbs", "ratings")
Source = SuggestionJob.Source
Status = SuggestionJob.Status


@dataclass(frozen=True)
class ComputedSuggestion:
    """One suggestion as a job computed it, in the shapes Suggestion's docstring gives."""

    prompt_id: int
    question: str
    value: Any
    confidence: float
    response_id: int | None = None


def suggestion_questions(project: Project) -> list[str]:
    """What a suggestion answers in the project's mode: the ranking, a thumb, or each rated aspect."""
    if project.mode == "thumbs":
        return [THUMB_QUESTION]
    if project.mode == "ratings":
        return [aspect["name"] for aspect in project.aspects]
    return [RANKING_QUESTION]


def suggestion_items(project: Project, round_: Round | None) -> QuerySet:
    """The items a job suggests for: the round's items, or every annotatable item of the project; a ranking needs
    two responses or more, a label one."""
    items = round_items(round_) if round_ is not None else Prompt.objects.filter(project=project)
    least = 1 if project.mode in LABEL_MODES else 2
    return items.filter(annotatable=True, response_count__gte=least).order_by("id")


def _refusal(field: str, message: str) -> ValidationError:
    return ValidationError({field: message})


def _judge_agent(model: str) -> str:
    name = model.strip().rstrip("/")
    return f"judge {Path(name).name or name}"[:200]


def suggestion_job_create(
    *, project: Project, round_: Round | None, source: str, created_by: AbstractBaseUser,
    reward_run: Run | None = None, judge_model: str = "",
) -> SuggestionJob:
    """Store a suggestion job for `round_` (None: the whole project) by a reward-model run or a judge model, and
    queue it on the gpu queue once committed; a refusal is a ValidationError naming the field at fault."""
    if source not in Source.values:
        raise _refusal("source", f"choose {' or '.join(Source.values)}, got {source!r}")
    if round_ is not None and round_.project_id != project.pk:
        raise _refusal("round", f"round {round_.number} is not a round of project {project.name!r}")
    if source == Source.REWARD_MODEL:
        model_path, agent = reward_run_check(reward_run), f"reward model run #{reward_run.pk}"
    else:
        if project.mode == "ratings":
            raise _refusal("source", "a judge suggests rankings and thumbs, not ratings; choose a reward-model run")
        if not judge_model.strip():
            raise _refusal("judge_model", "give the judge model: a registered model, a model directory or a hub id")
        try:
            model_path = model_path_check(judge_model, user=created_by)
        except ValidationError as error:
            raise _refusal("judge_model", " ".join(error.messages).removeprefix("model: ")) from None
        agent, reward_run = _judge_agent(judge_model), None
    scope = f"round {round_.number}" if round_ is not None else "the project"
    if not suggestion_items(project, round_).exists():
        raise _refusal("round", f"{scope} has no items to suggest answers for")
    with transaction.atomic():
        # the project's row locked: two requests at once cannot both queue a job for the same items
        Project.objects.select_for_update().filter(pk=project.pk).first()
        if SuggestionJob.objects.filter(project=project, round=round_, status__in=SUGGESTION_JOB.active).exists():
            raise _refusal("round", f"a suggestion job for {scope} is queued or running; wait for it or cancel it")
        job = SuggestionJob.objects.create(project=project, round=round_, source=source, reward_run=reward_run,
                                           model_path=model_path, agent=agent, created_by=created_by,
                                           queued_at=timezone.now())
        job_id = job.pk
        publish_on_commit(SUGGEST_ANSWERS, kind=SUGGESTING_MESSAGE_KIND, object_id=job_id,
                          on_failure=lambda reason: SuggestionJob.objects.filter(
                              pk=job_id, status=Status.QUEUED).delete())
    return job


def suggestion_job_start(*, job_id: int) -> bool:
    return lifecycle.job_claim(SUGGESTION_JOB, job_id)


def suggestion_job_heartbeat(*, job_id: int) -> None:
    lifecycle.job_heartbeat(SUGGESTION_JOB, job_id)


def suggestion_job_progress(*, job_id: int, done: int, total: int | None = None) -> None:
    fields = {"progress_done": done} if total is None else {"progress_done": done, "progress_total": total}
    lifecycle.job_progress(SUGGESTION_JOB, job_id, **fields)


def suggestion_job_should_stop(*, job_id: int) -> bool:
    """Between batches: stop if a cancel was asked, or if the job is no longer running (the stale check failed it)."""
    return lifecycle.job_should_stop(SUGGESTION_JOB, job_id)


def _accepted_suggestions(prompt_ids: set[int]) -> set[int]:
    """The suggestions of these items that an answer (its ranking or a label) took."""
    return {*Ranking.objects.filter(suggestion__prompt_id__in=prompt_ids).values_list("suggestion_id", flat=True),
            *ResponseLabel.objects.filter(suggestion__prompt_id__in=prompt_ids).values_list("suggestion_id", flat=True)}


def suggestions_store(*, job_id: int, suggestions: Sequence[ComputedSuggestion], comparisons: int = 0,
                      order_decided: int = 0) -> None:
    """Store one batch's suggestions and the judge comparisons they took, at once: a job resumed later finds either
    both or neither. The older computed suggestions of the same agent for these items and questions go, except one
    an answer accepted: it stays as that answer's record of what it took (the newest one is the one shown)."""
    job = SuggestionJob.objects.get(pk=job_id)
    accepted = _accepted_suggestions({item.prompt_id for item in suggestions})
    with transaction.atomic():
        for item in suggestions:
            Suggestion.objects.filter(prompt_id=item.prompt_id, response_id=item.response_id, question=item.question,
                                      agent=job.agent, job__isnull=False).exclude(job_id=job_id).exclude(
                pk__in=accepted).delete()
        Suggestion.objects.bulk_create([
            Suggestion(project_id=job.project_id, prompt_id=item.prompt_id, response_id=item.response_id,
                       question=item.question, value=item.value, score=float(item.confidence), agent=job.agent,
                       job_id=job_id)
            for item in suggestions
        ])
        if comparisons:
            SuggestionJob.objects.filter(pk=job_id).update(
                judge_comparisons=F("judge_comparisons") + comparisons,
                judge_order_decided=F("judge_order_decided") + order_decided)


def suggestion_job_succeed(*, job_id: int) -> bool:
    return lifecycle.job_succeed(SUGGESTION_JOB, job_id)


def suggestion_job_stopped(*, job_id: int) -> bool:
    """The worker stopped between batches on a cancel: the suggestions it stored stay."""
    return lifecycle.job_stopped(SUGGESTION_JOB, job_id)


def suggestion_job_fail(*, job_id: int, error: str) -> bool:
    return lifecycle.job_fail(SUGGESTION_JOB, job_id, error)


def suggestion_job_cancel(*, job_id: int) -> None:
    """A queued job is canceled at once; a running one stops after its current batch."""
    lifecycle.job_cancel(SUGGESTION_JOB, job_id)


def suggestion_job_resume(*, job_id: int) -> None:
    """Queue a failed or canceled job again: it computes only the items it has no suggestions for yet.
    QueueUnavailable (a ValidationError) if the broker cannot take it; the job then stays as it was."""
    with transaction.atomic():
        resumed = SuggestionJob.objects.filter(pk=job_id, status__in=(Status.FAILED, Status.CANCELED)).update(
            status=Status.QUEUED, error="", cancel_requested=False, finished_at=None, heartbeat_at=None,
            queued_at=timezone.now())
        if not resumed:
            raise ValidationError(f"suggestion job {job_id} is not failed or canceled; only those can be resumed")
        publish_before_commit(SUGGEST_ANSWERS, kind=SUGGESTING_MESSAGE_KIND, object_id=job_id)


def suggestion_jobs_fail_stale(*, now: datetime | None = None) -> list[int]:
    """Fail every running suggestion job whose worker stopped sending heartbeats (killed or lost)."""
    return lifecycle.jobs_fail_stale(SUGGESTION_JOB, now=now)


def suggestion_jobs_requeue_lost(*, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every suggestion job queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    return lifecycle.jobs_requeue_lost(SUGGESTION_JOB, message_ids=message_ids, now=now)


def _stale_reason(job: SuggestionJob) -> str:
    return (f"the worker stopped sending heartbeats (last at {lifecycle.last_heartbeat(job)}) after "
            f"{job.progress_done} of {job.progress_total} items; resume the job to suggest for the rest")


SUGGESTION_JOB = lifecycle.JobKind(
    model=SuggestionJob, noun="suggestion job", message_kind=SUGGESTING_MESSAGE_KIND, task_name=SUGGEST_ANSWERS,
    failed_fields=lambda reason: {"error": storable_text(reason)}, stale_reason=_stale_reason,
)
