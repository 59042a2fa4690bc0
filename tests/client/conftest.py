"""Fixtures of the Python client's tests: a researcher's personal token and a client of the live server, whose
journals go to the test's own outbox directory."""

import time
from collections.abc import Iterator

import pytest
from preflab_client import Client


@pytest.fixture
def api_token(researcher) -> str:
    from webapp.accounts.services import api_token_create

    _, raw = api_token_create(user=researcher, name="client tests")
    return raw


@pytest.fixture
def outbox_dir(tmp_path):
    return tmp_path / "outbox"


@pytest.fixture
def preflab(live_server, api_token, outbox_dir) -> Iterator[Client]:
    # closed, so that the live server's thread holding its kept-alive connection (and a database session) ends
    with Client(live_server.url, api_token, outbox_dir=outbox_dir) as client:
        yield client
    wait_for_other_database_sessions_to_end()


def wait_for_other_database_sessions_to_end(timeout_s: float = 10.0) -> None:
    """The live server's request threads close their database connections a moment after the client closed its
    kept-alive HTTP connections; the test database can be dropped only once they have."""
    from django.db import connection

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()")
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.05)
