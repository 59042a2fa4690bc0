"""The periodic check that no job is lost or stuck (celery beat runs it on the default worker): a running run,
sampling job or import whose worker stopped sending heartbeats is failed with the reason, and a queued one whose message the
broker no longer holds is published again. The broker is read before the rows, so a job queued meanwhile is too
new to be judged."""

from __future__ import annotations

from webapp.annotation.services import (
    import_jobs_fail_stale,
    import_jobs_requeue_lost,
    sampling_jobs_fail_stale,
    sampling_jobs_requeue_lost,
)
from webapp.experiments.services import runs_fail_stale, runs_requeue_lost
from webapp.queueing import broker_message_ids


def jobs_reconcile() -> dict[str, list[int]]:
    """What it did, by kind: the ids failed as stale and the ids queued again."""
    message_ids = broker_message_ids()
    outcome = {"stale_runs": runs_fail_stale(), "stale_sampling_jobs": sampling_jobs_fail_stale(),
               "stale_imports": import_jobs_fail_stale()}
    if message_ids is not None:
        outcome["requeued_runs"] = runs_requeue_lost(message_ids=message_ids)
        outcome["requeued_sampling_jobs"] = sampling_jobs_requeue_lost(message_ids=message_ids)
        outcome["requeued_imports"] = import_jobs_requeue_lost(message_ids=message_ids)
    return outcome
