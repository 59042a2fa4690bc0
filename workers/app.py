"""The Celery app, configured from Django settings (CELERY_* names).

Two queues: `default` for light web-side jobs and `gpu` for everything that loads a model. A GPU worker
listens on `gpu` with `--concurrency 1` and a pool that does not fork after CUDA is initialised.
"""

import os

from billiard.process import current_process
from celery import Celery, signals
from kombu import Queue

from workers.parent_death import die_with_parent

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

DEFAULT_QUEUE = "default"
GPU_QUEUE = "gpu"
# Every task that loads a model or trains one: routed to the GPU workers.
GPU_TASK_NAMES = ("workers.tasks.run_training", "workers.tasks.run_node_join", "workers.tasks.sample_responses")

app = Celery("preflab", include=["workers.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_queues=(Queue(DEFAULT_QUEUE), Queue(GPU_QUEUE)),
    task_default_queue=DEFAULT_QUEUE,
    task_routes={name: {"queue": GPU_QUEUE} for name in GPU_TASK_NAMES},
    # A task is acknowledged only when it finishes, so a worker killed mid-task does not lose it silently;
    # the run's own status (not redelivery) decides whether it is started again.
    task_acks_late=True,
    task_reject_on_worker_lost=False,
    worker_prefetch_multiplier=1,
    task_track_started=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=3600,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    # What tasks print (progress bars of model loading) is information, not a warning: it goes to the log
    # file, not to `make run`'s terminal.
    worker_redirect_stdouts_level="INFO",
)


@signals.beat_embedded_init.connect
def _embedded_beat_dies_with_its_worker(**_: object) -> None:
    """`celery worker -B` forks its beat: a worker SIGKILLed must take its beat along, or the orphan goes on
    scheduling the reconcile beside the restarted worker's beat. (Two beats at once act once per period all the
    same: webapp.jobs.jobs_reconcile_once_per_period.)"""
    die_with_parent(parent_pid=getattr(current_process(), "_parent_pid", None))
