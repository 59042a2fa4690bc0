"""The environment of one pytest-xdist worker (`make test` runs the suite on two, `-n 2`).

The tests start real Celery worker processes and remove the runs' directory of their data directory at the start
and end of a session. Two test processes sharing one broker would take each other's tasks (a worker started by one
test serving another test's queue, on another test database), and one session's clean-up would remove the other's
runs. So each xdist worker gets a Redis database of its own for its broker and results, and a data directory of its
own; pytest-django already gives each its own test database (test_preflab_gw0, ...).

Loaded with `-p tests.parallel_env` (pyproject's addopts) so that it runs before pytest-django reads Django's
settings, which are read from the environment once. Without xdist it changes nothing.
"""

import os
from urllib.parse import urlsplit, urlunsplit

# Redis databases 8, 9, ... for workers gw0, gw1, ...: above the 0 of `make test` run without -n, and the 5 a cache
# test flushes (tests/webapp/experiments/test_metric_series_paths.py).
FIRST_WORKER_REDIS_DATABASE = 8


def xdist_worker_number() -> int | None:
    """0 for gw0, 1 for gw1, ...; None outside an xdist worker (the controller, or a run without -n)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else None


def with_redis_database(url: str, database: int) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url
    return urlunsplit(parts._replace(path=f"/{database}"))


def isolate_this_worker(environ: os._Environ | dict[str, str], number: int) -> None:
    database = FIRST_WORKER_REDIS_DATABASE + number
    if database > 15:
        raise RuntimeError(f"xdist worker gw{number} would need Redis database {database}; Redis has 0-15: use -n 8 or fewer")
    for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        if environ.get(name):
            environ[name] = with_redis_database(environ[name], database)
    if environ.get("PREFLAB_DATA_DIR"):
        # still named test*: the session's clean-up of runs only touches a data directory so named (tests/conftest.py)
        environ["PREFLAB_DATA_DIR"] = f"{environ['PREFLAB_DATA_DIR'].rstrip('/')}-gw{number}"


_number = xdist_worker_number()
if _number is not None:
    isolate_this_worker(os.environ, _number)
