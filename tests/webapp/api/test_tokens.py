"""Personal API tokens: created with only their digest stored, revoked, their last use kept at most once a
minute; the tokens page shows a new token once and lists the user's own tokens only."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from webapp.accounts.models import ApiToken
from webapp.accounts.services import (
    AccountError,
    api_token_authenticate,
    api_token_create,
    api_token_revoke,
    user_create,
)

pytestmark = pytest.mark.django_db

TOKEN = re.compile(r"pfl_[A-Za-z0-9_-]{40}")


def test_a_new_token_is_returned_once_and_only_its_digest_is_stored(researcher):
    token, raw = api_token_create(user=researcher, name="  training box  ")
    assert TOKEN.fullmatch(raw)
    row = ApiToken.objects.get()
    assert row.pk == token.pk and row.user == researcher and row.name == "training box"
    assert row.digest == hashlib.sha256(raw.encode()).hexdigest()
    assert row.prefix == raw[4:12]
    assert row.last_used_at is None and row.revoked_at is None
    stored = [str(value) for value in ApiToken.objects.values_list().get()]
    assert not any(raw in value or raw[4:] in value for value in stored)


def test_two_tokens_differ(researcher):
    first, second = (api_token_create(user=researcher, name=name)[1] for name in ("a", "b"))
    assert first != second and ApiToken.objects.count() == 2


def test_a_token_needs_a_name(researcher):
    with pytest.raises(AccountError, match="name"):
        api_token_create(user=researcher, name="   ")
    assert not ApiToken.objects.exists()


def test_authenticate_finds_the_user_and_marks_the_use_once_a_minute(researcher):
    token, raw = api_token_create(user=researcher, name="a")
    assert api_token_authenticate(raw=raw) == researcher
    first_use = ApiToken.objects.get().last_used_at
    assert first_use is not None

    assert api_token_authenticate(raw=raw) == researcher  # within the minute: not written again
    assert ApiToken.objects.get().last_used_at == first_use

    an_hour_ago = timezone.now() - timedelta(hours=1)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=an_hour_ago)
    assert api_token_authenticate(raw=raw) == researcher
    assert ApiToken.objects.get().last_used_at > first_use


def test_unknown_revoked_and_inactive_users_tokens_are_refused(researcher, annotator):
    _, raw = api_token_create(user=researcher, name="a")
    assert api_token_authenticate(raw=raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
    assert api_token_authenticate(raw="not-a-token") is None
    assert api_token_authenticate(raw="") is None

    token, other = api_token_create(user=annotator, name="b")
    annotator.is_active = False
    annotator.save()
    assert api_token_authenticate(raw=other) is None
    assert ApiToken.objects.get(pk=token.pk).last_used_at is None  # a refused use is not a use

    api_token_revoke(token_id=ApiToken.objects.get(user=researcher).pk, user=researcher)
    assert api_token_authenticate(raw=raw) is None


def test_revoke_is_for_ones_own_tokens_and_keeps_the_first_time(researcher, annotator):
    token, _ = api_token_create(user=researcher, name="a")
    with pytest.raises(AccountError):
        api_token_revoke(token_id=token.pk, user=annotator)
    assert ApiToken.objects.get().revoked_at is None

    revoked = api_token_revoke(token_id=token.pk, user=researcher).revoked_at
    assert revoked is not None and ApiToken.objects.get().revoked_at == revoked
    assert api_token_revoke(token_id=token.pk, user=researcher).revoked_at == revoked  # again: unchanged


# The page ---------------------------------------------------------------------------------------------------

FORM_KEY = re.compile(r'name="form_key" value="([^"]+)"')


def create_on_the_page(client, name: str):
    key = FORM_KEY.search(client.get("/accounts/tokens/").content.decode()).group(1)
    return client.post("/accounts/tokens/new/", {"name": name, "form_key": key}), key


def test_the_page_shows_a_new_token_once(annotator_client, annotator):
    response, key = create_on_the_page(annotator_client, "laptop")
    assert response.status_code == 200
    shown = TOKEN.findall(response.content.decode())
    assert len(shown) == 1
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get()
    assert token.user == annotator and token.name == "laptop"
    assert api_token_authenticate(raw=shown[0]) == annotator

    again = annotator_client.get("/accounts/tokens/").content.decode()
    assert "laptop" in again and f"pfl_{token.prefix}" in again and shown[0] not in again


def test_sending_the_form_again_makes_no_second_token(annotator_client):
    """A reload of the page showing the new token sends its POST again."""
    first, key = create_on_the_page(annotator_client, "laptop")
    assert first.status_code == 200 and ApiToken.objects.count() == 1
    again = annotator_client.post("/accounts/tokens/new/", {"name": "laptop", "form_key": key}, follow=True)
    assert again.redirect_chain == [("/accounts/tokens/", 302)]
    assert ApiToken.objects.count() == 1 and not TOKEN.search(again.content.decode())
    assert "sent already" in again.content.decode()
    assert annotator_client.post("/accounts/tokens/new/", {"name": "no key"}).status_code == 302
    assert ApiToken.objects.count() == 1


def test_the_page_lists_only_ones_own_tokens_and_revokes_only_them(client, researcher, annotator):
    mine, _ = api_token_create(user=annotator, name="mine")
    theirs, _ = api_token_create(user=researcher, name="theirs")
    client.force_login(annotator)
    page = client.get("/accounts/tokens/").content.decode()
    assert "mine" in page and "theirs" not in page

    client.post(f"/accounts/tokens/{theirs.pk}/revoke/")
    assert ApiToken.objects.get(pk=theirs.pk).revoked_at is None
    response = client.post(f"/accounts/tokens/{mine.pk}/revoke/", follow=True)
    assert ApiToken.objects.get(pk=mine.pk).revoked_at is not None
    assert "revoked" in response.content.decode()


def test_a_nameless_token_is_refused_on_the_page_which_can_be_sent_again(annotator_client):
    response, key = create_on_the_page(annotator_client, " ")
    assert response.status_code == 400 and not ApiToken.objects.exists()
    fresh = FORM_KEY.search(response.content.decode()).group(1)
    assert fresh != key
    assert annotator_client.post("/accounts/tokens/new/", {"name": "named", "form_key": fresh}).status_code == 200
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["named"]


def test_every_logged_in_user_has_the_page_and_a_link_to_it(client):
    for role in ("annotator", "researcher"):
        user, _ = user_create(username=f"user-{role}", role=role, password="pw-long-enough-1")
        client.force_login(user)
        assert client.get("/accounts/tokens/").status_code == 200
        assert 'href="/accounts/tokens/"' in client.get("/").content.decode()


def test_anonymous_visitors_are_sent_to_login():
    response = Client().get("/accounts/tokens/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    Client().post("/accounts/tokens/new/", {"name": "x"})
    assert not ApiToken.objects.exists()
