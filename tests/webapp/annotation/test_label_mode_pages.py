"""The thumbs and ratings modes on the pages and the API: the project form takes the mode, aspects and scale (and
refuses bad ones naming the field), the project page shows the aspects, the annotate page posts labels and puts a
reopened answer back, the item page shows the labels, and the API's ranking endpoint takes labels."""

import pytest
from django.test import Client

from tests.webapp.annotation.factories import make_project
from tests.webapp.api.conftest import ApiClient
from webapp.accounts.services import api_token_create
from webapp.annotation import services
from webapp.annotation.models import Project, Ranking, ResponseLabel
from webapp.annotation.selectors import responses_shown

pytestmark = pytest.mark.django_db

FORM = {"name": "Rated", "mode": "ratings", "guidelines": "", "responses_per_item": 2, "annotators_per_item": 1,
        "lease_minutes": 30, "rating_min": 1, "rating_max": 5,
        "rating_aspects": "helpfulness: Does it answer?\n\nhonesty: Is it true?\n"}


def test_a_ratings_project_made_with_the_form_shows_its_aspects(researcher_client):
    answer = researcher_client.post("/projects/new/", FORM)
    project = Project.objects.get(name="Rated")
    assert answer.status_code == 302 and project.mode == "ratings"
    assert project.rating_aspects == [{"name": "helpfulness", "description": "Does it answer?"},
                                      {"name": "honesty", "description": "Is it true?"}]
    page = researcher_client.get(f"/projects/{project.pk}/").content.decode()
    assert "<strong>honesty</strong>: Is it true?" in page and "1 (worst) to 5 (best)" in page
    edit = researcher_client.get(f"/projects/{project.pk}/edit/").content.decode()
    assert "helpfulness: Does it answer?\nhonesty: Is it true?</textarea>" in edit
    assert '<option value="thumbs"' in edit


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"rating_min": 5, "rating_max": 3}, "rating_max", "The highest rating (3) must be above the lowest (5)."),
    ({"rating_min": 1, "rating_max": 12}, "rating_max", "A scale lies within 0..10"),
    ({"rating_aspects": "a: one\na: two"}, "rating_aspects", "aspect 2: 'a' is named twice"),
    ({"rating_aspects": "ok\n: no name"}, "rating_aspects", "Line 2: an aspect needs a name"),
])
def test_the_form_refuses_a_bad_scale_or_aspects_naming_the_field(researcher_client, changes, field, message):
    answer = researcher_client.post("/projects/new/", {**FORM, **changes})
    assert answer.status_code == 200 and not Project.objects.exists()
    assert any(message in error for error in answer.context["form"].errors[field])


def test_the_annotate_page_posts_thumbs_and_shows_a_reopened_answer(annotator_client, annotator):
    project = make_project(items=2, responses=2, members=[annotator], mode=Project.Mode.THUMBS)
    page = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert "annotation/modes/thumbs.js" in page and 'class="thumb-input"' in page and "Response <strong" in page
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    a, b = (response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator))
    refused = annotator_client.post(f"/annotate/items/{lease.pk}/submit/", {f"thumb_{a}": "up"}, HTTP_HX_REQUEST="true")
    assert refused.content.decode() == "give every response a thumb up or down: B has none"
    annotator_client.post(f"/annotate/items/{lease.pk}/submit/", {f"thumb_{a}": "up", f"thumb_{b}": "down"})
    ranking = Ranking.objects.get()
    assert set(ResponseLabel.objects.values_list("response_id", "value")) == {(a, 1.0), (b, 0.0)}
    back = annotator_client.post(f"/annotate/{project.pk}/back/", {"answer": ranking.pk}).content.decode()
    assert f'name="thumb_{a}" value="up"' in back and f'name="thumb_{b}" value="down"' in back


def test_the_annotate_page_posts_ratings_and_the_item_page_shows_them(annotator_client, annotator, researcher):
    researcher_client = Client()
    researcher_client.force_login(researcher)
    project = make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.RATINGS, owner=researcher)
    page = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert "How good the response is, all things considered." in page  # the default aspect, described
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    a, b = (response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator))
    refused = annotator_client.post(f"/annotate/items/{lease.pk}/submit/", {f"rating_{a}_overall": "4"})
    assert "rate every response on every aspect: B overall not rated" in refused.content.decode()
    assert f'name="rating_{a}_overall" value="4"' in refused.content.decode()  # kept as entered
    annotator_client.post(f"/annotate/items/{lease.pk}/submit/", {f"rating_{a}_overall": "4", f"rating_{b}_overall": "2"})
    assert set(ResponseLabel.objects.values_list("response_id", "aspect", "value")) == {(a, "overall", 4.0),
                                                                                        (b, "overall", 2.0)}
    item = researcher_client.get(f"/projects/{project.pk}/items/{lease.prompt_id}/").content.decode()
    assert 'data-mark="overall 4"' in item and 'data-mark="overall 2"' in item
    assert researcher_client.get(f"/projects/{project.pk}/items/").status_code == 200
    rows = researcher_client.get(f"/projects/{project.pk}/export/rankings.jsonl/")
    assert b'"aspect": "overall"' in b"".join(rows.streaming_content)


def test_the_api_takes_labels_in_a_labels_mode_and_says_what_to_send(annotator, client):
    api = ApiClient(client, api_token_create(user=annotator, name="tests")[1])
    project = make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.THUMBS)
    prompt = project.prompts.get()
    a, b = (response.pk for response in responses_shown(prompt=prompt, annotator=annotator))
    ranking = api.post(f"/items/{prompt.pk}/ranking", {"ranking": [a, b]})
    assert ranking.status_code == 422 and "this project's mode is thumbs; send labels" in ranking.json()["detail"]
    partial = api.post(f"/items/{prompt.pk}/ranking", {"labels": [{"response": a, "value": 1}]})
    assert partial.status_code == 422 and "B has none" in partial.json()["detail"]
    body = {"labels": [{"response": a, "value": 1}, {"response": b, "value": 0}], "rationale": "b is off"}
    first = api.post(f"/items/{prompt.pk}/ranking", body)
    assert first.status_code == 200 and first.json()["changed"] is True and first.json()["tiers"] == []
    assert sorted((label["response"], label["value"]) for label in first.json()["labels"]) == sorted([(a, 1.0), (b, 0.0)])
    again = api.post(f"/items/{prompt.pk}/ranking", body)
    assert again.json()["changed"] is False and ResponseLabel.objects.count() == 2
    items = api.get(f"/projects/{project.pk}/items").json()["items"]
    assert len(items[0]["answer"]["labels"]) == 2

    ranked = make_project(items=1, responses=2, members=[annotator], name="Ranked")
    refused = api.post(f"/items/{ranked.prompts.get().pk}/ranking", body)
    assert refused.status_code == 422 and "mode is ranking; send a ranking, not labels" in refused.json()["detail"]


def test_a_project_with_answers_keeps_a_mode_that_reads_them(researcher_client, researcher, annotator):
    project = make_project(items=1, responses=2, members=[annotator], owner=researcher)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                            tiers=[[r.pk] for r in responses_shown(prompt=lease.prompt, annotator=annotator)])
    form = {**FORM, "name": project.name, "mode": "thumbs"}
    refused = researcher_client.post(f"/projects/{project.pk}/edit/", form)
    assert refused.status_code == 200 and Project.objects.get().mode == "ranking"
    assert refused.context["form"].errors["mode"] == [
        "The project holds 1 answer in the ranking mode, which the thumbs mode cannot read; make a new project for it."]
    assert researcher_client.post(f"/projects/{project.pk}/edit/", {**form, "mode": "pairwise"}).status_code == 302
    assert Project.objects.get().mode == "pairwise"  # tiers both: pairwise reads a ranking's answers
