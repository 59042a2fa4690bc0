"""Login throttling (django-axes, settings "Login throttling"): 5 failures lock a username, 20 an address, for
15 minutes, on the app's login page and the admin's alike; the refusal is a 429 page that says so."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client, RequestFactory
from django.utils import timezone

from webapp.accounts.throttling import client_address

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"


def _log_in(client: Client, username: str, password: str, *, address: str = "10.0.0.1", url: str = LOGIN):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _assert_locked_out(response) -> None:
    assert response.status_code == 429
    assert response["Retry-After"] == str(15 * 60)
    page = response.content.decode()
    assert "Too many failed logins" in page and "Try again in 15 minutes" in page


def test_five_wrong_passwords_lock_the_username_and_the_right_one_is_then_refused(client, annotator):
    for _ in range(4):
        response = _log_in(client, "abel", "wrong")
        assert response.status_code == 200 and "didn't match" in response.content.decode()
    _assert_locked_out(_log_in(client, "abel", "wrong"))

    _assert_locked_out(_log_in(client, "abel", "abel-password-1"))
    assert not _logged_in(client)
    # the username is locked wherever the next try comes from
    elsewhere = Client()
    _assert_locked_out(_log_in(elsewhere, "abel", "abel-password-1", address="10.9.9.9"))
    assert not _logged_in(elsewhere)
    assert sum(AccessAttempt.objects.filter(username="abel").values_list("failures_since_start", flat=True)) == 5


def test_the_lockout_ends_after_its_cool_off(client, annotator):
    for _ in range(5):
        _log_in(client, "abel", "wrong")
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=15, seconds=1))
    assert _log_in(client, "abel", "abel-password-1").status_code == 302
    assert _logged_in(client)


def test_an_address_at_its_limit_locks_every_username_from_it_but_not_other_addresses(client, annotator):
    for index in range(19):  # four wrong passwords each for five usernames: none of them is locked on its own
        assert _log_in(client, f"guess-{index % 5}", "wrong").status_code == 200
    _assert_locked_out(_log_in(client, "guess-4", "wrong"))

    _assert_locked_out(_log_in(client, "abel", "abel-password-1"))
    assert not _logged_in(client)
    other_address = Client()
    assert _log_in(other_address, "abel", "abel-password-1", address="10.0.0.2").status_code == 302
    assert _logged_in(other_address)


def test_the_admin_login_is_throttled_too_and_shares_the_count(client, researcher):
    researcher.is_staff = True
    researcher.save()
    for _ in range(4):
        assert _log_in(client, "rita", "wrong", url=ADMIN_LOGIN).status_code == 200
    _assert_locked_out(_log_in(client, "rita", "wrong", url=ADMIN_LOGIN))
    _assert_locked_out(_log_in(client, "rita", "rita-password-1", url=ADMIN_LOGIN))
    _assert_locked_out(_log_in(client, "rita", "rita-password-1"))
    assert not _logged_in(client)


def test_a_login_before_the_limit_works_and_forgives_that_users_failures_from_that_address(client, annotator):
    for _ in range(4):
        _log_in(client, "abel", "wrong")
    assert _log_in(client, "abel", "abel-password-1").status_code == 302
    assert _logged_in(client)
    assert not AccessAttempt.objects.exists()

    client.post("/accounts/logout/")
    for _ in range(4):  # 8 failures in all: only those since the login count
        assert _log_in(client, "abel", "wrong").status_code == 200
    _assert_locked_out(_log_in(client, "abel", "wrong"))


def test_a_login_does_not_forgive_failures_against_another_username(client, annotator, researcher):
    """Someone with an account cannot guess a colleague's password four times, log in as themselves, and start
    again: their login forgives only their own failures."""
    for _ in range(4):
        _log_in(client, "rita", "wrong")
    assert _log_in(client, "abel", "abel-password-1").status_code == 302
    client.post("/accounts/logout/")
    _assert_locked_out(_log_in(client, "rita", "wrong"))


def test_behind_proxies_the_client_is_read_from_the_right_of_x_forwarded_for(settings):
    request = RequestFactory().post(LOGIN, REMOTE_ADDR="172.18.0.5",
                                    HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7, 10.1.0.1")
    settings.PREFLAB_PROXY_COUNT = 0  # no proxy: the header is whatever the client wrote
    assert client_address(request) == "172.18.0.5"
    settings.PREFLAB_PROXY_COUNT = 1
    assert client_address(request) == "10.1.0.1"
    settings.PREFLAB_PROXY_COUNT = 2
    assert client_address(request) == "203.0.113.7"
    settings.PREFLAB_PROXY_COUNT = 4  # fewer entries than proxies: the request did not come through them all
    assert client_address(request) == "172.18.0.5"


def test_behind_a_proxy_the_address_limit_applies_to_the_client_not_to_the_proxy(client, settings, annotator):
    settings.PREFLAB_PROXY_COUNT = 1
    for index in range(20):
        client.post(LOGIN, {"username": f"guess-{index % 5}", "password": "wrong"}, REMOTE_ADDR="172.18.0.5",
                    HTTP_X_FORWARDED_FOR="203.0.113.7")
    response = client.post(LOGIN, {"username": "abel", "password": "abel-password-1"}, REMOTE_ADDR="172.18.0.5",
                           HTTP_X_FORWARDED_FOR="198.51.100.1")
    assert response.status_code == 302
