"""What issue 27's attacker sent the API: each answers a 4xx naming the field, and writes nothing.

Offsets past what a 64-bit integer holds ("bigint out of range", islice's ValueError), text the database cannot
hold (a NUL, a lone surrogate) wherever text enters, and a fork whose body is not an object."""

from __future__ import annotations

import pytest

from tests.webapp.annotation.factories import make_project
from tests.webapp.experiments.helpers import (
    finished_run_with_checkpoints,
    register_tiny_model,
    tiny_model_roots,
)
from webapp.annotation.models import Project, Response
from webapp.api.schemas import OFFSET_MAX
from webapp.experiments.models import ModelRef, Run

pytestmark = pytest.mark.django_db

LIST_PATHS = ["/projects", "/runs", "/models", "/projects/{project}/prompts", "/projects/{project}/rankings",
              "/projects/{project}/pairs", "/projects/{project}/unpaired", "/runs/{run}/samples"]


@pytest.fixture
def project(researcher) -> Project:
    return make_project(items=2, responses=2, members=[researcher])


@pytest.fixture
def run(researcher) -> Run:
    return Run.objects.create(name="listed", kind="sft", config={}, data_source={"type": "arithmetic"},
                              status=Run.Status.FAILED, created_by=researcher)


@pytest.mark.parametrize("path", LIST_PATHS)
def test_an_offset_past_the_bound_is_a_422_naming_offset_and_the_bound_itself_an_empty_page(api, project, run, path):
    url = path.format(project=project.pk, run=run.pk)
    for offset in (2**63, 10**30, -1):
        refused = api.get(url, {"offset": offset})
        assert refused.status_code == 422, (offset, refused.content)
        assert refused.json()["detail"].startswith("offset: ")
    last = api.get(url, {"offset": OFFSET_MAX, "limit": 1000})
    assert last.status_code == 200 and last.json()["items"] == [] and last.json()["next"] is None


@pytest.mark.parametrize(("query", "field"), [({"after_step": 2**31}, "after_step"), ({"after_step": -1}, "after_step")])
def test_a_step_past_what_a_step_column_holds_is_a_422(api, run, query, field):
    refused = api.get(f"/runs/{run.pk}/metrics", query)
    assert refused.status_code == 422 and refused.json()["detail"].startswith(f"{field}: ")
    refused = api.get(f"/runs/{run.pk}/samples", {"step": 2**63})
    assert refused.status_code == 422 and refused.json()["detail"].startswith("step: ")


def test_a_member_named_with_a_nul_is_a_422_and_the_members_stay(api, project):
    members = set(project.members.values_list("username", flat=True))
    added = api.post(f"/projects/{project.pk}/members", {"username": "a\u0000"})
    assert added.status_code == 422 and added.json()["detail"].startswith("username: contains a NUL character")
    removed = api.delete(f"/projects/{project.pk}/members/a%00b")
    assert removed.status_code == 422 and removed.json()["detail"].startswith("username: contains a NUL character")
    assert set(project.members.values_list("username", flat=True)) == members


def test_responses_and_a_model_path_holding_a_lone_surrogate_are_a_422_and_nothing_is_written(api, project):
    prompt = project.prompts.first()
    before = Response.objects.count()
    added = api.post(f"/prompts/{prompt.pk}/responses", {"texts": ["fine", "a\ud800"]})
    assert added.status_code == 422 and added.json()["detail"].startswith("texts[1]: contains a lone UTF-16 surrogate")
    nul = api.post(f"/prompts/{prompt.pk}/responses", {"texts": ["a\u0000"]})
    assert nul.status_code == 422 and nul.json()["detail"].startswith("texts[0]: contains a NUL character")
    assert Response.objects.count() == before
    registered = api.post("/models", {"path": "a\ud800/b"})
    assert registered.status_code == 422 and registered.json()["detail"].startswith("path: contains a lone")
    assert not ModelRef.objects.exists()


def test_a_nul_in_a_query_parameter_the_api_reads_is_a_422_and_one_it_does_not_read_is_ignored(api, run):
    refused = api.get("/runs", {"q": "a\u0000"})
    assert refused.status_code == 422 and refused.json()["detail"].startswith("q: contains a NUL character")
    assert api.get("/runs", {"unknown": "a\u0000"}).status_code == 200


@pytest.fixture
def forkable(settings, tiny_model_dir, researcher) -> Run:
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    return finished_run_with_checkpoints(register_tiny_model(tiny_model_dir), tiny_model_dir, researcher)


@pytest.mark.parametrize(("body", "got"), [
    (b"5", "a number"), (b'"x"', "a string"), (b"null", "null"), (b"[]", "an array"), (b"true", "a boolean"),
])
def test_a_fork_whose_body_is_not_an_object_is_a_422_and_queues_nothing(api, forkable, body, got):
    refused = api.post_bytes(f"/runs/{forkable.pk}/fork", body, "application/json")
    assert refused.status_code == 422, refused.content
    assert refused.json()["detail"] == f"body: expected a JSON object; got {got}"
    assert Run.objects.count() == 1


def test_a_fork_with_an_object_or_no_body_is_queued(api, forkable):
    assert api.post_bytes(f"/runs/{forkable.pk}/fork", b"", "application/json").status_code == 201
    assert api.post(f"/runs/{forkable.pk}/fork", {"name": "second"}).status_code == 201
    assert list(Run.objects.filter(parent=forkable).values_list("name", flat=True).order_by("pk")) == [
        "to resume (fork)", "second"]


def test_a_json_body_past_what_django_reads_into_memory_is_the_apis_413_and_nothing_is_written(api, project, settings):
    """Django refuses to read a body past DATA_UPLOAD_MAX_MEMORY_SIZE with its own HTML page for a bad request;
    the API answers its JSON 413 instead (responses may be 200,000 characters each, 1,000 of them)."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    prompt = project.prompts.first()
    before = Response.objects.count()
    answer = api.post(f"/prompts/{prompt.pk}/responses", {"texts": ["r" * 20_000]})
    assert answer.status_code == 413 and answer["Content-Type"] == "application/json; charset=utf-8"
    assert answer.json()["detail"].startswith("body: larger than the 9.8 KiB a JSON body may hold"), answer.json()
    assert Response.objects.count() == before
