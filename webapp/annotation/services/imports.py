"""Imports of prompts (with their responses or preference pairs), the import jobs that run them, and responses
added from outside."""

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.db import connection, transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from webapp import job_lifecycle as lifecycle
from webapp.annotation.importing import (
    IdRepeatedInFile,
    ImportFileError,
    ImportRecord,
    joined_records,
    repeated_id,
)
from webapp.annotation.models import (
    ImportJob,
    PreferencePair,
    Project,
    Prompt,
    Response,
    ResponseLabel,
    Suggestion,
)
from webapp.celery_app import IMPORT_PROMPTS
from webapp.queueing import publish_on_commit
from webapp.text import counted, storable_text
from webapp.uploads import upload_keep

IMPORT_CHUNK = 500
# A batch also ends at this much text, so that a file of very long rows holds few of them in memory at once.
IMPORT_CHUNK_CHARS = 8 * 2**20
# Import -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportSummary:
    created: int
    already_present: int
    responses: int
    pairs: int
    labels: int = 0
    suggestions: int = 0

    @property
    def contents(self) -> str:
        """'6 responses, 1 preference pair': what the new prompts brought, nouns agreeing with their numbers
        (labels and suggestions named when there are some)."""
        parts = [counted(self.responses, 'response'), counted(self.pairs, 'preference pair')]
        parts += [counted(count, noun) for count, noun in ((self.labels, "label"), (self.suggestions, "suggestion"))
                  if count]
        return ", ".join(parts)


def prompts_import(
    *, project: Project, records: Iterable[ImportRecord], progress: Callable[[int], None] | None = None
) -> ImportSummary:
    """Write records in one transaction, a batch at a time, so that memory holds one batch however many there are;
    rows whose external id the project holds already are left alone. An id repeated in `records` (which
    importing.iter_import cannot see) raises IdRepeatedInFile, and nothing is written, except for TRL's unpaired
    rows: those sharing an id (their prompt's, by default) join one item, however far apart they are in the file.
    `progress` is called with the number of records of each batch written."""
    created = present = responses = pairs = labels = suggestions = 0
    with transaction.atomic():
        # One import of a project at a time: a second one (the same file from another researcher) waits, then
        # finds the rows present instead of failing on the unique external ids.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        # a prompt of the project above this id is one this import wrote: meeting its id again is a repeat
        written_after = Prompt.objects.filter(project=project).aggregate(last=Max("pk"))["last"] or 0
        for batch in _import_batches(records):
            fresh, joining, already = _fresh_records(project, batch, written_after)
            added = _import_chunk(project, fresh) + _join_chunk(project, joining)
            created += len(fresh)
            present += already
            responses += added.responses
            pairs += added.pairs
            labels += added.labels
            suggestions += added.suggestions
            if progress is not None:
                progress(len(batch))
    return ImportSummary(created, present, responses, pairs, labels, suggestions)


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
    answers = record.answers
    metadata = len(str(record.metadata)) if record.metadata else 0
    return len(record.text) + sum(len(text) for text in answers) + metadata


def _fresh_records(
    project: Project, batch: list[ImportRecord], written_after: int
) -> tuple[list[ImportRecord], list[ImportRecord], int]:
    """The batch's records whose id is new to the project, those that join an item this import wrote (unpaired
    rows of one prompt), and how many rows the project held already. An id repeated otherwise, in the batch or
    after this import wrote it, is refused."""
    merged: dict[str, ImportRecord] = {}
    for record in batch:
        earlier = merged.get(record.external_id)
        if earlier is None:
            merged[record.external_id] = record
        elif earlier.joins_by_prompt and record.joins_by_prompt:
            merged[record.external_id] = joined_records(earlier, record)
        else:
            raise repeated_id(record, earlier.line)
    stored = dict(
        Prompt.objects.filter(project=project, external_id__in=merged).values_list("external_id", "pk")
    )
    fresh, joining = [], []
    for record in merged.values():
        pk = stored.get(record.external_id)
        if pk is None:
            fresh.append(record)
        elif pk > written_after:
            if not record.joins_by_prompt:
                raise IdRepeatedInFile(record)
            joining.append(record)
    already = sum(1 for record in batch if stored.get(record.external_id, written_after + 1) <= written_after)
    return fresh, joining, already


@dataclass(frozen=True)
class _Added:
    responses: int = 0
    pairs: int = 0
    labels: int = 0
    suggestions: int = 0

    def __add__(self, other: "_Added") -> "_Added":
        return _Added(self.responses + other.responses, self.pairs + other.pairs, self.labels + other.labels,
                      self.suggestions + other.suggestions)


def _import_chunk(project: Project, records: Sequence[ImportRecord]) -> _Added:
    prompts = Prompt.objects.bulk_create(
        [
            Prompt(
                project=project,
                external_id=record.external_id,
                text=record.text,
                messages=record.messages,
                reference_answer=record.reference_answer or "",
                metadata=record.metadata,
                annotatable=not record.judged,
                response_count=len(record.answers),
            )
            for record in records
        ]
    )
    responses = Response.objects.bulk_create(
        [Response(prompt=prompt, text=text, source=Response.Source.IMPORTED)
         for prompt, record in zip(prompts, records, strict=True) for text in record.answers]
    )
    by_prompt: dict[int, list[Response]] = {}
    for response in responses:
        by_prompt.setdefault(response.prompt_id, []).append(response)
    judged = [(prompt, record, by_prompt.get(prompt.pk, [])) for prompt, record in zip(prompts, records, strict=True)]
    return _Added(responses=len(responses)) + _judgements_create(project, judged)


def _join_chunk(project: Project, records: Sequence[ImportRecord]) -> _Added:
    """Unpaired records joining items this import wrote: their new responses added, their labels on them."""
    if not records:
        return _Added()
    prompts = {prompt.external_id: prompt for prompt in
               Prompt.objects.select_for_update().filter(project=project, external_id__in=[r.external_id for r in records])}
    texts: dict[int, dict[str, Response]] = {}
    for response in Response.objects.filter(prompt__in=list(prompts.values())).order_by("id"):
        texts.setdefault(response.prompt_id, {}).setdefault(response.text, response)
    fresh: list[Response] = []
    for record in records:
        prompt = prompts[record.external_id]
        if (prompt.text, prompt.messages) != (record.text, record.messages):
            raise ImportFileError(record.line, "id", f"{record.external_id!r} is the id of an earlier row whose "
                                                     f"prompt is another one")
        known = texts.setdefault(prompt.pk, {})
        for text in record.answers:
            if text not in known:
                known[text] = Response(prompt=prompt, text=text, source=Response.Source.IMPORTED)
                fresh.append(known[text])
    Response.objects.bulk_create(fresh)
    for prompt in prompts.values():
        added = sum(1 for response in fresh if response.prompt_id == prompt.pk)
        if added:
            Prompt.objects.filter(pk=prompt.pk).update(response_count=F("response_count") + added)
    judged = [(prompts[record.external_id], record,
               [texts[prompts[record.external_id].pk][text] for text in record.answers]) for record in records]
    return _Added(responses=len(fresh)) + _judgements_create(project, judged)


def _judgements_create(project: Project, judged: Sequence[tuple[Prompt, ImportRecord, list[Response]]]) -> _Added:
    """The pairs, labels and suggestions the records carry, on their prompts' responses (in the records' order)."""
    pairs: list[PreferencePair] = []
    labels: list[ResponseLabel] = []
    suggestions: list[Suggestion] = []
    for prompt, record, responses in judged:
        if record.is_pair:
            pairs.append(PreferencePair(project=project, prompt=prompt, chosen=responses[0], rejected=responses[1],
                                        weight=record.pair_weight, margin=record.pair_margin))
        pairs += [PreferencePair(project=project, prompt=prompt, chosen=responses[pair.chosen],
                                 rejected=responses[pair.rejected], weight=pair.weight, margin=pair.margin)
                  for pair in record.pairs]
        labels += [ResponseLabel(project=project, prompt=prompt, response=responses[label.response],
                                 external_annotator=label.annotator, aspect=label.aspect, value=label.value)
                   for label in record.labels]
        suggestions += [Suggestion(project=project, prompt=prompt, question=suggestion.question,
                                   response=None if suggestion.response is None else responses[suggestion.response],
                                   value=suggestion.value, score=suggestion.score, agent=suggestion.agent)
                        for suggestion in record.suggestions]
    PreferencePair.objects.bulk_create(pairs)
    ResponseLabel.objects.bulk_create(labels)
    Suggestion.objects.bulk_create(suggestions)
    return _Added(pairs=len(pairs), labels=len(labels), suggestions=len(suggestions))


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
            publish_on_commit(IMPORT_PROMPTS, kind=IMPORT_MESSAGE_KIND, object_id=job_id, on_failure=lambda reason:
                              ImportJob.objects.filter(pk=job_id, status=ImportStatus.QUEUED).delete())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return job


IMPORT_MESSAGE_KIND = "import"
SQLITE_WRITE_STAGE_TIMEOUT = timedelta(minutes=30)


def import_job_heartbeat(*, job_id: int) -> None:
    lifecycle.job_heartbeat(IMPORT_JOB, job_id)


def import_jobs_fail_stale(*, now: datetime | None = None) -> list[int]:
    """Fail every running import whose worker stopped sending heartbeats: nothing of it was written (an import is
    one transaction), and its kept file goes."""
    return lifecycle.jobs_fail_stale(IMPORT_JOB, now=now)


def _stale_reason(job: ImportJob) -> str:
    last = lifecycle.last_heartbeat(job)
    return (f"the worker stopped sending heartbeats (last at {last}); nothing was imported (an import is all or "
            f"nothing): upload {job.file_name} again")


def _stale_exempt(now: datetime) -> Q | None:
    if connection.vendor != "sqlite":
        return None
    # SQLite has one writer: while the import's transaction writes, its heartbeat cannot, so the write stage
    # gets a longer bound there (on Postgres the heartbeat goes on beside the transaction)
    return Q(stage=ImportJob.Stage.WRITING, heartbeat_at__gte=now - SQLITE_WRITE_STAGE_TIMEOUT)


def import_jobs_requeue_lost(*, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every import queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    return lifecycle.jobs_requeue_lost(IMPORT_JOB, message_ids=message_ids, now=now)


def import_job_start(*, job_id: int) -> bool:
    """Claim a queued import job for this worker; False, and nothing written, if it is not queued any more."""
    return lifecycle.job_claim(IMPORT_JOB, job_id)


def import_job_progress(*, job_id: int, bytes_done: int, rows_checked: int) -> None:
    lifecycle.job_progress(IMPORT_JOB, job_id, bytes_done=bytes_done, rows_checked=rows_checked)


def import_job_writing(*, job_id: int, rows_checked: int) -> None:
    lifecycle.job_progress(IMPORT_JOB, job_id, stage=ImportJob.Stage.WRITING, rows_checked=rows_checked,
                 bytes_done=F("bytes_total"))


def import_job_succeed(*, job_id: int, summary: ImportSummary) -> None:
    lifecycle.job_end(IMPORT_JOB, job_id, ImportStatus.SUCCEEDED, only_from=IMPORT_JOB.active,
                      created_count=summary.created, already_present=summary.already_present,
                      responses_count=summary.responses, pairs_count=summary.pairs, labels_count=summary.labels,
                      suggestions_count=summary.suggestions)


def import_job_fail(*, job_id: int, error: ImportFileError | str) -> bool:
    """Fail the job with a refusal of the file (naming its line and field) or another reason."""
    where = {"error_line": error.line, "error_field": error.field[:200]} if isinstance(error, ImportFileError) else {}
    return lifecycle.job_fail(IMPORT_JOB, job_id, str(error), **where)


def _upload_remove(job_id: int) -> None:
    """The kept upload goes once the job ended: nothing reads it any more."""
    path = ImportJob.objects.filter(pk=job_id).values_list("upload_path", flat=True).first()
    if path:
        Path(path).unlink(missing_ok=True)


IMPORT_JOB = lifecycle.JobKind(
    model=ImportJob, noun="import job", message_kind=IMPORT_MESSAGE_KIND, task_name=IMPORT_PROMPTS,
    failed_fields=lambda reason: {"error": storable_text(reason)[:IMPORT_ERROR_MAX_CHARS]},
    stale_reason=_stale_reason, stale_exempt=_stale_exempt,
    started_fields={"stage": ImportJob.Stage.CHECKING}, ended_fields={"stage": ""}, on_end=_upload_remove,
)


def responses_add(*, prompt_id: int, texts: Sequence[str], source: str, source_detail: dict) -> list[Response]:
    with transaction.atomic():
        prompt = Prompt.objects.select_for_update().get(pk=prompt_id)
        created = Response.objects.bulk_create(
            [Response(prompt=prompt, text=storable_text(text), source=source, source_detail=source_detail)
             for text in texts]
        )
        Prompt.objects.filter(pk=prompt.pk).update(response_count=F("response_count") + len(created))
    return created
