"""Every page needs a login; researcher pages refuse annotators with 403 and admit researchers."""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from webapp.accounts.roles import RESEARCHER

pytestmark = pytest.mark.django_db


def _researcher_only_urls() -> list[str]:
    """Every parameterless URL whose view is marked researcher-only, across all apps."""
    found: list[str] = []

    def walk(patterns, prefix: str, namespace: str | None) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern), entry.namespace or namespace)
            elif (
                isinstance(entry, URLPattern)
                and getattr(entry.callback, "required_role", None) == RESEARCHER
                and entry.pattern.regex.groups == 0
                and entry.name
            ):
                found.append(reverse(f"{namespace}:{entry.name}" if namespace else entry.name))

    walk(get_resolver().url_patterns, "/", None)
    return found


def test_there_are_researcher_pages_to_check():
    assert "/system/" in _researcher_only_urls()


def test_anonymous_visitors_are_sent_to_login(client):
    for url in ["/", "/system/", *_researcher_only_urls()]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/"), url


def test_login_page_and_health_need_no_login(client):
    assert client.get("/accounts/login/").status_code == 200
    assert client.get("/healthz").json() == {"ok": True}


def test_annotator_is_refused_every_researcher_page(annotator_client):
    urls = _researcher_only_urls()
    for url in urls:
        response = annotator_client.get(url)
        assert response.status_code == 403, url
        assert b"Not allowed" in response.content


def test_researcher_is_admitted_to_every_researcher_page(researcher_client):
    for url in _researcher_only_urls():
        assert researcher_client.get(url).status_code == 200, url


def test_annotator_home_hides_researcher_navigation(annotator_client):
    page = annotator_client.get("/").content.decode()
    assert "abel" in page
    assert 'href="/system/"' not in page


def test_login_with_a_password_then_logout(client, annotator):
    response = client.post("/accounts/login/", {"username": "abel", "password": "abel-password-1"})
    assert response.status_code == 302 and response["Location"] == reverse("home")
    assert client.get("/").status_code == 200
    client.post("/accounts/logout/")
    assert client.get("/").status_code == 302


def test_wrong_password_is_refused(client, annotator):
    response = client.post("/accounts/login/", {"username": "abel", "password": "wrong"})
    assert response.status_code == 200
    assert b"didn&#x27;t match" in response.content or b"didn't match" in response.content
