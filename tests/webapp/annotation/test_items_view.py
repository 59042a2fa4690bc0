"""The items view: filter by status (disputed = answers that do not name the same best response), search the
text, page through, open one item to see every annotator's answer side by side with the item's agreement."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment
from webapp.annotation.selectors import item_detail, project_items, responses_shown

pytestmark = pytest.mark.django_db


def _answer(project, item: int, annotator, order: list[str] | None, *, all_bad: bool = False, skip: bool = False,
            rationale: str = ""):
    """Item `item` answered: responses ranked in the order of their texts' suffixes ('0', '1', ...).

    The lease is made for that item (the queue would hand out the least-annotated one instead)."""
    now = timezone.now()
    lease = Assignment.objects.create(prompt=project.prompts.get(external_id=f"item-{item}"), annotator=annotator,
                                      leased_at=now, expires_at=now + timedelta(minutes=30))
    if skip:
        return services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
    by_suffix = {r.text.rsplit("-", 1)[1]: r.pk for r in responses_shown(prompt=lease.prompt, annotator=annotator)}
    tiers = [[by_suffix[suffix]] for suffix in order] if order else []
    return services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=tiers, all_bad=all_bad,
                                   rationale=rationale, seconds_spent=3)


@pytest.fixture
def answered(researcher):
    """Item 0: ann0 and ann1 disagree on the best. Item 1: they agree. Item 2: ann0 all bad, ann1 ranks.
    Item 3: ann0 skips. Item 4: nobody yet. The researcher's project."""
    ann0, ann1 = make_annotators(2)
    project = make_project(items=5, responses=3, overlap=2, members=[ann0, ann1], owner=researcher)
    _answer(project, 0, ann0, ["0", "1", "2"], rationale="0 is right")
    _answer(project, 0, ann1, ["1", "0", "2"], rationale="1 is clearer")
    _answer(project, 1, ann0, ["0", "1", "2"])
    _answer(project, 1, ann1, ["0", "2", "1"])
    _answer(project, 2, ann0, None, all_bad=True)
    _answer(project, 2, ann1, ["2", "1", "0"])
    _answer(project, 3, ann0, None, skip=True)
    return project


def _ids(project, **filters) -> list[str]:
    return [item.external_id for item in project_items(project=project, **filters)]


def test_statuses(answered):
    assert _ids(answered) == [f"item-{index}" for index in range(5)]
    assert _ids(answered, status="unranked") == ["item-3", "item-4"]
    assert _ids(answered, status="ranked") == ["item-0", "item-1", "item-2"]
    assert _ids(answered, status="skipped") == ["item-3"]
    assert _ids(answered, status="all_bad") == ["item-2"]
    assert _ids(answered, status="disputed") == ["item-0", "item-2"]


def test_search_reads_prompts_and_responses_and_the_annotator_filter(answered):
    assert _ids(answered, search="question 3") == ["item-3"]
    assert _ids(answered, search="ANSWER 4-2") == ["item-4"]
    assert _ids(answered, annotator="ann1") == ["item-0", "item-1", "item-2"]
    assert _ids(answered, status="disputed", search="Question 2") == ["item-2"]


def test_an_item_side_by_side(answered, researcher_client):
    item = answered.prompts.get(external_id="item-0")
    detail = item_detail(prompt=item)
    assert [answer.username for answer in detail.answers] == ["ann0", "ann1"]
    assert [ranks for _, ranks in detail.rows] == [[1, 2], [2, 1], [3, 3]]
    assert detail.tau == pytest.approx(1 / 3) and detail.disputed
    page = researcher_client.get(f"/projects/{answered.pk}/items/{item.pk}/").content.decode()
    assert 'id="item-tau">0.333<' in page and "0 is right" in page and "1 is clearer" in page
    all_bad = item_detail(prompt=answered.prompts.get(external_id="item-2"))
    assert all_bad.answers[0].all_bad and [ranks[0] for _, ranks in all_bad.rows] == [None, None, None]
    skipped = researcher_client.get(f"/projects/{answered.pk}/items/{answered.prompts.get(external_id='item-3').pk}/")
    assert "skipped" in skipped.content.decode()


def test_the_list_pages_and_marks_disputed_items(answered, researcher, researcher_client):
    page = researcher_client.get(f"/projects/{answered.pk}/items/", {"status": "disputed"}).content.decode()
    assert page.count('class="badge disputed"') == 2 and "2 items" in page
    other = make_project(name="Big", items=30, responses=2, owner=researcher)
    first = researcher_client.get(f"/projects/{other.pk}/items/", {"q": "Question"}).content.decode()
    assert "page 1 of 2" in first and "q=Question&amp;status=all&amp;page=2" in first
    second = researcher_client.get(f"/projects/{other.pk}/items/", {"q": "Question", "page": 2}).content.decode()
    assert second.count("<tr data-item=") == 5
    nothing = researcher_client.get(f"/projects/{answered.pk}/items/", {"q": "zebra"}).content.decode()
    assert "No item matches" in nothing and "zebra" in nothing
