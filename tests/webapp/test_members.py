"""A project's members page: researchers create annotators (one-time password shown once, stored hashed), add and
remove members, reset an annotator's password; annotators change their own password."""

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from tests.webapp.annotation.factories import make_annotators, make_project
from tests.webapp.passwords import authenticates_as
from webapp.accounts.roles import is_annotator
from webapp.accounts.services import user_create
from webapp.annotation import services
from webapp.annotation.models import Assignment

pytestmark = pytest.mark.django_db


def _shown_password(page: str) -> str:
    return page.split('id="one-time-password">', 1)[1].split("<", 1)[0]


def test_a_new_annotator_gets_a_one_time_password_shown_once(researcher_client, researcher, settings,
                                                              product_password_hashers):
    settings.PASSWORD_HASHERS = product_password_hashers  # how the product stores it, not the tests' fast hash
    project = make_project(items=1, owner=researcher)
    response = researcher_client.post(f"/accounts/projects/{project.pk}/members/new/", {"username": "nora"})
    page = response.content.decode()
    password = _shown_password(page)
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    user = User.objects.get(username="nora")
    assert is_annotator(user) and list(project.members.all()) == [user]
    assert password not in user.password and user.password.startswith(("pbkdf2", "argon2", "bcrypt", "scrypt"))
    assert authenticates_as("nora", password) == user
    again = researcher_client.get(f"/accounts/projects/{project.pk}/members/").content.decode()
    assert password not in again and "nora" in again


def test_a_taken_or_malformed_username_is_refused_in_words(researcher_client, annotator, researcher):
    project = make_project(items=1, owner=researcher)
    for username, message in (("ABEL", "is taken"), ("no spaces please", "Enter a valid username")):
        response = researcher_client.post(f"/accounts/projects/{project.pk}/members/new/", {"username": username})
        assert response.status_code == 400 and message in response.content.decode()
    assert User.objects.count() == 2 and not project.members.exists()


def test_add_and_remove_members_ends_their_leases(researcher_client, annotator, researcher):
    project = make_project(items=2, owner=researcher)
    researcher_client.post(f"/accounts/projects/{project.pk}/members/add/", {"user": annotator.pk})
    assert list(project.members.all()) == [annotator]
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    researcher_client.post(f"/accounts/projects/{project.pk}/members/{annotator.pk}/remove/")
    assert not project.members.exists()
    assert Assignment.objects.get(pk=lease.pk).expires_at <= timezone.now()  # the item is free for others
    assert authenticates_as("abel", "abel-password-1") == annotator  # the account stays


def test_a_user_without_a_role_added_as_member_becomes_an_annotator(researcher_client, researcher):
    project = make_project(items=1, owner=researcher)
    newcomer = User.objects.create_user(username="nemo", password="nemo-password-1")
    researcher_client.post(f"/accounts/projects/{project.pk}/members/add/", {"user": newcomer.pk})
    assert list(project.members.all()) == [newcomer] and is_annotator(User.objects.get(pk=newcomer.pk))


def test_reset_gives_a_new_one_time_password_to_annotators_only(researcher_client, annotator, researcher):
    other_researcher, _ = user_create(username="ruth", role="researcher", password="ruth-password-1")
    project = make_project(items=1, members=[annotator, other_researcher], owner=researcher)
    page = researcher_client.post(f"/accounts/projects/{project.pk}/members/{annotator.pk}/password/").content.decode()
    password = _shown_password(page)
    assert authenticates_as("abel", password) == annotator
    assert authenticates_as("abel", "abel-password-1") is None
    refused = researcher_client.post(f"/accounts/projects/{project.pk}/members/{other_researcher.pk}/password/",
                                     follow=True).content.decode()
    assert "only an admin can reset that password" in refused
    assert authenticates_as("ruth", "ruth-password-1") == other_researcher


def test_annotators_change_their_own_password_from_the_header(annotator_client, annotator):
    home = annotator_client.get("/").content.decode()
    assert 'href="/accounts/password/"' in home
    response = annotator_client.post("/accounts/password/", {
        "old_password": "abel-password-1", "new_password1": "a-much-better-one-42", "new_password2": "a-much-better-one-42",
    })
    assert response.status_code == 302 and response["Location"] == "/accounts/password/done/"
    assert authenticates_as("abel", "a-much-better-one-42") == annotator


def test_annotators_cannot_manage_members(annotator_client, annotator):
    (other,) = make_annotators(1)
    project = make_project(items=1, members=[other])
    for url in (f"/accounts/projects/{project.pk}/members/new/", f"/accounts/projects/{project.pk}/members/add/",
                f"/accounts/projects/{project.pk}/members/{other.pk}/password/"):
        assert annotator_client.post(url, {"username": "x", "user": annotator.pk}).status_code == 403
    assert list(project.members.all()) == [other] and not User.objects.filter(username="x").exists()
