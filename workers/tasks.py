"""Celery tasks, under the names the web publishes them by (webapp/celery_app.py). Each takes ids, calls the job's
execution (workers/training.py, workers/sampling.py, workers/importing.py) or a service, and returns something
small and JSON-serialisable.

The executions (which import torch) are imported inside the tasks that run them, so a worker that only runs light
jobs never loads them."""

import os
import socket

from webapp.celery_app import (
    HEALTH_PING,
    IMPORT_PROMPTS,
    RECONCILE_JOBS,
    RUN_NODE_JOIN,
    RUN_TRAINING,
    SAMPLE_RESPONSES,
    SCORE_ROUND,
    SUGGEST_ANSWERS,
)
from workers.app import app


@app.task(name=HEALTH_PING)
def health_ping() -> dict:
    """Proves a worker is alive, reachable through the broker and connected to the database; says who it is."""
    from webapp.selectors import database_is_reachable

    return {
        "ok": True,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "database_ok": database_is_reachable(),
    }


@app.task(name=RUN_TRAINING)
def run_training(run_id: int) -> None:
    """Train one run on this (GPU) worker."""
    from workers.training import run_execute

    run_execute(run_id=run_id)


@app.task(name=RUN_NODE_JOIN)
def run_node_join(run_id: int, node_rank: int, rendezvous_id: str) -> None:
    """Be node `node_rank` of a run on several nodes, as its node 0 (the worker that claimed it) asked."""
    from workers.torchrun import run_node_execute

    run_node_execute(run_id=run_id, node_rank=node_rank, rendezvous_id=rendezvous_id)


@app.task(name=SAMPLE_RESPONSES)
def sample_responses(job_id: int) -> None:
    """Fill a project's prompts with model responses (a sampling job) on this (GPU) worker."""
    from workers.sampling import sampling_job_execute

    sampling_job_execute(job_id=job_id)


@app.task(name=SCORE_ROUND)
def score_round(scoring_id: int) -> None:
    """Score a round's responses with a reward model (a round scoring) on this (GPU) worker."""
    from workers.scoring import round_scoring_execute

    round_scoring_execute(scoring_id=scoring_id)


@app.task(name=SUGGEST_ANSWERS)
def suggest_answers(job_id: int) -> None:
    """Suggest answers to a round's (or a project's) items with a reward model or a judge (a suggestion job) on
    this (GPU) worker."""
    from workers.suggesting import suggestion_job_execute

    suggestion_job_execute(job_id=job_id)


@app.task(name=IMPORT_PROMPTS)
def import_prompts(job_id: int) -> None:
    """Check and write an uploaded import file (an import job): light work, on the default queue."""
    from workers.importing import import_job_execute

    import_job_execute(job_id=job_id)


@app.task(name=RECONCILE_JOBS)
def reconcile_jobs() -> dict[str, list[int]] | None:
    """The periodic job celery beat runs on the default-queue worker (workers/app.py's beat_schedule): fail stale
    runs and sampling jobs, queue again the queued ones whose message is gone; returns their ids (None: another
    beat's tick acted less than a period ago)."""
    from webapp.jobs import jobs_reconcile_once_per_period

    return jobs_reconcile_once_per_period()
