"""An annotator creates an API token on the tokens page (reached from the header), sees it once, calls the API with
it, reloads (it is not shown again), revokes it after a confirmation, and the API refuses it from then on; the
ApiToken row is checked at each step. The page runs under the Content-Security-Policy without a violation."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from tests.e2e.conftest import log_in
from webapp.accounts.models import ApiToken
from webapp.accounts.services import api_token_digest

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REPORT_VIOLATIONS = """document.addEventListener("securitypolicyviolation", (event) =>
  window.preflabCspViolation(`${event.violatedDirective} blocked ${event.blockedURI || "inline"}`));"""


def api_status(live_server, token: str) -> int:
    request = urllib.request.Request(f"{live_server.url}/api/v1/projects",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_token_is_shown_once_works_and_stops_working_when_revoked(page, live_server, annotator, researcher):
    violations: list[str] = []
    page.context.expose_function("preflabCspViolation", lambda text: violations.append(text))
    page.context.add_init_script(REPORT_VIOLATIONS)
    log_in(page, live_server, "abel", "abel-password-1")
    page.click("#api-tokens-link")
    page.wait_for_url(f"{live_server.url}/accounts/tokens/")
    assert "No token yet" in page.inner_text("#tokens")

    page.fill("input[name=name]", "laptop script")
    page.click("#create-token-form button[type=submit]")
    raw = page.inner_text("#new-token").strip()
    assert re.fullmatch(r"pfl_[A-Za-z0-9_-]{40}", raw)
    token = ApiToken.objects.get()
    assert (token.user, token.name, token.prefix, token.digest) == (annotator, "laptop script", raw[4:12],
                                                                    api_token_digest(raw))
    assert token.revoked_at is None and token.last_used_at is None
    assert f"pfl_{token.prefix}" in page.inner_text("#tokens")

    # an annotator's token is refused the researchers' endpoints, but it is a valid token: 403, not 401
    assert api_status(live_server, raw) == 403
    token.refresh_from_db()
    assert token.last_used_at is not None

    page.reload()  # sends the POST again
    assert page.url == f"{live_server.url}/accounts/tokens/"
    assert raw not in page.content() and page.locator("#new-token").count() == 0
    assert ApiToken.objects.count() == 1  # and makes no second token
    page.goto(f"{live_server.url}/accounts/tokens/")
    assert raw not in page.content() and "laptop script" in page.inner_text("#tokens")

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.click(f"tr[data-token-id='{token.pk}'] .revoke-token")
    page.wait_for_selector(f"tr[data-token-id='{token.pk}'] .revoked")
    assert asked and "laptop script" in asked[0]
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert raw not in page.content()
    assert api_status(live_server, raw) == 401
    assert violations == [] and page.js_errors == []


def test_dismissing_the_confirmation_keeps_the_token(page, live_server, researcher):
    from webapp.accounts.services import api_token_create

    token, raw = api_token_create(user=researcher, name="kept")
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/accounts/tokens/")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click(f"tr[data-token-id='{token.pk}'] .revoke-token")
    page.wait_for_timeout(300)
    token.refresh_from_db()
    assert token.revoked_at is None
    request = urllib.request.Request(f"{live_server.url}/api/v1/projects", headers={"Authorization": f"Bearer {raw}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200 and json.loads(response.read())["count"] == 0
