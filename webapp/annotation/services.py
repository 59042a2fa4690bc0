"""Every write of the annotation app: projects, imports, the assignment queue, rankings, pairs, sampling jobs.

The queue's promise (never past the overlap, never twice to one person, with many people asking at once)
rests on one rule: a prompt's leases and rankings change only while its row is locked. `assignment_lease_next`
locks a candidate with SELECT ... FOR UPDATE SKIP LOCKED (on SQLite, IMMEDIATE transactions serialise
writers instead) and counts again after locking; `ranking_submit` locks the same row and checks the overlap
once more, since a lease may have expired and been handed to someone else meanwhile.

A write the rules refuse raises Django's ValidationError, whose message is shown to the user as is.
"""

import logging
import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import connection, transaction
from django.db.models import Count, F, IntegerField, Max, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp.annotation.importing import IdRepeatedInFile, ImportFileError, ImportRecord, repeated_id
from webapp.annotation.models import (
    GENERATION_SETTING_BOUNDS,
    OPTIONAL_SETTINGS,
    WHOLE_NUMBER_SETTINGS,
    Assignment,
    ImportJob,
    PreferencePair,
    Project,
    Prompt,
    Ranking,
    Response,
    SamplingJob,
)
from webapp.annotation.preferences import ranking_pairs
from webapp.annotation.selectors import rankings_with_pairs, response_texts, responses_shown
from webapp.experiments.models import ModelRef
from webapp.experiments.services import model_resolve
from webapp.queueing import publish_before_commit, publish_on_commit, requeue_lost
from webapp.text import counted, storable_text
from webapp.text_bounds import GUIDELINES_MAX_CHARS, RATIONALE_MAX_CHARS, length_problem
from webapp.uploads import upload_keep

logger = logging.getLogger(__name__)

_LEASE_ATTEMPTS = 20
IMPORT_CHUNK = 500
# A batch also ends at this much text, so that a file of very long rows holds few of them in memory at once.
IMPORT_CHUNK_CHARS = 8 * 2**20


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
    owner: AbstractBaseUser | None = None,
) -> Project:
    """`owner`: who creates it (reaches it without being a member; selectors.projects_visible_to)."""
    guidelines_check(guidelines)
    project = Project.objects.create(
        name=name,
        owner=owner,
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
    if isinstance(fields.get("guidelines"), str):
        guidelines_check(fields["guidelines"])
    for name, value in fields.items():
        setattr(project, name, value)
    project.full_clean()
    project.save()
    project.members.set(members)
    return project


def guidelines_check(guidelines: str) -> None:
    """ValidationError naming the field when the guidelines are over their bound (they are on every annotate page)."""
    problem = length_problem(guidelines, GUIDELINES_MAX_CHARS)
    if problem:
        raise ValidationError({"guidelines": f"The guidelines {problem}: they are shown on every annotate page. "
                                             "Shorten them, or link to a longer document."})


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
    *, project: Project, records: Iterable[ImportRecord], progress: Callable[[int], None] | None = None
) -> ImportSummary:
    """Write records in one transaction, a batch at a time, so that memory holds one batch however many there are;
    rows whose external id the project holds already are left alone. An id repeated in `records` (which
    importing.iter_import cannot see) raises IdRepeatedInFile, and nothing is written. `progress` is called with
    the number of records of each batch written."""
    created = present = responses = pairs = 0
    with transaction.atomic():
        # One import of a project at a time: a second one (the same file from another researcher) waits, then
        # finds the rows present instead of failing on the unique external ids.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        # a prompt of the project above this id is one this import wrote: meeting its id again is a repeat
        written_after = Prompt.objects.filter(project=project).aggregate(last=Max("pk"))["last"] or 0
        for batch in _import_batches(records):
            fresh = _fresh_records(project, batch, written_after)
            added_responses, added_pairs = _import_chunk(project, fresh)
            created += len(fresh)
            present += len(batch) - len(fresh)
            responses += added_responses
            pairs += added_pairs
            if progress is not None:
                progress(len(batch))
    return ImportSummary(created, present, responses, pairs)


def _import_batches(records: Iterable[ImportRecord]) -> Iterator[list[ImportRecord]]:
    batch: list[ImportRecord] = []
    chars = 0
    for record in records:
        batch.append(record)
        chars += _record_chars(record)
        if len(batch) >= IMPORT_CHUNK or chars >= IMPORT_CHUNK_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _record_chars(record: ImportRecord) -> int:
    answers = (record.chosen, record.rejected) if record.is_pair else record.responses
    metadata = len(str(record.metadata)) if record.metadata else 0
    return len(record.text) + sum(len(text) for text in answers) + metadata


def _fresh_records(project: Project, batch: list[ImportRecord], written_after: int) -> list[ImportRecord]:
    """The batch's records whose id is new to the project; an id repeated in the batch, or one this import
    has written already, is refused."""
    first_lines: dict[str, int] = {}
    for record in batch:
        if record.external_id in first_lines:
            raise repeated_id(record, first_lines[record.external_id])
        first_lines[record.external_id] = record.line
    stored = dict(
        Prompt.objects.filter(project=project, external_id__in=first_lines).values_list("external_id", "pk")
    )
    for record in batch:
        if stored.get(record.external_id, 0) > written_after:
            raise IdRepeatedInFile(record)
    return [record for record in batch if record.external_id not in stored]


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


# Import jobs ------------------------------------------------------------------------------------------------

ImportStatus = ImportJob.Status
# The page shows the first part of a very long error (a field name holding a whole metadata key, say).
IMPORT_ERROR_MAX_CHARS = 2_000


def import_job_create(
    *, project: Project, upload: UploadedFile, file_format: str, created_by: AbstractBaseUser
) -> ImportJob:
    """Keep the upload under the data directory and queue a job to import it once committed; if the job cannot be
    stored, the kept file goes."""
    path = settings.DATA_DIR / "uploads" / "imports" / f"{uuid.uuid4().hex}.{file_format}"
    upload_keep(upload, path)
    try:
        with transaction.atomic():
            job = ImportJob.objects.create(
                project=project, file_name=storable_text(upload.name or "upload")[:255], file_format=file_format,
                upload_path=str(path), bytes_total=upload.size or 0, created_by=created_by, queued_at=timezone.now(),
            )
            job_id = job.pk
            # a job the broker cannot take is removed (its file below): QueueUnavailable says why
            publish_on_commit(_import_task(), kind=IMPORT_MESSAGE_KIND, object_id=job_id, on_failure=lambda reason:
                              ImportJob.objects.filter(pk=job_id, status=ImportStatus.QUEUED).delete())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return job


IMPORT_MESSAGE_KIND = "import"
SQLITE_WRITE_STAGE_TIMEOUT = timedelta(minutes=30)


def _import_task():
    from workers.tasks import import_prompts

    return import_prompts


def import_job_heartbeat(*, job_id: int) -> None:
    ImportJob.objects.filter(pk=job_id, status=ImportStatus.RUNNING).update(heartbeat_at=timezone.now())


def import_jobs_fail_stale(*, now: datetime | None = None) -> list[int]:
    """Fail every running import whose worker stopped sending heartbeats: nothing of it was written (an import is
    one transaction), and its kept file goes."""
    now = now or timezone.now()
    limit = now - timedelta(seconds=settings.PREFLAB_HEARTBEAT_TIMEOUT_S)
    stale = ImportJob.objects.filter(status=ImportStatus.RUNNING, heartbeat_at__lt=limit)
    if connection.vendor == "sqlite":
        # SQLite has one writer: while the import's transaction writes, its heartbeat cannot, so the write stage
        # gets a longer bound there (on Postgres the heartbeat goes on beside the transaction)
        stale = stale.exclude(stage=ImportJob.Stage.WRITING, heartbeat_at__gte=now - SQLITE_WRITE_STAGE_TIMEOUT)
    failed = []
    for job in stale:
        last = job.heartbeat_at.isoformat(timespec="seconds")
        import_job_fail(job_id=job.pk, error=f"the worker stopped sending heartbeats (last at {last}); nothing was "
                                             f"imported (an import is all or nothing): upload {job.file_name} again")
        failed.append(job.pk)
    return failed


def import_jobs_requeue_lost(*, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every import queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    return requeue_lost(_import_task(), kind=IMPORT_MESSAGE_KIND, message_ids=message_ids, now=now,
                        queued=ImportJob.objects.filter(status=ImportStatus.QUEUED))


def import_job_start(*, job_id: int) -> bool:
    """Claim a queued import job for this worker; False, and nothing written, if it is not queued any more."""
    now = timezone.now()
    claimed = ImportJob.objects.filter(pk=job_id, status=ImportStatus.QUEUED).update(
        status=ImportStatus.RUNNING, stage=ImportJob.Stage.CHECKING, started_at=now, heartbeat_at=now
    )
    if not claimed:
        logger.info("import job %s is not queued any more; nothing to do", job_id)
    return bool(claimed)


def import_job_progress(*, job_id: int, bytes_done: int, rows_checked: int) -> None:
    ImportJob.objects.filter(pk=job_id).update(bytes_done=bytes_done, rows_checked=rows_checked)


def import_job_writing(*, job_id: int, rows_checked: int) -> None:
    ImportJob.objects.filter(pk=job_id).update(
        stage=ImportJob.Stage.WRITING, rows_checked=rows_checked, bytes_done=F("bytes_total")
    )


def import_job_succeed(*, job_id: int, summary: ImportSummary) -> None:
    _import_job_end(job_id, status=ImportStatus.SUCCEEDED, created_count=summary.created,
                    already_present=summary.already_present, responses_count=summary.responses,
                    pairs_count=summary.pairs)


def import_job_fail(*, job_id: int, error: ImportFileError | str) -> None:
    """Fail the job with a refusal of the file (naming its line and field) or another reason."""
    where = {"error_line": error.line, "error_field": error.field[:200]} if isinstance(error, ImportFileError) else {}
    _import_job_end(job_id, status=ImportStatus.FAILED, error=storable_text(str(error))[:IMPORT_ERROR_MAX_CHARS],
                    **where)


def _import_job_end(job_id: int, **fields: object) -> None:
    """Record how the job ended and remove the kept upload, which nothing reads any more."""
    ImportJob.objects.filter(pk=job_id, status__in=(ImportStatus.QUEUED, ImportStatus.RUNNING)).update(
        stage="", finished_at=timezone.now(), **fields
    )
    path = ImportJob.objects.filter(pk=job_id).values_list("upload_path", flat=True).first()
    if path:
        Path(path).unlink(missing_ok=True)


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
    if "\x00" in rationale:  # pasted binary: Postgres text cannot hold it
        raise ValidationError("rationale: holds a NUL character (\\u0000), which cannot be stored; remove it and submit again")
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
    """The ranking's pairs under the "all" strategy, as `preferences.ranking_pairs` decides them."""
    texts = response_texts(prompt_id=ranking.prompt_id)
    PreferencePair.objects.bulk_create(
        PreferencePair(
            project=project, prompt_id=ranking.prompt_id, ranking=ranking, chosen_id=pair.chosen,
            rejected_id=pair.rejected, weight=pair.weight, margin=pair.margin,
        )
        for pair in ranking_pairs(ranking.tiers, texts)
    )


@transaction.atomic
def preference_pairs_rebuild(*, project: Project) -> int:
    """Derive the pairs of every ranking again (imported pairs are kept); returns how many pairs exist."""
    PreferencePair.objects.filter(project=project, ranking__isnull=False).delete()
    for ranking in rankings_with_pairs(project_id=project.pk).iterator():
        _store_pairs(ranking, project)
    return PreferencePair.objects.filter(project=project).count()


# Sampling ---------------------------------------------------------------------------------------------------


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
    from workers.tasks import sample_responses as sample_responses_task

    publish_on_commit(sample_responses_task, kind=SAMPLING_MESSAGE_KIND, object_id=job_id, on_failure=on_failure)


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
    from workers.tasks import sample_responses as sample_responses_task

    with transaction.atomic():
        resumed = SamplingJob.objects.filter(
            pk=job_id, status__in=(SamplingStatus.FAILED, SamplingStatus.CANCELED)
        ).update(status=SamplingStatus.QUEUED, error="", cancel_requested=False, finished_at=None,
                 heartbeat_at=None, queued_at=timezone.now())
        if not resumed:
            raise ValidationError(f"sampling job {job_id} is not failed or canceled; only those can be resumed")
        publish_before_commit(sample_responses_task, kind=SAMPLING_MESSAGE_KIND, object_id=job_id)


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
    from workers.tasks import sample_responses as sample_responses_task

    return requeue_lost(sample_responses_task, kind=SAMPLING_MESSAGE_KIND, message_ids=message_ids, now=now,
                        queued=SamplingJob.objects.filter(status=SamplingStatus.QUEUED))
