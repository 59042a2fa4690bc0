"""Reads about the installation itself (database, broker, workers) for the system page and health checks."""

from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.db import DatabaseError, connection

from webapp.queueing import health_ping_send


def database_is_reachable() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DatabaseError:
        return False


def database_description() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"SQLite (WAL) at {db['NAME']}"
    return f"PostgreSQL {db['NAME']} on {db['HOST'] or 'local socket'}:{db['PORT'] or 5432}"


def broker_description() -> str:
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://"):
        return f"embedded filesystem broker in {settings.DATA_DIR / 'broker'}"
    parts = urlsplit(url)
    # Never echo a password from the URL onto a page.
    return f"{parts.scheme}://{parts.hostname}:{parts.port or ''}{parts.path}"


@dataclass(frozen=True)
class WorkerPing:
    ok: bool
    detail: str


def worker_ping(*, timeout_s: float) -> WorkerPing:
    from celery.exceptions import TimeoutError as CeleryTimeout

    try:
        pending = health_ping_send()
    except Exception as error:  # broker down or misconfigured: show it rather than a 500
        return WorkerPing(ok=False, detail=f"broker unreachable: {type(error).__name__}: {error}")
    try:
        result = pending.get(timeout=timeout_s)
    except CeleryTimeout:
        return WorkerPing(ok=False, detail=f"no worker answered within {timeout_s:.0f} s")
    except Exception as error:
        return WorkerPing(ok=False, detail=f"{type(error).__name__}: {error}")
    finally:
        # Drop the result subscription now, not in AsyncResult.__del__ at interpreter shutdown.
        pending.forget()
    return WorkerPing(ok=True, detail=f"worker {result['hostname']} answered (pid {result['pid']})")
