"""Projects and their runs belong to their owner and the researchers added to them; admins reach everything.

A researcher not added to a project gets 404 on every page, fragment, export, chart-data and API endpoint of it and
of its runs (the answer a project or run that does not exist gets: its existence is not revealed), and nothing of it
is written; its owner, a researcher member and an admin get 200. The rules are webapp.annotation.selectors.
projects_visible_to and webapp.experiments.selectors.runs_visible_to."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.webapp.annotation.factories import make_project
from webapp.accounts.services import api_token_create, user_create
from webapp.annotation import services as annotation_services
from webapp.annotation.models import (
    Assignment,
    GoldAnswer,
    ImportJob,
    Project,
    RoundScoring,
    SamplingJob,
    SuggestionJob,
)
from webapp.experiments import services as run_services
from webapp.experiments.artifacts import artifact_store
from webapp.experiments.data_snapshot import snapshot_path, snapshot_write
from webapp.experiments.models import ModelRef, Run

pytestmark = pytest.mark.django_db

# URL parameters that name something of a project or of a run: every page with one is listed in _pages
OWNED_PARAMETERS = {"project_id", "prompt_id", "assignment_id", "job_id", "run_id"}
ANNOTATOR_PASSWORD = "abel-password-1"


@dataclass
class World:
    project: Project
    project_run: Run  # on the project's pairs, launched by nobody known: reached through the project
    member_run: Run  # an external run the member researcher launched on no project: theirs alone
    checkpoint: ModelRef
    sampling_job: SamplingJob
    import_job: ImportJob
    assignment: Assignment
    owner: User
    member: User
    outsider: User
    admin: User
    annotator: User


@pytest.fixture
def world(researcher, annotator, monkeypatch) -> World:
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")  # no broker: nothing is run
    member = user_create(username="mia", role="researcher", password="mia-password-1")[0]
    outsider = user_create(username="oscar", role="researcher", password="oscar-password-1")[0]
    admin = User.objects.create_superuser("ada", password="ada-password-1")
    project = make_project(name="Team A project", items=2, responses=2, members=[annotator, member],
                           owner=researcher)
    ranked = annotation_services.assignment_lease_next(project=project, annotator=annotator)
    responses = list(ranked.prompt.responses.values_list("pk", flat=True))
    annotation_services.ranking_submit(assignment_id=ranked.pk, annotator=annotator, tiers=[[responses[0]],
                                                                                          [responses[1]]])
    assignment = annotation_services.assignment_lease_next(project=project, annotator=annotator)
    project_run = Run.objects.create(name="team A reward model", kind="reward_model", config={},
                                     data_source={"type": "project_pairs", "project_id": project.pk},
                                     status=Run.Status.FAILED)
    frozen = snapshot_write([{"prompt": "p", "chosen": "a", "rejected": "b"}], snapshot_path(project_run.pk))
    Run.objects.filter(pk=project_run.pk).update(data_rows=frozen.rows, data_sha256=frozen.sha256)
    run_services.metric_rows_write(run_id=project_run.pk, rows=[
        {"step": 1, "wall_time": 0.0, "tokens_seen": 1, "metrics": {"loss": 1.0}}])
    run_services.samples_write(run_id=project_run.pk, samples=[
        {"step": 1, "prompt": "p", "completion": "c", "rewards": {}, "advantage": None}])
    checkpoint = ModelRef.objects.create(name="team A step 1", path="/runs/a/step-1", run=project_run, step=1,
                                         source=ModelRef.Source.CHECKPOINT)
    member_run = run_services.external_run_create(name="mia notebook", config={}, created_by=member)
    for run in (project_run, member_run):
        artifact_store(run_id=run.pk, name="eval.csv", kind="file", body=io.BytesIO(b"step,loss\n1,0.5\n"), limit=1024)
    sampling_job = SamplingJob.objects.create(project=project, model_path="/models/x", status=SamplingJob.Status.FAILED,
                                              error="worker lost")
    SuggestionJob.objects.create(project=project, source=SuggestionJob.Source.JUDGE, model_path="/models/x",
                                 agent="judge x", status=SuggestionJob.Status.FAILED, error="worker lost")
    import_job = ImportJob.objects.create(project=project, file_name="a.jsonl", file_format="jsonl", upload_path="",
                                          status=ImportJob.Status.SUCCEEDED)
    return World(project, project_run, member_run, checkpoint, sampling_job, import_job, assignment, researcher,
                 member, outsider, admin, annotator)


def _pages(w: World) -> dict[str, list[tuple[str, str, dict]]]:
    """url name -> [(method, url, data)]: every page, fragment, export and action of the project and its runs."""
    project, run = w.project.pk, w.project_run.pk
    suggestion_job = SuggestionJob.objects.get(project=w.project).pk
    annotation = {name: [("GET", reverse(f"annotation:{name}", args=[project]), {})]
                  for name in ("annotate", "project_detail", "project_progress", "project_rounds", "project_data",
                               "project_items", "project_files", "project_delete_confirm",
                               "project_suggestion_agreement", "adjudication")}
    exports = [("GET", reverse("annotation:project_export", args=[project, kind]), {})
               for kind in ("pairs.jsonl", "pairs.csv", "rankings.jsonl", "dataset.zip", "unpaired.jsonl",
                            "unpaired.csv", "labels.jsonl")]
    run_pages = {name: [("GET", reverse(f"experiments:{name}", args=[run]), {})]
                 for name in ("run_detail", "run_status", "run_metrics", "run_samples", "run_data", "run_files",
                              "run_delete_confirm")}
    return {
        **annotation, **run_pages,
        "project_export": exports,
        "project_edit": [("GET", reverse("annotation:project_edit", args=[project]), {}),
                         ("POST", reverse("annotation:project_edit", args=[project]),
                          {"name": "taken over", "mode": "ranking", "responses_per_item": 2, "annotators_per_item": 1,
                           "lease_minutes": 30})],
        "project_item": [("GET", reverse("annotation:project_item", args=[project, w.assignment.prompt_id]), {})],
        "project_item_gold": [("POST", reverse("annotation:project_item_gold", args=[project, w.assignment.prompt_id]),
                               {"order": "A > B"})],
        "project_item_gold_remove": [
            ("POST", reverse("annotation:project_item_gold_remove", args=[project, w.assignment.prompt_id]), {})],
        # no pause exists: an outsider is refused before it is looked for
        "annotator_pause_decide": [("POST", reverse("annotation:annotator_pause_decide", args=[project, 1]),
                                    {"decision": "released"})],
        "adjudication_decide": [("POST", reverse("annotation:adjudication_decide", args=[project, w.assignment.prompt_id]),
                                 {"answer": "own", "order": "R2 > R1", "reason": "taken over"})],
        "project_import": [("POST", reverse("annotation:project_import", args=[project]),
                            {"file": SimpleUploadedFile("x.jsonl", b'{"prompt": "stolen"}\n'), "file_format": "auto"})],
        "import_job_status": [("GET", reverse("annotation:import_job_status", args=[w.import_job.pk]), {})],
        "sampling_create": [("POST", reverse("annotation:sampling_create", args=[project]),
                             {"model_path": "/models/x", "responses_per_prompt": 2, "max_new_tokens": 8,
                              "temperature": 1.0, "top_p": 1.0, "seed": 0})],
        "round_score": [("POST", reverse("annotation:round_score", args=[project]),
                         {"round": 1, "reward_run": w.project_run.pk})],
        "sampling_job_status": [("GET", reverse("annotation:sampling_job_status", args=[w.sampling_job.pk]), {})],
        "sampling_job_cancel": [("POST", reverse("annotation:sampling_job_cancel", args=[w.sampling_job.pk]), {})],
        "sampling_job_resume": [("POST", reverse("annotation:sampling_job_resume", args=[w.sampling_job.pk]), {})],
        "suggestion_job_start": [("POST", reverse("annotation:suggestion_job_start", args=[project]),
                                  {"scope": "project", "source": "judge", "judge_model": "/models/x"})],
        "suggestion_job_cancel": [("POST", reverse("annotation:suggestion_job_cancel", args=[suggestion_job]), {})],
        "suggestion_job_resume": [("POST", reverse("annotation:suggestion_job_resume", args=[suggestion_job]), {})],
        "annotate_submit": [("POST", reverse("annotation:annotate_submit", args=[w.assignment.pk]), {})],
        "annotate_skip": [("POST", reverse("annotation:annotate_skip", args=[w.assignment.pk]), {})],
        "annotate_back": [("POST", reverse("annotation:annotate_back", args=[project]), {})],
        "project_members": [("GET", reverse("project_members", args=[project]), {})],
        "project_annotator_create": [("POST", reverse("project_annotator_create", args=[project]),
                                      {"username": "planted"})],
        "project_member_add": [("POST", reverse("project_member_add", args=[project]), {"user": w.outsider.pk})],
        "project_member_remove": [("POST", reverse("project_member_remove", args=[project, w.member.pk]), {})],
        "project_member_password_reset": [
            ("POST", reverse("project_member_password_reset", args=[project, w.annotator.pk]), {})],
        "run_cancel": [("POST", reverse("experiments:run_cancel", args=[run]), {})],
        "run_resume": [("POST", reverse("experiments:run_resume", args=[run]),
                        {"checkpoint": w.checkpoint.pk, "remove_later": "yes"})],
        "run_launch": [("GET", reverse("experiments:run_launch") + f"?fork={run}", {})],
        "run_archive": [("POST", reverse("experiments:run_archive", args=[run]), {"archived": "yes"})],
        "project_archive": [("POST", reverse("annotation:project_archive", args=[project]), {"archived": "yes"})],
        "project_delete": [("POST", reverse("annotation:project_delete", args=[project]), {})],
        "run_delete": [("POST", reverse("experiments:run_delete", args=[run]), {})],
        "checkpoint_delete_confirm": [
            ("GET", reverse("experiments:checkpoint_delete_confirm", args=[run, w.checkpoint.pk]), {})],
        "checkpoint_delete": [("POST", reverse("experiments:checkpoint_delete", args=[run, w.checkpoint.pk]), {})],
    }


def _named_pages_with(parameters: set[str]) -> set[str]:
    found = set()

    def walk(patterns, namespace: str | None) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver) and entry.namespace != "api-v1":  # the API is listed below
                walk(entry.url_patterns, entry.namespace or namespace)
            elif isinstance(entry, URLPattern) and entry.name and set(entry.pattern.regex.groupindex) & parameters:
                found.add(entry.name)

    walk(get_resolver().url_patterns, None)
    return found


def _state(w: World) -> dict:
    """What an outsider's requests must leave as it was."""
    w.project.refresh_from_db()
    return {
        "project": (w.project.name, w.project.guidelines, w.project.owner_id, w.project.archived_at),
        "members": sorted(w.project.members.values_list("username", flat=True)),
        "prompts": w.project.prompts.count(),
        "annotator's password": User.objects.get(pk=w.annotator.pk).password,
        "users": User.objects.count(),
        "jobs": sorted(SamplingJob.objects.values_list("pk", "status", "cancel_requested")),
        "imports": ImportJob.objects.count(),
        "round scorings": RoundScoring.objects.count(),
        "suggestion jobs": sorted(SuggestionJob.objects.values_list("pk", "status", "cancel_requested")),
        "runs": sorted(Run.objects.values_list("pk", "status", "cancel_requested", "config", "archived_at")),
        "checkpoints": ModelRef.objects.count(),
        "assignment": Assignment.objects.filter(pk=w.assignment.pk).values_list("status", flat=True).first(),
        "rankings": w.project.prompts.filter(rankings__isnull=False).count(),
        "gold answers": GoldAnswer.objects.count(),
        "adjudications": w.project.prompts.filter(adjudication__isnull=False).count(),
    }


def _client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_every_page_of_a_project_or_of_its_runs_is_listed_here(world):
    listed = set(_pages(world))
    unlisted = {name for name in _named_pages_with(OWNED_PARAMETERS) if name not in listed}
    assert not unlisted, f"pages of a project or a run that this test does not try: {unlisted}"


def test_a_researcher_not_added_gets_404_everywhere_and_writes_nothing(world):
    client = _client_of(world.outsider)
    before = _state(world)
    for name, requests in _pages(world).items():
        for method, url, data in requests:
            response = client.post(url, data) if method == "POST" else client.get(url)
            assert response.status_code == 404, (name, method, url, response.status_code)
    assert _state(world) == before


@pytest.mark.parametrize("who", ["owner", "member", "admin"])
def test_its_owner_a_researcher_member_and_an_admin_reach_every_page(world, who):
    client = _client_of(getattr(world, who))
    for name, requests in _pages(world).items():
        for method, url, _ in requests:
            if method == "GET":
                assert client.get(url).status_code == 200, (who, name, url)


def test_lists_and_choices_show_an_outsider_none_of_it(world):
    client = _client_of(world.outsider)
    pages = {url: client.get(url).content.decode() for url in (
        "/projects/", "/runs/", f"/runs/compare?runs={world.project_run.pk}&runs={world.member_run.pk}",
        "/models/", "/runs/new?kind=reward_model", "/annotate/")}
    for url, page in pages.items():
        for secret in (world.project.name, world.project_run.name, world.member_run.name, world.checkpoint.name):
            assert secret not in page, (url, secret)
    owner_runs = _client_of(world.owner).get("/runs/").content.decode()
    assert world.project_run.name in owner_runs and world.member_run.name not in owner_runs  # not on its project
    admin_runs = _client_of(world.admin).get("/runs/").content.decode()
    assert world.project_run.name in admin_runs and world.member_run.name in admin_runs


def test_a_researcher_the_owner_adds_reaches_the_project_and_one_removed_no_longer_does(world):
    outsider = _client_of(world.outsider)
    detail = reverse("annotation:project_detail", args=[world.project.pk])
    owner = _client_of(world.owner)
    assert owner.post(reverse("project_member_add", args=[world.project.pk]), {"user": world.outsider.pk}).status_code == 302
    assert outsider.get(detail).status_code == 200
    assert outsider.get(reverse("experiments:run_detail", args=[world.project_run.pk])).status_code == 200
    owner.post(reverse("project_member_remove", args=[world.project.pk, world.outsider.pk]))
    assert outsider.get(detail).status_code == 404


def test_a_project_made_on_the_page_or_through_the_api_is_its_makers(world):
    client = _client_of(world.outsider)
    client.post("/projects/new/", {"name": "Oscar's", "mode": "ranking", "responses_per_item": 2,
                                   "annotators_per_item": 1, "lease_minutes": 30})
    made = Project.objects.get(name="Oscar's")
    assert made.owner == world.outsider and not made.members.exists()
    assert _client_of(world.owner).get(reverse("annotation:project_detail", args=[made.pk])).status_code == 404
    answer = _api(world.outsider).post("/api/v1/projects", json.dumps({"name": "Oscar's second"}),
                                       content_type="application/json")
    assert answer.status_code == 201 and Project.objects.get(name="Oscar's second").owner == world.outsider


# The API --------------------------------------------------------------------------------------------------------


class _Api(Client):
    def __init__(self, token: str) -> None:
        super().__init__(headers={"Authorization": f"Bearer {token}"})


def _api(user: User) -> _Api:
    return _Api(api_token_create(user=user, name="ownership")[1])


def _api_operations(w: World, *, project: object, run: object, prompt: object, username: str = "mia"
                    ) -> list[tuple[str, str, object]]:
    """(method, path, JSON body) of every operation that names a project, a prompt or a run, with a body it takes."""
    return [
        ("GET", f"/api/v1/projects/{project}", None),
        ("GET", f"/api/v1/projects/{project}/members", None),
        ("POST", f"/api/v1/projects/{project}/members", {"username": w.outsider.username}),
        ("DELETE", f"/api/v1/projects/{project}/members/{username}", None),
        ("GET", f"/api/v1/projects/{project}/prompts", None),
        ("GET", f"/api/v1/projects/{project}/rankings", None),
        ("GET", f"/api/v1/projects/{project}/pairs", None),
        ("GET", f"/api/v1/projects/{project}/unpaired", None),
        ("GET", f"/api/v1/projects/{project}/suggestions/agreement", None),
        ("POST", f"/api/v1/projects/{project}/records", [{"prompt": "planted"}]),
        ("POST", f"/api/v1/prompts/{prompt}/responses", {"texts": ["planted"]}),
        ("GET", f"/api/v1/runs/{run}", None),
        ("GET", f"/api/v1/runs/{run}/metrics", None),
        ("GET", f"/api/v1/runs/{run}/samples", None),
        ("GET", f"/api/v1/runs/{run}/data", None),
        ("POST", f"/api/v1/runs/{run}/cancel", None),
        ("POST", f"/api/v1/runs/{run}/resume", {"checkpoint_id": w.checkpoint.pk, "remove_later": True}),
        ("POST", f"/api/v1/runs/{run}/fork", {"config": {}}),
        ("POST", f"/api/v1/runs/{run}/log", {"rows": [{"step": 2, "metrics": {"loss": 0.5}}]}),
        ("POST", f"/api/v1/runs/{run}/samples", {"batch_id": "b1", "samples": [{"step": 2, "prompt": "p", "completion": "c"}]}),
        ("POST", f"/api/v1/runs/{run}/heartbeat", None),
        ("POST", f"/api/v1/runs/{run}/update", {"summary": {"planted": 1}}),
        ("POST", f"/api/v1/runs/{run}/finish", {"status": "succeeded"}),
        ("POST", f"/api/v1/runs/{run}/reattach", None),
        ("GET", f"/api/v1/runs/{run}/lineage", None),
        ("GET", f"/api/v1/runs/{run}/artifacts", None),
        ("GET", f"/api/v1/runs/{run}/artifacts/eval.csv", None),
        ("PUT", f"/api/v1/runs/{run}/artifacts/planted.csv", "planted"),
        ("GET", f"/api/v1/projects/{project}/items", None),
        ("POST", f"/api/v1/runs/{run}/archive", {"archived": True}),
        ("GET", f"/api/v1/runs/{run}/disk", None),
        ("DELETE", f"/api/v1/runs/{run}/checkpoints/{w.checkpoint.pk}", None),
        ("DELETE", f"/api/v1/runs/{run}", None),
        ("POST", f"/api/v1/projects/{project}/archive", {"archived": True}),
        ("DELETE", f"/api/v1/projects/{project}", None),
    ]


def _send(client: Client, method: str, path: str, body: object):
    data = "" if body is None else json.dumps(body)
    return client.generic(method, path, data, content_type="application/json")


def test_every_api_operation_on_a_project_or_a_run_is_listed_here(world):
    from webapp.api.api import api

    schema = api.get_openapi_schema()
    owned = {(method.upper(), path) for path, operations in schema["paths"].items() for method in operations
             if any(f"{{{name}}}" in path for name in ("project_id", "run_id", "prompt_id"))}
    listed = {(method, re.sub(r"/artifacts/[a-z]+\.csv$", "/artifacts/{name}", path.replace(
                   f"/checkpoints/{world.checkpoint.pk}", "/checkpoints/{checkpoint_id}")))
              for method, path, _ in _api_operations(
                  world, project="{project_id}", run="{run_id}", prompt="{prompt_id}", username="{username}")}
    assert not owned - listed, f"API operations on a project or a run that this test does not try: {owned - listed}"


@pytest.mark.parametrize("run_of", ["project_run", "member_run"])
def test_the_api_answers_an_outsider_as_for_a_project_or_run_that_does_not_exist(world, run_of):
    """The same status and words as for ids nobody has, and nothing written."""
    client = _api(world.outsider)
    run = getattr(world, run_of)
    before = _state(world)
    real = _api_operations(world, project=world.project.pk, run=run.pk, prompt=world.assignment.prompt_id)
    missing = _api_operations(world, project=999_999, run=999_999, prompt=999_999)
    for (method, path, body), (_, missing_path, missing_body) in zip(real, missing, strict=True):
        answer, nobody = _send(client, method, path, body), _send(client, method, missing_path, missing_body)
        assert answer.status_code == 404, (method, path, answer.status_code, answer.content[:200])
        said = answer.json()["detail"].replace(str(world.project.pk), "N").replace(str(run.pk), "N").replace(
            str(world.assignment.prompt_id), "N")
        assert said == nobody.json()["detail"].replace("999999", "N"), (method, path)
    assert _state(world) == before


def test_the_api_lists_and_launches_only_what_the_user_reaches(world):
    outsider = _api(world.outsider)
    assert outsider.get("/api/v1/projects").json()["items"] == []
    assert outsider.get("/api/v1/runs").json()["items"] == []
    assert world.checkpoint.path not in outsider.get("/api/v1/models").content.decode()
    for body in ({"kind": "dpo", "config": {}, "data_source": {"type": "project_pairs", "project_id": world.project.pk}},
                 {"kind": "external", "name": "x", "config": {}, "data_source": {"project_id": world.project.pk}}):
        refused = outsider.post("/api/v1/runs", json.dumps(body), content_type="application/json")
        assert refused.status_code == 422 and f"there is no project {world.project.pk}" in refused.json()["detail"]
    assert not Run.objects.filter(created_by=world.outsider).exists()
    admin = _api(world.admin)
    assert {run["id"] for run in admin.get("/api/v1/runs").json()["items"]} == {world.project_run.pk,
                                                                                world.member_run.pk}
    member = {run["id"] for run in _api(world.member).get("/api/v1/runs").json()["items"]}
    assert member == {world.project_run.pk, world.member_run.pk}


@pytest.mark.parametrize("who", ["owner", "member", "admin"])
def test_the_api_answers_its_owner_a_researcher_member_and_an_admin(world, who):
    client = _api(getattr(world, who))
    for method, path, _ in _api_operations(world, project=world.project.pk, run=world.project_run.pk,
                                           prompt=world.assignment.prompt_id):
        if method == "GET":
            assert client.get(path).status_code == 200, (who, path)


# Passwords --------------------------------------------------------------------------------------------------------


def test_an_annotators_password_is_reset_only_by_a_researcher_of_a_project_they_belong_to_or_an_admin(world):
    url = reverse("project_member_password_reset", args=[world.project.pk, world.annotator.pk])
    other = make_project(name="Oscar own", items=1, owner=world.outsider)
    through_own = reverse("project_member_password_reset", args=[other.pk, world.annotator.pk])
    outsider = _client_of(world.outsider)
    assert outsider.post(url).status_code == 404
    outsider.post(through_own)  # the annotator is no member of the outsider's project
    assert User.objects.get(pk=world.annotator.pk).check_password(ANNOTATOR_PASSWORD)
    for who in ("member", "admin"):
        assert _client_of(getattr(world, who)).post(url).status_code == 200
        assert not User.objects.get(pk=world.annotator.pk).check_password(ANNOTATOR_PASSWORD)


def test_another_teams_checkpoint_is_no_model_to_an_outsider(world):
    """By path or by name, to launch from, to register or to sample from: refused as an unknown model."""
    outsider = _api(world.outsider)
    for named in (world.checkpoint.path, world.checkpoint.name):
        launch = {"kind": "sft", "config": {"model": named}, "data_source": {"type": "arithmetic", "level": 1,
                                                                               "size": 8}}
        refused = outsider.post("/api/v1/runs", json.dumps(launch), content_type="application/json")
        assert refused.status_code == 422 and "is not a known model" in refused.json()["detail"], refused.content
        registered = outsider.post("/api/v1/models", json.dumps({"path": named}), content_type="application/json")
        assert registered.status_code == 422 and "is not a known model" in registered.json()["detail"]
        with pytest.raises(ValidationError, match="is not a known model"):
            annotation_services.model_path_check(named, user=world.outsider)
    with pytest.raises(ValidationError, match="is gone from disk"):  # found for a member: only its files are not here
        annotation_services.model_path_check(world.checkpoint.name, user=world.member)
    assert not Run.objects.filter(created_by=world.outsider).exists()
