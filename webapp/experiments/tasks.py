"""The light periodic job of the experiments app, run by celery beat on the default-queue worker."""

from workers.app import app

STALE_CHECK_EVERY_S = 10.0
STALE_CHECK_TASK = "webapp.experiments.tasks.check_stale_runs"


@app.task(name=STALE_CHECK_TASK)
def check_stale_runs() -> list[int]:
    """Fail running runs whose worker stopped sending heartbeats; returns their ids."""
    from webapp.experiments.services import runs_fail_stale

    return runs_fail_stale()


app.conf.beat_schedule = {
    **(app.conf.beat_schedule or {}),
    "experiments-check-stale-runs": {"task": STALE_CHECK_TASK, "schedule": STALE_CHECK_EVERY_S},
}
