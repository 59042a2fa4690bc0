"""Celery tasks. Each takes ids, calls a service, and returns something small and JSON-serialisable."""

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
