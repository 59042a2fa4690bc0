import pytest

from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_researcher_logs_in_sees_navigation_and_the_worker_status_loads_by_htmx(page, live_server, researcher):
    log_in(page, live_server, "rita", "rita-password-1")
    assert page.locator(".whoami").inner_text().startswith("rita")
    page.click("text=System")
    page.wait_for_selector("dd[hx-get] span")  # the htmx fragment replaced "checking…"
    assert page.js_errors == []
    requested_hosts = set()
    page.on("request", lambda request: requested_hosts.add(request.url.split("/")[2]))
    page.reload()
    page.wait_for_selector("dd[hx-get] span")
    assert requested_hosts == {live_server.url.split("/")[2]}


def test_annotator_gets_403_page_on_researcher_url(page, live_server, annotator):
    log_in(page, live_server, "abel", "abel-password-1")
    response = page.goto(f"{live_server.url}/system/")
    assert response.status == 403
    assert "Not allowed" in page.content()
