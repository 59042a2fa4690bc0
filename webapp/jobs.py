"""The periodic check that no job is lost or stuck (celery beat, embedded in the default worker, runs it): a running run,
sampling job, import, round scoring or suggestion job whose worker stopped sending heartbeats is failed with the reason, and a
queued one whose message the broker no longer holds is published again. The broker is read before the rows, so a job queued meanwhile is too
new to be judged. Beat's ticks go through jobs_reconcile_once_per_period: two beats at once act once per period."""

from __future__ import annotations

import logging

from django.conf import settings

from webapp.annotation.services import (
    import_jobs_fail_stale,
    import_jobs_requeue_lost,
    sampling_jobs_fail_stale,
    sampling_jobs_requeue_lost,
)
from webapp.annotation.services.scoring import round_scorings_fail_stale, round_scorings_requeue_lost
from webapp.annotation.services.suggesting import suggestion_jobs_fail_stale, suggestion_jobs_requeue_lost
from webapp.experiments.services import periodic_job_claim, runs_fail_stale, runs_requeue_lost
from webapp.queueing import broker_message_ids

logger = logging.getLogger(__name__)

RECONCILE_JOB = "reconcile-jobs"


def jobs_reconcile() -> dict[str, list[int]]:
    """What it did, by kind: the ids failed as stale and the ids queued again."""
    message_ids = broker_message_ids()
    outcome = {"stale_runs": runs_fail_stale(), "stale_sampling_jobs": sampling_jobs_fail_stale(),
               "stale_imports": import_jobs_fail_stale(), "stale_round_scorings": round_scorings_fail_stale(),
               "stale_suggestion_jobs": suggestion_jobs_fail_stale()}
    if message_ids is not None:
        outcome["requeued_runs"] = runs_requeue_lost(message_ids=message_ids)
        outcome["requeued_sampling_jobs"] = sampling_jobs_requeue_lost(message_ids=message_ids)
        outcome["requeued_imports"] = import_jobs_requeue_lost(message_ids=message_ids)
        outcome["requeued_round_scorings"] = round_scorings_requeue_lost(message_ids=message_ids)
        outcome["requeued_suggestion_jobs"] = suggestion_jobs_requeue_lost(message_ids=message_ids)
    return outcome


def jobs_reconcile_once_per_period() -> dict[str, list[int]] | None:
    """A beat's tick: the reconcile, unless it acted less than most of a period ago (another beat's tick); None then."""
    if not periodic_job_claim(name=RECONCILE_JOB, every_s=settings.PREFLAB_RECONCILE_EVERY_S):
        logger.info("reconcile: it acted less than a period ago (another beat's tick); nothing done this time")
        return None
    return jobs_reconcile()
