"""Reading the run pages writes nothing: a run whose heartbeat is stale stays as it is until the periodic
check (celery beat's reconcile_jobs) fails it."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.webapp.experiments.helpers import ARITHMETIC, small_config
from webapp.experiments import services
from webapp.experiments.models import Run
from workers.tasks import reconcile_jobs

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_queue(monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")


@override_settings(PREFLAB_HEARTBEAT_TIMEOUT_S=10)
def test_run_pages_leave_a_stale_run_running_and_the_periodic_check_fails_it(researcher_client, tiny_model, researcher):
    run = services.run_create(kind="reward_model", config=small_config(tiny_model), data_source=ARITHMETIC,
                              created_by=researcher, name="stale")
    old = timezone.now() - timedelta(seconds=60)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, heartbeat_at=old, started_at=old)
    for url in ("/runs/", "/runs/rows", f"/runs/{run.pk}/", f"/runs/{run.pk}/status"):
        assert researcher_client.get(url).status_code == 200, url
        assert researcher_client.get(url, HTTP_HX_REQUEST="true").status_code == 200, url
    run.refresh_from_db()
    assert (run.status, run.error, run.alerts) == (Run.Status.RUNNING, "", [])

    assert reconcile_jobs()["stale_runs"] == [run.pk]
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.alerts[0]["kind"] == "stale_heartbeat"


def test_the_run_list_renders_its_rows_alone_for_htmx(researcher_client, tiny_model, researcher):
    run = services.run_create(kind="reward_model", config=small_config(tiny_model), data_source=ARITHMETIC,
                              created_by=researcher, name="listed")
    page = researcher_client.get("/runs/?status=queued").content.decode()
    rows = researcher_client.get("/runs/?status=queued", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" in page and 'id="run-filters"' in page and f"#{run.pk}" in page
    assert "<html" not in rows and 'id="run-filters"' not in rows and f"#{run.pk}" in rows
    assert f"#{run.pk}" not in researcher_client.get("/runs/?status=failed", HTTP_HX_REQUEST="true").content.decode()
