"""Celery tasks. Each takes ids, calls the job's execution (workers/training.py, workers/sampling.py,
workers/importing.py) or a service, and returns something small and JSON-serialisable.

The web process imports this module to queue tasks, so the executions (which import torch) are imported
inside the tasks that run them, on the worker."""

import os
import socket

from workers.app import app


@app.task(name="workers.tasks.health_ping")
def health_ping() -> dict:
    """Proves a worker is alive, reachable through the broker and connected to the database; says who it is."""
    from webapp.selectors import database_is_reachable

    return {
        "ok": True,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "database_ok": database_is_reachable(),
    }


@app.task(name="workers.tasks.run_training")
def run_training(run_id: int) -> None:
    """Train one run on this (GPU) worker."""
    from workers.training import run_execute

    run_execute(run_id=run_id)


@app.task(name="workers.tasks.run_node_join")
def run_node_join(run_id: int, node_rank: int, rendezvous_id: str) -> None:
    """Be node `node_rank` of a run on several nodes, as its node 0 (the worker that claimed it) asked."""
    from workers.torchrun import run_node_execute

    run_node_execute(run_id=run_id, node_rank=node_rank, rendezvous_id=rendezvous_id)


@app.task(name="workers.tasks.sample_responses")
def sample_responses(job_id: int) -> None:
    """Fill a project's prompts with model responses (a sampling job) on this (GPU) worker."""
    from workers.sampling import sampling_job_execute

    sampling_job_execute(job_id=job_id)


@app.task(name="workers.tasks.import_prompts")
def import_prompts(job_id: int) -> None:
    """Check and write an uploaded import file (an import job): light work, on the default queue."""
    from workers.importing import import_job_execute

    import_job_execute(job_id=job_id)
