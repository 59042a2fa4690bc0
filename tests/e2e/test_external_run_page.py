"""An external run logged over HTTP (as a program outside Preflab logs it) shows its charts and samples on the
run page in a real browser, as our own runs do."""

import json
import urllib.request

import pytest

from tests.e2e.conftest import log_in
from webapp.accounts.services import api_token_create

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _post(live_server, token: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{live_server.url}/api/v1{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def test_an_external_runs_page_draws_its_series_and_shows_its_samples(page, live_server, researcher):
    _, token = api_token_create(user=researcher, name="trainer callback")
    run = _post(live_server, token, "/runs/external", {"name": "hf callback", "config": {"lr": 3e-5},
                                                       "total_steps": 40})
    for start in (1, 21):
        _post(live_server, token, f"/runs/{run['id']}/log", {"rows": [
            {"step": step, "metrics": {"loss": "nan" if step == 13 else 2.0 / step, "grad_norm": 1.0, "lr": 1e-6}}
            for step in range(start, start + 20)]})
    _post(live_server, token, f"/runs/{run['id']}/log", {"rows": [{"step": 40, "metrics": {"eval/accuracy": 0.5}}]})
    _post(live_server, token, f"/runs/{run['id']}/samples", {"batch_id": "first", "samples": [
        {"step": 40, "prompt": "What is 6 x 7?", "completion": "The answer is 42.", "rewards": {"exact": 1.0}}]})
    _post(live_server, token, f"/runs/{run['id']}/finish", {"status": "succeeded"})

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run['id']}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert sorted(page.evaluate("window.preflabCharts.metrics()")) == ["eval/accuracy", "grad_norm", "loss", "lr"]
    assert page.evaluate("window.preflabCharts.points('loss')") == 40  # 39 values and the NaN marker
    assert page.evaluate("window.preflabCharts.nonfinite('loss')") == ["NaN"]
    assert page.evaluate("window.preflabCharts.points('eval/accuracy')") == 1
    # a constant learning rate of 1e-6 is drawn on an axis around it, not on plotly's +-1 where it reads as 0
    low, high = page.evaluate("document.querySelector('.chart[data-metric=\"lr\"]')._fullLayout.yaxis.range")
    assert low <= 0 < 1e-6 < high < 1e-5
    samples = page.locator("#samples-body")
    assert "What is 6 x 7?" in samples.inner_text() and "The answer is 42." in samples.inner_text()
    assert page.locator("#run-status-badge").inner_text() == "succeeded"
    assert page.locator("a.button", has_text="Fork").count() == 0
    assert page.js_errors == []
