"""The Celery app, configured from Django settings (CELERY_* names), and the names of its queues and tasks.

The web publishes tasks by these names (webapp/queueing.py) and imports nothing from workers/; the workers
register their tasks under the same names and add what only a worker needs (workers/app.py). The routing lives
here, once, so both sides agree on which queue a task goes to.

Two queues: `default` for light web-side jobs and `gpu` for everything that loads a model. A GPU worker
listens on `gpu` with `--concurrency 1` and a pool that does not fork after CUDA is initialised.
"""

import os

from celery import Celery
from kombu import Queue

# Before the app is made: Celery's Django fixup (the worker's django.setup()) is installed only if it is set.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

DEFAULT_QUEUE = "default"
GPU_QUEUE = "gpu"

HEALTH_PING = "workers.tasks.health_ping"
RUN_TRAINING = "workers.tasks.run_training"
RUN_NODE_JOIN = "workers.tasks.run_node_join"
SAMPLE_RESPONSES = "workers.tasks.sample_responses"
IMPORT_PROMPTS = "workers.tasks.import_prompts"
SCORE_ROUND = "workers.tasks.score_round"
SUGGEST_ANSWERS = "workers.tasks.suggest_answers"
# The name it had when it lived in webapp/experiments/tasks.py: messages and beat schedules already written name it.
RECONCILE_JOBS = "webapp.experiments.tasks.reconcile_jobs"

# Every task that loads a model or trains one: routed to the GPU workers.
GPU_TASK_NAMES = (RUN_TRAINING, RUN_NODE_JOIN, SAMPLE_RESPONSES, SCORE_ROUND, SUGGEST_ANSWERS)

app = Celery("preflab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_queues=(Queue(DEFAULT_QUEUE), Queue(GPU_QUEUE)),
    task_default_queue=DEFAULT_QUEUE,
    task_routes={name: {"queue": GPU_QUEUE} for name in GPU_TASK_NAMES},
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=3600,
    broker_connection_retry_on_startup=True,
)
