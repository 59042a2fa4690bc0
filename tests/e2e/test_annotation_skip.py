"""Skip skips, whatever the ranks say: one skipped Ranking without tiers, no pairs, the assignment skipped."""

import pytest

from tests.e2e.annotating import open_annotation
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Assignment, PreferencePair, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _open_first_item(page, live_server, project) -> str:
    open_annotation(page, live_server, project)
    return page.get_attribute("#item-form", "data-assignment")


def _rank_every_response(page) -> None:
    for rank in ("1", "2", "3"):
        page.keyboard.press(rank)
    assert all(page.locator(".rank-input").evaluate_all("inputs => inputs.map(input => input.value)"))


def _wait_for_next_item(page, assignment_id: str) -> None:
    page.wait_for_function(
        f"document.getElementById('item-form')?.dataset.assignment !== '{assignment_id}'"
        " && document.querySelector('.response:focus') !== null"
    )


def _assert_skipped_only(assignment_id: str) -> None:
    assignment = Assignment.objects.get(pk=int(assignment_id))
    ranking = Ranking.objects.get()
    assert ranking.assignment_id == assignment.pk
    assert ranking.skipped and ranking.tiers == [] and not ranking.all_bad
    assert not PreferencePair.objects.filter(prompt=assignment.prompt).exists()
    assert assignment.status == Assignment.Status.SKIPPED
    assert assignment.prompt.ranking_count == 0


def test_s_on_a_fully_ranked_item_skips_it(page, live_server, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    assignment_id = _open_first_item(page, live_server, project)
    _rank_every_response(page)
    page.keyboard.press("s")
    _wait_for_next_item(page, assignment_id)
    _assert_skipped_only(assignment_id)
    assert page.inner_text("#ranked-count") == "0"
    assert page.js_errors == []


def test_skip_button_on_a_fully_ranked_item_skips_it(page, live_server, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    assignment_id = _open_first_item(page, live_server, project)
    _rank_every_response(page)
    page.click("#skip-button")
    _wait_for_next_item(page, assignment_id)
    _assert_skipped_only(assignment_id)
    assert page.js_errors == []


def test_s_on_an_unranked_item_skips_it(page, live_server, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    assignment_id = _open_first_item(page, live_server, project)
    page.keyboard.press("s")
    _wait_for_next_item(page, assignment_id)
    _assert_skipped_only(assignment_id)
    assert page.inner_text("#item-error") == ""
    assert page.js_errors == []
