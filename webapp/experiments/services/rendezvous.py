"""A run on several nodes: node 0 opens the rendezvous and asks the other gpu workers to join it."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import transaction

from webapp.celery_app import RUN_NODE_JOIN
from webapp.experiments.models import Run
from webapp.experiments.services.runs import Status, run_fail
from webapp.queueing import publish_on_commit

logger = logging.getLogger(__name__)


# names the queue messages (webapp.queueing) asking gpu workers to join a run on several nodes as one of its nodes
NODE_MESSAGE_KIND = "node"


def run_rendezvous_open(*, run_id: int, rendezvous_id: str, endpoint: str, nodes: int, worker: str) -> bool:
    """The worker that claimed a run on several nodes is node 0: record where the nodes meet (its launch's
    rendezvous), and ask nodes - 1 other gpu workers to join it, one message per node rank, sent once committed.
    False, and nothing written, if the run is not running. If the broker cannot be reached the run is failed with
    the reason and QueueUnavailable raised."""
    with transaction.atomic():
        opened = Run.objects.filter(pk=run_id, status=Status.RUNNING).update(
            rendezvous={"id": rendezvous_id, "endpoint": endpoint, "nodes": nodes, "joined": {"0": worker}}
        )
        if not opened:
            return False
        for node_rank in range(1, nodes):
            publish_on_commit(RUN_NODE_JOIN, kind=NODE_MESSAGE_KIND, object_id=run_id,
                              args=(node_rank, rendezvous_id), on_failure=_fail_unasked_node(run_id, node_rank))
    return True


def _fail_unasked_node(run_id: int, node_rank: int) -> Callable[[str], None]:
    return lambda reason: run_fail(run_id=run_id, error=f"node {node_rank} could not be asked to join: {reason}")


def run_node_claim(*, run_id: int, node_rank: int, rendezvous_id: str, worker: str) -> Run | None:
    """Claim node `node_rank` of the run's rendezvous `rendezvous_id` for this worker: the run, or None (and nothing
    written) if the run is not running, was launched again since (another rendezvous), or that node was claimed
    already (a message delivered twice)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        rendezvous = run.rendezvous
        joined = rendezvous.get("joined", {})
        if run.status != Status.RUNNING or rendezvous.get("id") != rendezvous_id or str(node_rank) in joined:
            logger.info("run %s: node %s of rendezvous %s is not to be joined (run %s, rendezvous %s, joined %s)",
                        run_id, node_rank, rendezvous_id, run.status, rendezvous.get("id"), sorted(joined))
            return None
        run.rendezvous = {**rendezvous, "joined": {**joined, str(node_rank): worker}}
        run.save(update_fields=["rendezvous"])
    return run
