"""The one way a worker runs a job it was handed (an import, a sampling job): claim it while it is queued, beat
its heartbeat from a thread of its own while its body works (the body writes its progress and asks whether to
stop through its kind's services), then record how it ended: its outcome, or the error that stopped it.

A run trains in a process the worker supervises instead (workers.training, workers.supervision): its heartbeat is
written only while that process lives, which a thread of the worker could not know."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from workers.heartbeat import Heartbeat

logger = logging.getLogger(__name__)

# the write pass of an import is one transaction that shows no progress: the heartbeat says the worker is alive
HEARTBEAT_EVERY_S = 1.0

Job = TypeVar("Job")
Outcome = TypeVar("Outcome")


@dataclass(frozen=True)
class JobWork(Generic[Job, Outcome]):
    """One kind of job as a worker runs it; each callable takes the job's id first."""

    # "import job": in log lines; "import": in the heartbeat thread's name
    noun: str
    name: str
    claim: Callable[[int], bool]
    heartbeat: Callable[[int], Any]
    load: Callable[[int], Job]
    body: Callable[[Job], Outcome]
    succeed: Callable[[int, Outcome], Any]
    fail: Callable[[int, Exception], Any]
    # errors that are the job's own verdict on its input (a refused file): failed without a traceback in the log
    verdicts: tuple[type[Exception], ...] = ()


def error_text(error: BaseException) -> str:
    """How a job's unexpected error reads on its page."""
    return f"{type(error).__name__}: {error}"


def job_run(work: JobWork[Job, Outcome], job_id: int) -> None:
    """Run the job `job_id`; a job that is not queued any more (canceled, or a second message for it) is left
    alone."""
    if not work.claim(job_id):
        return
    job = work.load(job_id)
    try:
        with Heartbeat(lambda: work.heartbeat(job_id), every_s=HEARTBEAT_EVERY_S,
                       name=f"{work.name}-{job_id}-heartbeat"):
            outcome = work.body(job)
    except Exception as error:
        if not isinstance(error, work.verdicts):
            logger.exception("%s %s failed", work.noun, job_id)
        work.fail(job_id, error)
        return
    work.succeed(job_id, outcome)
