"""Responses added through the API are a round: successive calls naming one model join its round, a prompt
already answered gets a new item beside the compared response, and prompts out name each response's round."""

import pytest

from tests.webapp.annotation.factories import make_annotators
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Project, Prompt, Round

pytestmark = pytest.mark.django_db


def test_api_responses_are_a_round_and_prompts_out_name_it(api, researcher):
    project = services.project_create(name="API rounds", mode=Project.Mode.PAIRWISE, responses_per_item=2,
                                      owner=researcher)
    services.prompts_import(project=project, records=[ImportRecord(line=1, external_id="q", text="Q?")])
    prompt = Prompt.objects.get()
    first = api.post(f"/prompts/{prompt.pk}/responses", {"texts": ["a", "b"], "model": "base"})
    assert first.status_code == 201 and {row["round"] for row in first.json()} == {1}
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    ids = sorted(prompt.responses.values_list("pk", flat=True))
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[ids[1]], [ids[0]]])

    second = api.post(f"/prompts/{prompt.pk}/responses", {"texts": ["c"], "model": "tuned"})
    assert second.status_code == 201
    (added,) = second.json()
    item = Prompt.objects.get(pk=added["prompt"])
    assert added["round"] == 2 and item.external_id == "q · round 2" and item.origin == prompt
    assert [r.text for r in item.responses.order_by("id")] == ["b", "c"]  # the ranked best of round 1, then new
    assert prompt.responses.count() == 2
    rounds = list(Round.objects.filter(project=project).values_list("number", "source", "model"))
    assert rounds == [(1, "api", "base"), (2, "api", "tuned")]

    listed = {row["external_id"]: row for row in api.get(f"/projects/{project.pk}/prompts").json()["items"]}
    assert [(r["round"], r["model"]) for r in listed["q · round 2"]["responses"]] == [(1, "base"), (2, "tuned")]
