"""A task queued by this (web) process runs in a separate, real Celery worker process on Postgres + Redis."""

import os

import pytest
from django.conf import settings

from workers.tasks import health_ping


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_process_runs_the_task_and_the_result_comes_back(celery_worker_factory):
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        pytest.skip("this test is about the deployment broker; run it with CELERY_BROKER_URL=redis://...")
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("this test is about the deployment database; run it with DATABASE_URL=postgres://...")
    worker = celery_worker_factory(queues=("default",))

    result = health_ping.delay().get(timeout=30)

    assert result["ok"] is True
    assert result["pid"] == worker.process.pid
    assert result["pid"] != os.getpid()
    assert result["database_ok"] is True
