"""Putting jobs on the Celery queue, and finding the ones whose message is gone.

The row in the database is the truth; a broker message only wakes a worker up. Each message's task id names
its row (`run-12-…`, `sampling-3-…`), so the reconcile can ask the broker which rows still have a message
waiting or held by a worker, and publish again for a queued row that has none (a Redis broker restarted
without persistence loses every message). Workers claim a row only while it is queued, so a second message
for the same row does nothing.

Publishing is bounded: a broker that cannot be reached fails the publish within about a second, and the
caller removes or fails its row and tells the user, instead of a 20-second request ending in a 500 with a
"queued" row nobody will ever run.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from celery.result import AsyncResult
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from kombu.exceptions import KombuError

from webapp.celery_app import DEFAULT_QUEUE, GPU_QUEUE, HEALTH_PING, app

logger = logging.getLogger(__name__)

# About a second in all against a broker that refuses connections; a publish never hangs a request for long.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.3, "interval_max": 0.5}


class QueueUnavailable(ValidationError):
    """The broker could not be reached: the job was not queued. A ValidationError, so every form that launches a
    job shows it as it shows a refused input, and nothing stays written."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="queue_unavailable")


def message_id(kind: str, object_id: int) -> str:
    return f"{kind}-{object_id}-{uuid.uuid4().hex[:12]}"


def row_of_message(task_id: str) -> tuple[str, int] | None:
    """(kind, row id) of a message id made by message_id; None for other tasks' ids."""
    kind, _, rest = task_id.partition("-")
    number, _, _ = rest.partition("-")
    return (kind, int(number)) if number.isdigit() else None


def broker_location() -> str:
    """Where the broker is, without its credentials: redis://host:6379/0, filesystem://."""
    connection = app.connection_for_write()
    if not connection.hostname:
        return f"{connection.transport_cls}://"
    return f"{connection.transport_cls}://{connection.hostname}:{connection.port}/{connection.virtual_host or ''}"


def publish(task_name: str, *, kind: str, object_id: int, args: Sequence[int | str] = ()) -> str:
    """Send one message for a row to the task named `task_name` (webapp.celery_app; the task gets the row's id,
    then `args`); QueueUnavailable if the broker cannot be reached. Returns the message id."""
    task_id = message_id(kind, object_id)
    try:
        # ignore_result: rows hold the outcome, and a result store that is down must not stall the publish
        app.send_task(task_name, args=[object_id, *args], task_id=task_id, ignore_result=True, retry=True,
                      retry_policy=PUBLISH_RETRY_POLICY)
    except (KombuError, OSError) as error:
        raise QueueUnavailable(
            f"the job queue ({broker_location()}) could not be reached: {str(error).rstrip('.')}. Nothing was queued; "
            "try again when the broker is back"
        ) from error
    return task_id


def publish_on_commit(
    task_name: str, *, kind: str, object_id: int, on_failure: Callable[[str], None], args: Sequence[int | str] = ()
) -> None:
    """Publish once the row is committed (a worker must find it). If the broker cannot be reached, on_failure
    gets the reason (to remove or fail the row, in its own transaction) and QueueUnavailable is raised out of
    the commit, to the caller."""

    def send() -> None:
        try:
            publish(task_name, kind=kind, object_id=object_id, args=args)
        except QueueUnavailable as error:
            on_failure(" ".join(error.messages))  # str() of a ValidationError would be a list's repr
            raise

    transaction.on_commit(send)


def publish_before_commit(task_name: str, *, kind: str, object_id: int) -> None:
    """Publish inside the caller's transaction, which has written (and so locked) the row: a broker that cannot be
    reached raises QueueUnavailable and rolls back every change, so the row stays as it was. A worker handed the
    message meanwhile waits on that lock to claim the row, so it finds the committed state."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("publish_before_commit needs the transaction that changed the row")
    publish(task_name, kind=kind, object_id=object_id)


def health_ping_send() -> AsyncResult:
    """Ask any default-queue worker to answer a health ping; the result to wait on (it raises what the publish
    raises: a broker down or misconfigured)."""
    return app.send_task(HEALTH_PING)


# --- what the broker holds -------------------------------------------------------------------------------


def broker_message_ids() -> set[str] | None:
    """The task ids of every message the broker holds: waiting in a queue, or delivered to a worker and not yet
    acknowledged. None when this kind of broker cannot be read so (AMQP keeps messages across restarts) or
    cannot be reached now: the caller must then assume nothing is lost."""
    try:
        with app.connection_for_read() as connection:
            transport = connection.transport_cls
            if transport in ("redis", "rediss"):
                return _redis_message_ids(connection.default_channel)
            if transport == "filesystem":
                return _filesystem_message_ids(Path(connection.transport_options["data_folder_in"]))
    except (KombuError, OSError) as error:
        logger.warning("reconcile: the broker could not be read (%s); nothing is re-queued this time", error)
    return None


def _redis_message_ids(channel) -> set[str]:
    client = channel.client
    payloads: list[bytes] = []
    for queue in (DEFAULT_QUEUE, GPU_QUEUE):
        for priority in channel.priority_steps:
            payloads.extend(client.lrange(channel._q_for_pri(queue, priority), 0, -1))
    ids = {_header_id(payload) for payload in payloads}
    # with acks_late a message stays in the unacked hash until its task ends, even while a worker runs it
    for entry in client.hvals(channel.unacked_key):
        ids.add(_header_id(json.dumps(json.loads(entry)[0])))
    return {task_id for task_id in ids if task_id}


def _filesystem_message_ids(folder: Path) -> set[str]:
    ids = set()
    for name in os.listdir(folder):
        try:
            ids.add(_header_id((folder / name).read_bytes()))
        except OSError:
            continue  # taken by a worker meanwhile
    return {task_id for task_id in ids if task_id}


def _header_id(payload: bytes | str) -> str:
    try:
        return str(json.loads(payload).get("headers", {}).get("id") or "")
    except (ValueError, AttributeError):
        return ""


def rows_with_messages(ids: Iterable[str], kind: str) -> set[int]:
    """The row ids of `kind` that have a message among `ids`."""
    rows = (row_of_message(task_id) for task_id in ids)
    return {row[1] for row in rows if row is not None and row[0] == kind}


def requeue_lost(task_name: str, *, kind: str, queued: QuerySet, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every row of `queued` (rows with a queued_at, still queued) waiting for longer than
    PREFLAB_REQUEUE_AFTER_S whose message the broker no longer holds (a broker restarted without persistence);
    its clock starts again. Returns their ids."""
    limit = (now or timezone.now()) - timedelta(seconds=settings.PREFLAB_REQUEUE_AFTER_S)
    lost = queued.filter(queued_at__lt=limit).exclude(pk__in=rows_with_messages(message_ids, kind))
    requeued = list(lost.values_list("pk", flat=True))
    for row_id in requeued:
        publish(task_name, kind=kind, object_id=row_id)
        queued.model.objects.filter(pk=row_id).update(queued_at=timezone.now())
        logger.warning("%s %s was queued but its message was gone from the broker: queued again", kind, row_id)
    return requeued
