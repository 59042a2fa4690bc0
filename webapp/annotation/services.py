"""Every write of the annotation app: projects, imports, the assignment queue, rankings, pairs, sampling jobs.

The queue's promise (never past the overlap, never twice to one person, with many people asking at once)
rests on one rule: a prompt's leases and rankings change only while its row is locked. `assignment_lease_next`
locks a candidate with SELECT ... FOR UPDATE SKIP LOCKED (on SQLite, IMMEDIATE transactions serialise
writers instead) and counts again after locking; `ranking_submit` locks the same row and checks the overlap
once more, since a lease may have expired and been handed to someone else meanwhile.

A write the rules refuse raises Django's ValidationError, whose message is shown to the user as is.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, F, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import (
    Assignment,
    PreferencePair,
    Project,
    Prompt,
    Ranking,
    Response,
    SamplingJob,
)
from webapp.annotation.preferences import pairs_from_tiers, tiers_without
from webapp.annotation.selectors import blank_response_ids, responses_shown
from webapp.experiments.models import ModelRef
from webapp.experiments.services import model_resolve
from webapp.text import counted, storable_text

logger = logging.getLogger(__name__)

# A rationale is a note on one ranking: 10,000 characters is pages of text; the cap keeps a pasted file out of the
# database.
RATIONALE_MAX_CHARS = 10_000

_LEASE_ATTEMPTS = 20
IMPORT_CHUNK = 500


# Projects ---------------------------------------------------------------------------------------------------


@transaction.atomic
def project_create(
    *,
    name: str,
    mode: str = Project.Mode.RANKING,
    guidelines: str = "",
    responses_per_item: int = 4,
    annotators_per_item: int = 1,
    lease_minutes: int = 30,
    members: Sequence[AbstractBaseUser] = (),
) -> Project:
    project = Project.objects.create(
        name=name,
        mode=mode,
        guidelines=guidelines,
        responses_per_item=responses_per_item,
        annotators_per_item=annotators_per_item,
        lease_minutes=lease_minutes,
    )
    project.members.set(members)
    return project


@transaction.atomic
def project_update(*, project: Project, members: Sequence[AbstractBaseUser], **fields: object) -> Project:
    for name, value in fields.items():
        setattr(project, name, value)
    project.full_clean()
    project.save()
    project.members.set(members)
    return project


# Import -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportSummary:
    created: int
    already_present: int
    responses: int
    pairs: int

    @property
    def contents(self) -> str:
        """'6 responses, 1 preference pair': what the new prompts brought, nouns agreeing with their numbers."""
        return f"{counted(self.responses, 'response')}, {counted(self.pairs, 'preference pair')}"


def prompts_import(
    *, project: Project, records: Sequence[ImportRecord], progress: Callable[[int], None] | None = None
) -> ImportSummary:
    """Write parsed records in one transaction; rows whose external id exists already are left alone."""
    with transaction.atomic():
        # One import of a project at a time: a second one (the same file from another researcher) waits, then
        # finds the rows present instead of failing on the unique external ids.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        existing = set(
            Prompt.objects.filter(project=project, external_id__in=[r.external_id for r in records]).values_list(
                "external_id", flat=True
            )
        )
        fresh = [record for record in records if record.external_id not in existing]
        responses = pairs = 0
        for start in range(0, len(fresh), IMPORT_CHUNK):
            chunk = fresh[start : start + IMPORT_CHUNK]
            added_responses, added_pairs = _import_chunk(project, chunk)
            responses += added_responses
            pairs += added_pairs
            if progress is not None:
                progress(len(chunk))
        if progress is not None and len(fresh) < len(records):
            progress(len(records) - len(fresh))
    return ImportSummary(len(fresh), len(records) - len(fresh), responses, pairs)


def _import_chunk(project: Project, records: Sequence[ImportRecord]) -> tuple[int, int]:
    prompts = Prompt.objects.bulk_create(
        [
            Prompt(
                project=project,
                external_id=record.external_id,
                text=record.text,
                messages=record.messages,
                reference_answer=record.reference_answer or "",
                metadata=record.metadata,
                annotatable=not record.is_pair,
                response_count=2 if record.is_pair else len(record.responses),
            )
            for record in records
        ]
    )
    responses: list[Response] = []
    for prompt, record in zip(prompts, records, strict=True):
        texts = (record.chosen, record.rejected) if record.is_pair else record.responses
        responses += [Response(prompt=prompt, text=text, source=Response.Source.IMPORTED) for text in texts]
    responses = Response.objects.bulk_create(responses)
    by_prompt: dict[int, list[Response]] = {}
    for response in responses:
        by_prompt.setdefault(response.prompt_id, []).append(response)
    pairs = [
        PreferencePair(
            project=project, prompt=prompt, chosen=by_prompt[prompt.pk][0], rejected=by_prompt[prompt.pk][1],
            weight=1.0, margin=1.0,
        )
        for prompt, record in zip(prompts, records, strict=True)
        if record.is_pair
    ]
    PreferencePair.objects.bulk_create(pairs)
    return len(responses), len(pairs)


def responses_add(*, prompt_id: int, texts: Sequence[str], source: str, source_detail: dict) -> list[Response]:
    with transaction.atomic():
        prompt = Prompt.objects.select_for_update().get(pk=prompt_id)
        created = Response.objects.bulk_create(
            [Response(prompt=prompt, text=storable_text(text), source=source, source_detail=source_detail)
             for text in texts]
        )
        Prompt.objects.filter(pk=prompt.pk).update(response_count=F("response_count") + len(created))
    return created


# The queue --------------------------------------------------------------------------------------------------


def _active_leases(now, *, excluding: AbstractBaseUser | None = None) -> Subquery:
    leases = Assignment.objects.filter(prompt=OuterRef("pk"), status=Assignment.Status.LEASED, expires_at__gt=now)
    if excluding is not None:
        leases = leases.exclude(annotator=excluding)
    return Subquery(leases.values("prompt").annotate(count=Count("pk")).values("count"), output_field=IntegerField())


def _others_holding(prompt: Prompt, annotator: AbstractBaseUser, now) -> int:
    return (
        Assignment.objects.filter(prompt=prompt, status=Assignment.Status.LEASED, expires_at__gt=now)
        .exclude(annotator=annotator)
        .count()
    )


def assignment_lease_next(*, project: Project, annotator: AbstractBaseUser) -> Assignment | None:
    """The annotator's current lease in `project`, else a new lease on the least-annotated open item."""
    now = timezone.now()
    overlap = project.annotators_per_item
    with transaction.atomic():
        current = (
            Assignment.objects.filter(
                prompt__project=project, annotator=annotator, status=Assignment.Status.LEASED, expires_at__gt=now
            )
            .select_related("prompt")
            .order_by("leased_at")
            .first()
        )
        if current is not None:
            return current
        finished = Assignment.objects.filter(annotator=annotator, prompt__project=project).exclude(
            status=Assignment.Status.LEASED
        )
        refused: list[int] = []
        for _ in range(_LEASE_ATTEMPTS):
            prompt = (
                Prompt.objects.filter(
                    project=project, annotatable=True, response_count__gte=2, ranking_count__lt=overlap
                )
                .exclude(pk__in=finished.values("prompt_id"))
                .exclude(pk__in=refused)
                .annotate(load=F("ranking_count") + Coalesce(_active_leases(now, excluding=annotator), Value(0)))
                .filter(load__lt=overlap)
                .order_by("load", "id")
                .select_for_update(skip_locked=True, of=("self",))
                .first()
            )
            if prompt is None:
                return None
            # Counted again under the lock: the candidate query's snapshot may predate a lease just committed.
            prompt.refresh_from_db(fields=["ranking_count"])
            if prompt.ranking_count + _others_holding(prompt, annotator, now) >= overlap:
                refused.append(prompt.pk)
                continue
            assignment, _ = Assignment.objects.update_or_create(
                prompt=prompt,
                annotator=annotator,
                defaults={
                    "status": Assignment.Status.LEASED,
                    "leased_at": now,
                    "expires_at": now + timedelta(minutes=project.lease_minutes),
                },
            )
            return assignment
    return None


def _locked_assignment(assignment_id: int, annotator: AbstractBaseUser) -> tuple[Assignment, Prompt]:
    try:
        assignment = Assignment.objects.select_related("prompt__project").get(pk=assignment_id, annotator=annotator)
    except Assignment.DoesNotExist:
        raise ValidationError(f"assignment {assignment_id} is not yours or does not exist") from None
    prompt = Prompt.objects.select_for_update().select_related("project").get(pk=assignment.prompt_id)
    return assignment, prompt


def _validated_tiers(tiers: Sequence[Sequence[int]], shown: set[int]) -> list[list[int]]:
    cleaned = [[int(response) for response in tier] for tier in tiers if tier]
    flat = [response for tier in cleaned for response in tier]
    if len(flat) != len(set(flat)):
        raise ValidationError("a response appears twice in the ranking")
    if set(flat) != shown:
        missing = len(shown - set(flat))
        raise ValidationError(
            f"rank every response: {missing} not ranked" if missing else "the ranking names responses not shown"
        )
    return cleaned


def ranking_submit(
    *,
    assignment_id: int,
    annotator: AbstractBaseUser,
    tiers: Sequence[Sequence[int]],
    all_bad: bool = False,
    rationale: str = "",
    seconds_spent: float = 0.0,
) -> Ranking:
    """Record a ranking (tiers of response ids, best first). Submitting again returns the first ranking."""
    if len(rationale) > RATIONALE_MAX_CHARS:
        raise ValidationError(
            f"rationale: {len(rationale):,} characters; at most {RATIONALE_MAX_CHARS:,} are kept. Shorten it and submit again."
        )
    with transaction.atomic():
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        existing = Ranking.objects.filter(prompt=prompt, annotator=annotator).first()
        if existing is not None:
            return existing
        project = prompt.project
        shown = {response.pk for response in responses_shown(prompt=prompt, annotator=annotator)}
        # All bad: whatever ranks were filled in are ignored, every shown response is one tier and gives no pair.
        cleaned = [sorted(shown)] if all_bad else _validated_tiers(tiers, shown)
        now = timezone.now()
        if prompt.ranking_count + _others_holding(prompt, annotator, now) >= project.annotators_per_item:
            raise ValidationError(
                "your lease expired and this item has all the rankings it needs; skip it (S) to take the next one"
            )
        lease_seconds = (now - assignment.leased_at).total_seconds()
        ranking = Ranking.objects.create(
            assignment=assignment,
            prompt=prompt,
            annotator=annotator,
            tiers=cleaned,
            all_bad=all_bad,
            rationale=rationale.strip(),
            seconds_spent=max(0.0, min(float(seconds_spent), lease_seconds)),
        )
        Prompt.objects.filter(pk=prompt.pk).update(ranking_count=F("ranking_count") + 1)
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SUBMITTED)
        if not all_bad:
            _store_pairs(ranking, project)
    return ranking


def ranking_skip(*, assignment_id: int, annotator: AbstractBaseUser) -> Ranking:
    """Give the item back for others; it is not offered to this annotator again."""
    with transaction.atomic():
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        existing = Ranking.objects.filter(prompt=prompt, annotator=annotator).first()
        if existing is not None:
            return existing
        ranking = Ranking.objects.create(assignment=assignment, prompt=prompt, annotator=annotator, skipped=True)
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SKIPPED)
    return ranking


def ranking_withdraw(*, ranking_id: int, annotator: AbstractBaseUser) -> Ranking:
    """Take back one's own answer (a ranking or a skip) to change it: the item is leased to its annotator again.

    Allowed within the project's lease time after answering, so a reopened item is held no longer than a lease.
    Returns the withdrawn ranking, no longer stored, so that its answer can be shown again.
    """
    with transaction.atomic():
        assignment_id = Ranking.objects.filter(pk=ranking_id, annotator=annotator).values_list(
            "assignment_id", flat=True
        ).first()
        if assignment_id is None:
            raise ValidationError(f"answer {ranking_id} is not yours or was already taken back")
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        # Read again under the prompt's lock: a second Back sent meanwhile may have withdrawn it already.
        ranking = Ranking.objects.filter(pk=ranking_id).first()
        if ranking is None:
            raise ValidationError(f"answer {ranking_id} was already taken back")
        project = prompt.project
        now = timezone.now()
        window = timedelta(minutes=project.lease_minutes)
        if now - ranking.created_at > window:
            age = int((now - ranking.created_at).total_seconds() // 60)
            raise ValidationError(
                f"an answer can be changed only within {counted(project.lease_minutes, 'minute')} (the project's "
                f"lease time); yours to {prompt.external_id!r} was given {counted(age, 'minute')} ago"
            )
        # A skip held no place in the overlap, so the item may have gone to someone else since.
        rankings_left = prompt.ranking_count - (0 if ranking.skipped else 1)
        if rankings_left + _others_holding(prompt, annotator, now) >= project.annotators_per_item:
            raise ValidationError(
                f"{prompt.external_id!r} has been given to someone else since you skipped it; it cannot be reopened"
            )
        ranking.delete()  # its preference pairs go with it (on_delete=CASCADE)
        if not ranking.skipped:
            Prompt.objects.filter(pk=prompt.pk).update(ranking_count=F("ranking_count") - 1)
        # leased_at stays: the queue shows a person's oldest lease first, so the reopened item comes before
        # the one they were on when they went back.
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.LEASED, expires_at=now + window)
    return ranking


def _store_pairs(ranking: Ranking, project: Project) -> None:
    """The ranking's pairs, leaving out every empty response (a model can sample one): it carries no preference."""
    blank = blank_response_ids(prompt_id=ranking.prompt_id)
    PreferencePair.objects.bulk_create(
        PreferencePair(
            project=project, prompt_id=ranking.prompt_id, ranking=ranking, chosen_id=pair.chosen,
            rejected_id=pair.rejected, weight=pair.weight, margin=pair.margin,
        )
        for pair in pairs_from_tiers(tiers_without(ranking.tiers, blank))
    )


@transaction.atomic
def preference_pairs_rebuild(*, project: Project) -> int:
    """Derive the pairs of every ranking again (imported pairs are kept); returns how many pairs exist."""
    PreferencePair.objects.filter(project=project, ranking__isnull=False).delete()
    for ranking in Ranking.objects.filter(prompt__project=project, skipped=False, all_bad=False).iterator():
        _store_pairs(ranking, project)
    return PreferencePair.objects.filter(project=project).count()


# Sampling ---------------------------------------------------------------------------------------------------


def model_path_check(path: str) -> str:
    """The path to sample from: a causal LM named as the experiments' one resolver accepts (a registered model
    or checkpoint by name or path, a directory under the model roots, a hub id)."""
    try:
        resolved = model_resolve(path)
    except ValidationError as error:
        raise ValidationError(f"model: {' '.join(error.messages)}") from None
    if resolved.architecture == ModelRef.Architecture.CLASSIFIER:
        raise ValidationError(f"model: {path.strip()!r} is a sequence classifier (a reward model); "
                              "sampling needs a causal LM")
    return resolved.path


def sampling_job_create(
    *, project: Project, model_path: str, generation_settings: dict, created_by: AbstractBaseUser
) -> SamplingJob:
    job = SamplingJob.objects.create(
        project=project,
        model_path=model_path_check(model_path),
        generation_settings=generation_settings,
        created_by=created_by,
    )
    from workers.tasks import sample_responses as sample_responses_task

    transaction.on_commit(lambda: sample_responses_task.delay(job.pk))
    return job


def sampling_job_start(*, job_id: int) -> bool:
    """Claim a queued sampling job for this worker; False, and nothing written, if it is not queued any more."""
    claimed = SamplingJob.objects.filter(pk=job_id, status=SamplingJob.Status.QUEUED).update(
        status=SamplingJob.Status.RUNNING
    )
    if not claimed:
        logger.info("sampling job %s is not queued any more; nothing to do", job_id)
    return bool(claimed)


def sampling_job_progress(*, job_id: int, done: int, total: int | None = None) -> None:
    fields = {"progress_done": done} if total is None else {"progress_done": done, "progress_total": total}
    SamplingJob.objects.filter(pk=job_id).update(**fields)


def sampling_job_fail(*, job_id: int, error: str) -> None:
    SamplingJob.objects.filter(pk=job_id).update(
        status=SamplingJob.Status.FAILED, error=storable_text(error), finished_at=timezone.now()
    )


def sampling_job_succeed(*, job_id: int) -> None:
    SamplingJob.objects.filter(pk=job_id).update(status=SamplingJob.Status.SUCCEEDED, finished_at=timezone.now())
