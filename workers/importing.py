"""An import job's execution on a default-queue worker: read and check every row of the kept upload, with
progress, then write them all in one transaction (services.prompts_import). Memory holds one row while
checking and one batch while writing, never the file; every write goes through the annotation services.

Checking is a pass of its own because progress written inside the import's transaction would not be seen until
it commits (and on SQLite could not be written at all while that transaction holds the write lock): the page
shows bytes and rows while rows are checked, then "writing" until the transaction commits. A bad file fails in
the first pass, before any lock is taken.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import BinaryIO

from django.db import reset_queries

from webapp.annotation import services
from webapp.annotation.importing import (
    IdRepeatedInFile,
    ImportFileError,
    count_checked_rows,
    iter_import,
    naming_first_line,
)
from webapp.annotation.models import ImportJob
from workers.jobs import JobWork, error_text, job_run

PROGRESS_EVERY_S = 0.5


def import_job_execute(*, job_id: int) -> None:
    """Run a queued import job; a job that is not queued any more is left alone. The kept upload is removed
    however the job ends."""
    job_run(IMPORT_WORK, job_id)


def _check_then_write(job: ImportJob) -> services.ImportSummary:
    path = Path(job.upload_path)
    with path.open("rb") as stream:
        rows = count_checked_rows(stream, file_format=job.file_format, progress=_CheckProgress(job.pk, stream))
    services.import_job_writing(job_id=job.pk, rows_checked=rows)
    try:
        with path.open("rb") as stream:
            records = iter_import(stream, file_format=job.file_format)
            return services.prompts_import(project=job.project, records=records, progress=_forget_queries)
    except IdRepeatedInFile as error:
        raise naming_first_line(error, path, file_format=job.file_format) from None


class _CheckProgress:
    """Writes how far checking got, at most every PROGRESS_EVERY_S."""

    def __init__(self, job_id: int, stream: BinaryIO) -> None:
        self.job_id = job_id
        self.stream = stream
        self.due_at = 0.0

    def __call__(self, rows: int) -> None:
        now = time.monotonic()
        if now < self.due_at:
            return
        self.due_at = now + PROGRESS_EVERY_S
        services.import_job_progress(job_id=self.job_id, bytes_done=self.stream.tell(), rows_checked=rows)
        _forget_queries(rows)


def _forget_queries(_rows: int) -> None:
    # With DEBUG on (make run, the test workers) Django keeps the SQL of the last 9,000 queries, and a batch's
    # INSERT holds its rows' text: a large import would keep most of the file in memory again.
    reset_queries()


def _fail(job_id: int, error: Exception) -> None:
    services.import_job_fail(job_id=job_id, error=error if isinstance(error, ImportFileError) else error_text(error))


IMPORT_WORK = JobWork(
    noun="import job", name="import",
    claim=lambda job_id: services.import_job_start(job_id=job_id),
    heartbeat=lambda job_id: services.import_job_heartbeat(job_id=job_id),
    load=lambda job_id: ImportJob.objects.select_related("project").get(pk=job_id),
    body=_check_then_write,
    succeed=lambda job_id, summary: services.import_job_succeed(job_id=job_id, summary=summary),
    fail=_fail, verdicts=(ImportFileError,),
)
