"""The API's authentication and roles: no token, an unknown or a revoked one is a 401; an annotator's token is
refused with a 403 on every researcher endpoint, which is every endpoint of the OpenAPI schema (walked, so that
endpoints added later are covered too); and no log record holds a token."""

from __future__ import annotations

import logging

import pytest
from django.test import Client
from django.views.debug import ExceptionReporter

from tests.webapp.annotation.factories import make_project
from tests.webapp.api.conftest import ApiClient
from webapp.accounts.models import ApiToken
from webapp.accounts.services import api_token_create, api_token_revoke
from webapp.experiments.models import ModelRef, Run

pytestmark = pytest.mark.django_db

# (method, path) of the operations an annotator's token may call: ranking through the API (their projects only).
ANNOTATOR_OPERATIONS: set[tuple[str, str]] = {
    ("GET", "/api/v1/projects/{project_id}/items"), ("POST", "/api/v1/items/{item_id}/ranking"),
}
# This helper's part of the contract: the walk must at least find these.
OWN_OPERATIONS = {
    ("GET", "/api/v1/projects"), ("POST", "/api/v1/projects"), ("GET", "/api/v1/projects/{project_id}"),
    ("GET", "/api/v1/projects/{project_id}/members"), ("POST", "/api/v1/projects/{project_id}/members"),
    ("DELETE", "/api/v1/projects/{project_id}/members/{username}"),
    ("POST", "/api/v1/projects/{project_id}/records"), ("GET", "/api/v1/projects/{project_id}/prompts"),
    ("POST", "/api/v1/prompts/{prompt_id}/responses"), ("GET", "/api/v1/projects/{project_id}/rankings"),
    ("GET", "/api/v1/projects/{project_id}/pairs"), ("GET", "/api/v1/models"), ("POST", "/api/v1/models"),
}


@pytest.fixture
def path_values(annotator) -> dict[str, object]:
    """Real objects for the walk's path parameters, by the path segment before the parameter."""
    project = make_project(items=1, responses=2, members=[annotator])
    run = Run.objects.create(name="walk", kind="external", config={}, data_source={}, status=Run.Status.RUNNING)
    model = ModelRef.objects.create(name="hub model", path="org/model", source=ModelRef.Source.HUB)
    checkpoint = ModelRef.objects.create(name="walk step 1", path="/runs/walk/step-1", run=run, step=1,
                                         source=ModelRef.Source.CHECKPOINT)
    return {"projects": project.pk, "prompts": project.prompts.get().pk, "items": project.prompts.get().pk,
            "runs": run.pk, "models": model.pk, "checkpoints": checkpoint.pk, "artifacts": "eval.csv",
            "members": annotator.username}


def operations() -> list[tuple[str, str]]:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return sorted((method.upper(), path) for path, methods in response.json()["paths"].items() for method in methods)


def filled(path: str, values: dict[str, object]) -> str:
    parts = path.split("/")
    for index, part in enumerate(parts):
        if part.startswith("{"):
            owner = parts[index - 1]
            assert owner in values, f"the walk cannot fill {part} in {path}: add an object for '{owner}' to path_values"
            parts[index] = str(values[owner])
    return "/".join(parts)


def test_the_walk_finds_every_endpoint_of_this_part():
    assert set(operations()) >= OWN_OPERATIONS


def test_without_a_valid_token_every_endpoint_answers_401(anonymous_api, researcher, path_values):
    revoked, revoked_raw = api_token_create(user=researcher, name="old")
    revoked = api_token_revoke(token_id=revoked.pk, user=researcher)
    clients = {
        "no token": anonymous_api,
        "unknown token": ApiClient(Client(), "pfl_" + "x" * 40),
        "revoked token": ApiClient(Client(), revoked_raw),
    }
    tokens_page = "make a personal token on http://testserver/accounts/tokens/"
    refusals = {
        "no token": f"no token: send the header Authorization: Bearer <token>; {tokens_page}",
        "unknown token": f"the token is unknown to this server (mistyped, or made on another server); {tokens_page}",
        "revoked token": f"the token {revoked} was revoked on {revoked.revoked_at:%Y-%m-%d %H:%M} UTC; {tokens_page}",
    }
    for method, path in operations():
        for what, client in clients.items():
            response = client.request(method, filled(path, path_values))
            assert response.status_code == 401, (what, method, path, response.content)
            assert response.json() == {"detail": refusals[what]}, (what, method, path)


def test_an_annotators_token_is_refused_every_researcher_endpoint(annotator_api, path_values):
    checked = 0
    for method, path in operations():
        response = annotator_api.request(method, filled(path, path_values))
        if (method, path) in ANNOTATOR_OPERATIONS:
            assert response.status_code != 403, (method, path)
            continue
        assert response.status_code == 403, (method, path, response.content)
        assert response.json() == {"detail": "researchers only"}, (method, path)
        checked += 1
    assert checked >= len(OWN_OPERATIONS)


def test_a_researchers_token_is_let_through_every_endpoint(api, path_values):
    for method, path in operations():
        response = api.request(method, filled(path, path_values))
        assert response.status_code not in (401, 403), (method, path, response.content)


def test_an_inactive_users_token_is_refused(researcher, researcher_token, api):
    assert api.get("/projects").status_code == 200
    researcher.is_active = False
    researcher.save()
    response = api.get("/projects")
    assert response.status_code == 401
    assert response.json()["detail"].startswith(f"the token's user {researcher.username} is deactivated; make a")


def test_the_token_is_read_only_from_a_bearer_authorization(researcher_token):
    client = Client()
    assert client.get("/api/v1/projects", headers={"Authorization": f"bearer {researcher_token}"}).status_code == 200
    for header in (f"Token {researcher_token}", researcher_token, f"Basic {researcher_token}", "Bearer ", "Bearer"):
        assert client.get("/api/v1/projects", headers={"Authorization": header}).status_code == 401, header
    assert client.get("/api/v1/projects", {"token": researcher_token}).status_code == 401


def test_a_session_login_is_no_token(researcher_client):
    """The API takes tokens only: a browser's session cookie would make every page's visitor a client, open to
    cross-site requests."""
    assert researcher_client.get("/api/v1/projects").status_code == 401


def test_no_log_record_holds_a_token(caplog, settings, researcher, api, annotator_api, researcher_token,
                                     annotator_token):
    settings.DEBUG = True  # ninja and Django say more with DEBUG on (ninja's bearer check logged the header)
    revoked, revoked_raw = api_token_create(user=researcher, name="old")
    api_token_revoke(token_id=revoked.pk, user=researcher)
    unknown = "pfl_" + "y" * 40
    caplog.set_level(logging.DEBUG)

    project = make_project(items=1, responses=2, owner=researcher)
    assert api.get("/projects").status_code == 200
    assert api.post("/projects", {"name": "logged"}).status_code == 201
    assert api.get("/projects/0").status_code == 404
    assert api.post("/projects", {"name": ""}).status_code == 422
    assert api.post_bytes(f"/projects/{project.pk}/records", b'{"nope": 1}\n', "application/x-ndjson").status_code == 422
    assert annotator_api.get("/projects").status_code == 403
    assert ApiClient(Client(), revoked_raw).get("/projects").status_code == 401
    assert ApiClient(Client(), unknown).get("/projects").status_code == 401
    for scheme in ("Token", "Basic", "Bearer:"):
        response = Client().get("/api/v1/projects", headers={"Authorization": f"{scheme} {researcher_token}"})
        assert response.status_code == 401

    request_records = [record for record in caplog.records if record.name == "django.request"]
    assert {getattr(record, "status_code", None) for record in request_records} >= {401, 403, 404, 422}
    logged = []
    for record in caplog.records:
        logged += [record.getMessage(), repr(record.args), record.exc_text or ""]
        if hasattr(record, "request"):  # what an error report (the admins' mail, say) would show of the request
            logged.append(ExceptionReporter(record.request, None, None, None, is_email=True).get_traceback_text())
    text = "\n".join(logged)
    assert "HTTP_AUTHORIZATION" in text  # the error reports list the header, hidden
    for token in (researcher_token, annotator_token, revoked_raw, unknown):
        assert token not in text and token[4:] not in text
    assert ApiToken.objects.filter(last_used_at__isnull=False).count() == 2  # the valid tokens were used
