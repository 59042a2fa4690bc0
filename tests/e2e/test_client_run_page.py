"""A run logged by a script through the Python client fills its run page while the page is open: the charts grow
to every logged step, the samples table appears at the newest step, and the badge says how the run ended."""

import pytest
from preflab_client import Client

from tests.e2e.conftest import log_in
from webapp.experiments.models import MetricRow, Run, Sample

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

STEPS = 40


@pytest.fixture
def api_token(researcher) -> str:
    from webapp.accounts.services import api_token_create

    return api_token_create(user=researcher, name="browser test")[1]


def test_the_run_page_fills_in_as_the_client_logs(page, live_server, api_token, tmp_path):
    log_in(page, live_server, "rita", "rita-password-1")
    with Client(live_server.url, api_token, outbox_dir=tmp_path / "outbox") as preflab:
        run = preflab.init_run("from a script", config={"lr": 0.001, "model": "my-model"}, total_steps=STEPS)
        for step in range(1, 6):
            run.log({"loss": 2.0 / step, "reward/mean": step / STEPS}, step=step)
        for _ in range(200):
            if MetricRow.objects.filter(run_id=run.id).count() == 5:
                break
            page.wait_for_timeout(50)
        page.goto(run.url)
        page.wait_for_function("window.preflabCharts && window.preflabCharts.points('loss') === 5")

        for step in range(6, STEPS + 1):
            run.log({"loss": 2.0 / step, "reward/mean": step / STEPS}, step=step)
            if step % 20 == 0:
                run.log_samples([{"prompt": f"question {index}", "completion": f"answer {index} at {step}",
                                  "rewards": {"match": 1.0}, "advantage": 0.5} for index in range(3)], step=step)
        # the page polls: the charts grow without a reload
        page.wait_for_function(f"window.preflabCharts.points('loss') === {STEPS}", timeout=30_000)
        page.wait_for_function(f"window.preflabCharts.points('reward/mean') === {STEPS}")
        page.wait_for_selector("#samples-body table", timeout=30_000)
        assert run.finish()["status"] == "succeeded"

    page.wait_for_selector("#run-status-badge:text('succeeded')", timeout=30_000)
    assert Run.objects.get(pk=run.id).status == Run.Status.SUCCEEDED
    drawn = page.evaluate("Array.from(document.querySelector('[data-metric=loss]').data[0].x)")
    assert drawn == list(range(1, STEPS + 1))
    page.wait_for_function(f"document.querySelector('#samples-body strong')?.textContent === '{STEPS}'",
                           timeout=30_000)
    assert page.locator("#samples-body tbody tr").count() == Sample.objects.filter(run_id=run.id, step=STEPS).count() == 3
    assert "answer 0 at 40" in page.locator("#samples-body").inner_text()
    assert page.js_errors == []
