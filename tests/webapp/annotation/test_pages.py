"""The pages: researchers manage projects; annotators rank through the htmx flow and see only their own work."""

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Project, Ranking
from webapp.annotation.selectors import responses_shown

pytestmark = pytest.mark.django_db


def test_researcher_creates_a_project_and_sees_progress(researcher_client, annotator):
    response = researcher_client.post("/projects/new/", {
        "name": "Helpfulness", "mode": "ranking", "guidelines": "# Be *kind*", "responses_per_item": 3,
        "annotators_per_item": 2, "lease_minutes": 20, "members": [annotator.pk],
    })
    project = Project.objects.get(name="Helpfulness")
    assert response.status_code == 302 and list(project.members.all()) == [annotator]
    page = researcher_client.get(f"/projects/{project.pk}/").content.decode()
    assert "<h1>Be <em>kind</em></h1>" in page and "Kendall" in page
    fragment = researcher_client.get(f"/projects/{project.pk}/progress/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<section class="card" id="progress"')


def test_annotator_ranks_through_htmx_and_advances_to_the_next_item(annotator_client, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    page = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert "Question" in page and 'data-mode="ranking"' in page
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    shown = responses_shown(prompt=lease.prompt, annotator=annotator)
    untouched = annotator_client.post(f"/annotate/items/{lease.pk}/submit/", {"seconds": "2"}, HTTP_HX_REQUEST="true")
    assert "rank every response" in untouched.content.decode() and Ranking.objects.count() == 0
    ranks = {f"rank_{r.pk}": str(i + 1) for i, r in enumerate(shown)}
    ranks[f"rank_{shown[2].pk}"] = "2"  # a tie between the 2nd and 3rd
    after = annotator_client.post(f"/annotate/items/{lease.pk}/submit/", {**ranks, "seconds": "4.5", "rationale": "ok"},
                                  HTTP_HX_REQUEST="true").content.decode()
    ranking = Ranking.objects.get()
    assert ranking.tiers == [[shown[0].pk], sorted([shown[1].pk, shown[2].pk])]
    assert 0 <= ranking.seconds_spent <= 4.5 and ranking.rationale == "ok"
    assert "Question" in after and f"/annotate/items/{lease.pk}/" not in after  # the next item came back


def test_pairwise_tie_and_both_bad(annotator_client, annotator):
    project = make_project(items=2, responses=2, members=[annotator], mode=Project.Mode.PAIRWISE)
    shown = []
    for choice in ("tie", "both_bad"):
        lease = services.assignment_lease_next(project=project, annotator=annotator)
        a, b = responses_shown(prompt=lease.prompt, annotator=annotator)
        shown.append(sorted([a.pk, b.pk]))
        annotator_client.post(f"/annotate/items/{lease.pk}/submit/",
                              {"response_a": a.pk, "response_b": b.pk, "choice": choice}, HTTP_HX_REQUEST="true")
    tie, bad = Ranking.objects.order_by("id")
    assert [sorted(tier) for tier in tie.tiers] == [shown[0]]
    assert not tie.all_bad and bad.all_bad and not tie.pairs.exists()


def test_annotators_see_only_their_projects_and_their_own_progress(annotator_client, annotator):
    (other,) = make_annotators(1)
    mine = make_project(name="Mine", members=[annotator, other], overlap=2)
    make_project(name="Not mine", members=[other])
    lease = services.assignment_lease_next(project=mine, annotator=other)
    services.ranking_submit(assignment_id=lease.pk, annotator=other,
                            tiers=[[r.pk] for r in responses_shown(prompt=lease.prompt, annotator=other)])
    page = annotator_client.get("/annotate/").content.decode()
    assert "Mine" in page and "Not mine" not in page and "ann0" not in page
    # a project not theirs is answered as one that does not exist, as for researchers (test_project_ownership.py)
    assert annotator_client.get(f"/annotate/{Project.objects.get(name='Not mine').pk}/").status_code == 404
    assert annotator_client.get(f"/projects/{mine.pk}/").status_code == 403
    assert annotator_client.get(f"/projects/{mine.pk}/export/rankings.jsonl/").status_code == 403


def test_model_paths_outside_the_model_roots_are_refused(researcher_client, researcher, settings, tmp_path):
    settings.MODEL_ROOTS = [tmp_path / "models"]
    project = make_project(owner=researcher)
    response = researcher_client.post(f"/projects/{project.pk}/sample/", {
        "model_path": "/etc", "responses_per_prompt": 2, "max_new_tokens": 8, "temperature": 1, "top_p": 1, "seed": 0,
    }, HTTP_HX_REQUEST="true")
    assert "outside the allowed model roots" in response.content.decode()
    assert services.model_path_check("org/model-name") == "org/model-name"
    with pytest.raises(ValidationError, match="is not a known model; give a registered model"):
        services.model_path_check("not a model!")
