"""API projects: create (rows), list in pages, one project with its progress and agreement as the project page
computes them, members in and out."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.accounts.roles import is_annotator
from webapp.accounts.services import user_create
from webapp.annotation import selectors, services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Project

pytestmark = pytest.mark.django_db


def test_create_a_project(api):
    response = api.post("/projects", {"name": "Helpfulness", "guidelines": "Prefer *correct*", "mode": "pairwise",
                                      "responses_per_item": 2, "annotators_per_item": 3, "lease_minutes": 10})
    assert response.status_code == 201
    project = Project.objects.get()
    assert (project.name, project.guidelines, project.mode) == ("Helpfulness", "Prefer *correct*", "pairwise")
    assert (project.responses_per_item, project.annotators_per_item, project.lease_minutes) == (2, 3, 10)
    body = response.json()
    assert body["id"] == project.pk and body["name"] == "Helpfulness" and body["mode"] == "pairwise"
    assert set(body) == {"id", "name", "mode", "guidelines", "responses_per_item", "annotators_per_item",
                         "rating_aspects", "rating_min", "rating_max", "created_at"}


def test_create_a_ratings_project_with_its_aspects_and_scale(api):
    response = api.post("/projects", {"name": "Rated", "mode": "ratings", "rating_min": 0, "rating_max": 9,
                                      "rating_aspects": [{"name": "honesty", "description": "Only true things?"},
                                                         {"name": "style"}]})
    assert response.status_code == 201
    project = Project.objects.get()
    assert (project.mode, project.rating_min, project.rating_max) == ("ratings", 0, 9)
    assert project.rating_aspects == response.json()["rating_aspects"] == [
        {"name": "honesty", "description": "Only true things?"}, {"name": "style", "description": ""}]
    for body, message in (({"rating_min": 4, "rating_max": 2}, "rating_max: the highest rating (2) must be above"),
                          ({"rating_aspects": [{"name": "a"}, {"name": "a"}]}, "rating_aspects: aspect 2: 'a' is named")):
        refused = api.post("/projects", {"name": "Other", "mode": "ratings", **body})
        assert refused.status_code == 422 and refused.json()["detail"].startswith(message)
    assert Project.objects.count() == 1


def test_defaults_are_the_forms(api):
    assert api.post("/projects", {"name": "Plain"}).status_code == 201
    project = Project.objects.get()
    assert (project.mode, project.responses_per_item, project.annotators_per_item, project.lease_minutes) == (
        "ranking", 4, 1, 30)


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"),
    ({"name": "  "}, "name"),
    ({"name": "x\u0000y"}, "name"),
    ({"name": "x" * 201}, "name"),
    ({"name": "ok", "mode": "likert"}, "mode"),
    ({"name": "ok", "responses_per_item": 1}, "responses_per_item"),
    ({"name": "ok", "annotators_per_item": 0}, "annotators_per_item"),
    ({"name": "ok", "lease_minutes": 0}, "lease_minutes"),
    ({"name": "ok", "lease_minutes": 40000}, "lease_minutes"),
    ({"name": "ok", "guidelines": "\u0000"}, "guidelines"),
    ({"name": "ok", "rating_max": 11}, "rating_max"),
    ({"name": "ok", "rating_aspects": [{"name": " "}]}, "rating_aspects"),
])
def test_refused_values_name_their_field_and_write_nothing(api, body, field):
    response = api.post("/projects", body)
    assert response.status_code == 422
    assert response.json()["detail"].startswith(f"{field}: ")
    assert not Project.objects.exists()


def test_a_taken_name_is_a_conflict(api):
    assert api.post("/projects", {"name": "Same"}).status_code == 201
    response = api.post("/projects", {"name": "Same"})
    assert response.status_code == 409 and "Same" in response.json()["detail"]
    assert Project.objects.count() == 1


def test_a_form_body_is_refused_not_failed(api):
    response = api.client.post("/api/v1/projects", {"name": "form"}, headers={"Authorization": f"Bearer {api.token}"})
    assert response.status_code == 415 and "application/json" in response.json()["detail"]
    assert not Project.objects.exists()


def test_projects_come_in_pages(api, researcher):
    for index in range(5):
        services.project_create(name=f"p{index}", owner=researcher)
    first = api.get("/projects", {"limit": 2}).json()
    assert first["count"] == 5 and first["next"] == 2 and [p["name"] for p in first["items"]] == ["p4", "p3"]
    second = api.get("/projects", {"limit": 2, "offset": 2}).json()
    assert second["next"] == 4 and [p["name"] for p in second["items"]] == ["p2", "p1"]
    last = api.get("/projects", {"limit": 2, "offset": 4}).json()
    assert last["next"] is None and [p["name"] for p in last["items"]] == ["p0"]
    assert api.get("/projects", {"limit": 1001}).status_code == 422
    assert api.get("/projects", {"offset": -1}).status_code == 422
    assert len(api.get("/projects").json()["items"]) == 5


def test_a_project_with_its_progress_and_agreement(api, researcher):
    first, second = make_annotators(2)
    project = make_project(items=1, responses=3, overlap=2, members=[first, second], owner=researcher)
    for annotator, reverse in ((first, False), (second, True)):
        lease = services.assignment_lease_next(project=project, annotator=annotator)
        ids = sorted(response.pk for response in lease.prompt.responses.all())
        tiers = [[response] for response in (reversed(ids) if reverse else ids)]
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=tiers, seconds_spent=4.0)
    services.prompts_import(project=project, records=[ImportRecord(line=1, external_id="later", text="Later?",
                                                                   responses=("a", "b"))])

    body = api.get(f"/projects/{project.pk}").json()
    progress = selectors.project_progress(project)
    assert body["id"] == project.pk and body["name"] == project.name
    assert body["progress"] == {"items": 2, "done": 1, "remaining": 1, "in_progress": 0, "rankings": 2,
                                "wanted": 4, "percent": 50}
    agreement = body["agreement"]
    assert agreement["shared_items"] == 1
    assert agreement["kendall_tau"] == pytest.approx(progress.tau) and progress.tau == pytest.approx(-1.0)
    assert agreement["pairwise_agreement"] == pytest.approx(progress.pairwise_agreement)
    assert agreement["krippendorff_alpha"] == pytest.approx(progress.alpha)
    assert [row["username"] for row in agreement["annotators"]] == ["ann0", "ann1"]
    assert agreement["annotators"][0] == {"username": "ann0", "rankings": 1, "skips": 0, "all_bad": 0,
                                          "median_seconds": progress.annotators[0].median_seconds,
                                          "agreement_with_majority": progress.annotators[0].agreement_with_majority}
    assert api.get("/projects/999999").status_code == 404


def test_members_in_and_out(api, annotator, researcher):
    project = make_project(items=1, members=[annotator], owner=researcher)
    assert api.get(f"/projects/{project.pk}/members").json() == [{"username": "abel", "role": "annotator"}]

    newcomer = User.objects.create_user(username="nina", password="pw-long-enough-1")  # no role yet
    response = api.post(f"/projects/{project.pk}/members", {"username": "nina"})
    assert response.status_code == 201 and response.json() == {"username": "nina", "role": "annotator"}
    assert set(project.members.values_list("username", flat=True)) == {"abel", "nina"} and is_annotator(newcomer)

    assert api.post(f"/projects/{project.pk}/members", {"username": "nobody"}).status_code == 404
    gone, _ = user_create(username="gone", role="annotator")
    gone.is_active = False
    gone.save()
    response = api.post(f"/projects/{project.pk}/members", {"username": "gone"})
    assert response.status_code == 409 and "deactivated" in response.json()["detail"]
    assert not project.members.filter(username="gone").exists()

    assert api.delete(f"/projects/{project.pk}/members/abel").status_code == 204
    assert list(project.members.values_list("username", flat=True)) == ["nina"]
    assert api.delete(f"/projects/{project.pk}/members/abel").status_code == 404
    assert api.get("/projects/999999/members").status_code == 404
