"""Every page needs a login; researcher pages refuse annotators with 403 and admit researchers."""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from webapp.accounts.roles import RESEARCHER

pytestmark = pytest.mark.django_db


def _researcher_only_urls(arguments: dict[str, int] | None = None) -> list[str]:
    """Every URL whose view is marked researcher-only, across all apps: the parameterless ones, and those whose
    parameters are all given in `arguments` (a project's pages, say)."""
    found: list[str] = []
    arguments = arguments or {}

    def walk(patterns, prefix: str, namespace: str | None) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern), entry.namespace or namespace)
            elif (
                isinstance(entry, URLPattern)
                and getattr(entry.callback, "required_role", None) == RESEARCHER
                and set(entry.pattern.regex.groupindex) <= arguments.keys()
                and entry.pattern.regex.groups == len(entry.pattern.regex.groupindex)
                and entry.name
            ):
                name = f"{namespace}:{entry.name}" if namespace else entry.name
                found.append(reverse(name, kwargs={key: arguments[key] for key in entry.pattern.regex.groupindex}))

    walk(get_resolver().url_patterns, "/", None)
    return found


@pytest.fixture
def project_pages(annotator, researcher) -> list[str]:
    """The researcher pages of one project (the researcher's), one of its items and one of its members."""
    from tests.webapp.annotation.factories import make_project

    project = make_project(items=1, members=[annotator], owner=researcher)
    item = project.prompts.get()
    pages = _researcher_only_urls({"project_id": project.pk, "prompt_id": item.pk, "user_id": annotator.pk})
    return [url for url in pages if url not in _researcher_only_urls()]


def test_a_projects_own_pages_are_checked_too(project_pages):
    for page in ("members/", "items/", "edit/"):
        assert any(url.endswith(page) for url in project_pages), page
    assert any("/items/" in url and not url.endswith("/items/") for url in project_pages)


def test_annotator_is_refused_every_page_of_a_project(client, annotator, project_pages):
    client.force_login(annotator)
    for url in project_pages:
        assert client.post(url).status_code == 403, url
        assert client.get(url).status_code in (403, 405), url  # 405: a POST-only action


def test_researcher_sees_every_page_of_a_project(researcher_client, project_pages):
    for url in project_pages:
        assert researcher_client.get(url).status_code in (200, 405), url


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
