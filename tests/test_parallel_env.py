"""Each pytest-xdist worker's own broker and data directory (tests/parallel_env.py)."""

import pytest

from tests.parallel_env import isolate_this_worker, xdist_worker_number


def test_each_worker_gets_a_redis_database_and_a_data_directory_of_its_own():
    environ = {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0", "PREFLAB_DATA_DIR": "/repo/var/test/",
               "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/preflab"}
    isolate_this_worker(environ, 1)
    assert environ == {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/9", "PREFLAB_DATA_DIR": "/repo/var/test-gw1",
                       "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/preflab"}  # pytest-django's own suffix
    embedded = {"CELERY_BROKER_URL": "filesystem://"}
    isolate_this_worker(embedded, 0)
    assert embedded == {"CELERY_BROKER_URL": "filesystem://"}
    with pytest.raises(RuntimeError, match="Redis has 0-15"):
        isolate_this_worker({"CELERY_BROKER_URL": "redis://h:6379/0"}, 8)


def test_the_worker_number_comes_from_xdist(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert xdist_worker_number() == 3
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert xdist_worker_number() is None
