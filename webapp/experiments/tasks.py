"""The light periodic job, run by celery beat on the default-queue worker: webapp.jobs.jobs_reconcile, once a
period however many beats tick."""

from django.conf import settings

from workers.app import app

RECONCILE_TASK = "webapp.experiments.tasks.reconcile_jobs"


@app.task(name=RECONCILE_TASK)
def reconcile_jobs() -> dict[str, list[int]] | None:
    """Fail stale runs and sampling jobs, queue again the queued ones whose message is gone; returns their ids
    (None: another beat's tick acted less than a period ago)."""
    from webapp.jobs import jobs_reconcile_once_per_period

    return jobs_reconcile_once_per_period()


app.conf.beat_schedule = {
    **(app.conf.beat_schedule or {}),
    "reconcile-jobs": {"task": RECONCILE_TASK, "schedule": settings.PREFLAB_RECONCILE_EVERY_S},
}
