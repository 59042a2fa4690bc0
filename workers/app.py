"""The Celery app as a worker runs it: the app and its routing from webapp/celery_app.py, the tasks of
workers/tasks.py, what only a worker needs (late acknowledgement, one message at a time) and the beat schedule."""

from billiard.process import current_process
from celery import signals
from django.conf import settings

from webapp.celery_app import RECONCILE_JOBS, app
from webapp.parent_death import die_with_parent

app.conf.update(
    include=["workers.tasks"],
    # A task is acknowledged only when it finishes, so a worker killed mid-task does not lose it silently;
    # the run's own status (not redelivery) decides whether it is started again.
    task_acks_late=True,
    task_reject_on_worker_lost=False,
    worker_prefetch_multiplier=1,
    task_track_started=True,
    worker_hijack_root_logger=False,
    # What tasks print (progress bars of model loading) is information, not a warning: it goes to the log
    # file, not to `make run`'s terminal.
    worker_redirect_stdouts_level="INFO",
    # The light periodic job, run by celery beat on the default-queue worker (workers.tasks.reconcile_jobs).
    beat_schedule={"reconcile-jobs": {"task": RECONCILE_JOBS, "schedule": settings.PREFLAB_RECONCILE_EVERY_S}},
)


@signals.beat_embedded_init.connect
def _embedded_beat_dies_with_its_worker(**_: object) -> None:
    """`celery worker -B` forks its beat: a worker SIGKILLed must take its beat along, or the orphan goes on
    scheduling the reconcile beside the restarted worker's beat. (Two beats at once act once per period all the
    same: webapp.jobs.jobs_reconcile_once_per_period.)"""
    die_with_parent(parent_pid=getattr(current_process(), "_parent_pid", None))
