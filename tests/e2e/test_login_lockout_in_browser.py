"""Wrong passwords typed into the real login form lock the account: the browser gets the lockout page (429) and
the right password is refused too; the database holds the failed attempts and no session."""

import pytest
from axes.models import AccessAttempt, AccessLog
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _type_into_the_login_form(page, live_server, username: str, password: str) -> int:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation() as navigation:
        page.click("button[type=submit]")
    return navigation.value.status


def test_five_wrong_passwords_in_the_form_show_the_lockout_page_and_write_no_session(page, live_server, annotator):
    for _ in range(4):
        assert _type_into_the_login_form(page, live_server, "abel", "not-my-password") == 200
        assert "didn't match" in page.inner_text("main")
    assert _type_into_the_login_form(page, live_server, "abel", "not-my-password") == 429
    lockout = page.inner_text("#locked-out")
    assert "Too many failed logins" in lockout and "abel" in lockout and "Try again in 15 minutes" in lockout

    assert _type_into_the_login_form(page, live_server, "abel", "abel-password-1") == 429
    assert page.locator("#locked-out").is_visible()
    page.goto(f"{live_server.url}/")
    assert page.url.startswith(f"{live_server.url}/accounts/login/")  # not logged in

    (attempt,) = AccessAttempt.objects.all()
    assert (attempt.username, attempt.ip_address, attempt.path_info) == ("abel", "127.0.0.1", "/accounts/login/")
    assert attempt.failures_since_start == 5  # the refused right password is not counted as a failure
    assert "abel-password-1" not in attempt.post_data and "not-my-password" not in attempt.post_data
    assert not AccessLog.objects.exists()  # no successful login was recorded
    assert User.objects.get(username="abel").last_login is None
    assert not [session for session in Session.objects.all() if "_auth_user_id" in session.get_decoded()]
    assert page.js_errors == []
