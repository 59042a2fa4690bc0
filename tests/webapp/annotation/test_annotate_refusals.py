"""A refused answer leaves what the annotator entered: htmx gets only the message, aimed at the item's error box;
without htmx the item comes back with the posted answer filled in."""

import pytest

from tests.webapp.annotation.factories import make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, Ranking
from webapp.annotation.selectors import responses_shown

pytestmark = pytest.mark.django_db


def _partial_ranks(project, annotator):
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    first, second, _ = responses_shown(prompt=lease.prompt, annotator=annotator)
    return lease, {f"rank_{first.pk}": "2", f"rank_{second.pk}": "1", "rationale": "close call <b>"}


def test_htmx_refusal_is_retargeted_to_the_error_box_and_swaps_nothing_else(annotator_client, annotator):
    project = make_project(items=1, responses=3, members=[annotator])
    lease, posted = _partial_ranks(project, annotator)
    response = annotator_client.post(f"/annotate/items/{lease.pk}/submit/", posted, HTTP_HX_REQUEST="true")
    assert response["HX-Retarget"] == "#item-error" and response["HX-Reswap"] == "innerHTML"
    assert response.content.decode() == "rank every response: 1 not ranked"
    assert not Ranking.objects.exists()


def test_refusal_without_htmx_shows_the_item_with_the_posted_answer(annotator_client, annotator):
    project = make_project(items=1, responses=3, members=[annotator])
    lease, posted = _partial_ranks(project, annotator)
    page = annotator_client.post(f"/annotate/items/{lease.pk}/submit/", posted).content.decode()
    assert "rank every response: 1 not ranked" in page
    for key, value in posted.items():
        if key.startswith("rank_"):
            assert f'name="{key}" value="{value}"' in page
    assert "close call &lt;b&gt;</textarea>" in page


def test_back_with_nothing_to_go_back_to_says_so(annotator_client, annotator):
    project = make_project(items=1, responses=3, members=[annotator])
    response = annotator_client.post(f"/annotate/{project.pk}/back/", HTTP_HX_REQUEST="true")
    assert response["HX-Retarget"] == "#item-error"
    assert "Nothing to go back to" in response.content.decode() and "30 minutes" in response.content.decode()


def test_a_second_back_sent_before_the_first_ones_page_reopens_nothing_more(annotator_client, annotator):
    project = make_project(items=2, responses=2, members=[annotator])
    for _ in range(2):
        lease = services.assignment_lease_next(project=project, annotator=annotator)
        services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
    earlier, latest = Ranking.objects.order_by("id")
    first = annotator_client.post(f"/annotate/{project.pk}/back/", {"answer": latest.pk}, HTTP_HX_REQUEST="true")
    assert "HX-Retarget" not in first and Ranking.objects.count() == 2
    assert Assignment.objects.get(pk=latest.assignment_id).status == Assignment.Status.LEASED
    again = annotator_client.post(f"/annotate/{project.pk}/back/", {"answer": latest.pk}, HTTP_HX_REQUEST="true")
    assert again["HX-Retarget"] == "#item-error" and "already reopened" in again.content.decode()
    assert Ranking.objects.count() == 2
    assert Assignment.objects.get(pk=earlier.assignment_id).status == Assignment.Status.SKIPPED
