"""Back to the previous item (Backspace): the answer is withdrawn (its Ranking and pairs deleted), the item comes
back with that answer filled in, and a new answer replaces it; meanwhile nobody else gets the item."""

import pytest

from tests.e2e.annotating import open_annotation, wait_ranked
from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, PreferencePair, Project, Prompt, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _shown(page) -> tuple[str, list[int]]:
    page.wait_for_selector(".response:focus")
    ids = page.locator(".response").evaluate_all("cards => cards.map(card => Number(card.dataset.responseId))")
    return page.get_attribute("#item-form", "data-assignment"), ids


def test_pairwise_a_then_back_then_b(page, live_server, annotator):
    (other,) = make_annotators(1)
    project = make_project(items=2, responses=2, members=[annotator, other], mode=Project.Mode.PAIRWISE)
    open_annotation(page, live_server, project)
    first_assignment, (a_id, b_id) = _shown(page)
    page.keyboard.press("a")
    wait_ranked(page, 1)
    assert PreferencePair.objects.get().chosen_id == a_id
    next_assignment, _ = _shown(page)
    assert next_assignment != first_assignment

    page.keyboard.press("Backspace")
    wait_ranked(page, 0)
    assert page.get_attribute("#item-form", "data-assignment") == first_assignment
    assert page.get_attribute(".choice.selected", "data-choice") == "a"
    assert page.is_visible("#reopened-note")
    assert not Ranking.objects.exists() and not PreferencePair.objects.exists()
    assignment = Assignment.objects.get(pk=int(first_assignment))
    assert assignment.status == Assignment.Status.LEASED and assignment.prompt.ranking_count == 0
    # both items are held by abel: the queue gives the other annotator nothing beyond the overlap
    assert services.assignment_lease_next(project=project, annotator=other) is None

    page.keyboard.press("b")
    wait_ranked(page, 1)
    ranking = Ranking.objects.get()
    assert ranking.assignment_id == int(first_assignment) and ranking.tiers == [[b_id], [a_id]]
    pair = PreferencePair.objects.get()
    assert (pair.chosen_id, pair.rejected_id) == (b_id, a_id)
    # and the item abel was on before going back comes next
    assert _shown(page)[0] == next_assignment
    assert page.js_errors == []


def test_ranking_back_shows_the_ranks_and_a_new_ranking_replaces_the_old(page, live_server, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    open_annotation(page, live_server, project)
    first_assignment, (c0, c1, c2) = _shown(page)
    for key in ("1", "3", "2"):
        page.keyboard.press(key)
    page.keyboard.press("r")
    page.keyboard.type("first is right")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    wait_ranked(page, 1)
    assert Ranking.objects.get().tiers == [[c0], [c2], [c1]]
    assert PreferencePair.objects.count() == 3

    # Backspace inside a rank box only deletes what is typed there
    page.locator(".rank-input").first.focus()
    page.keyboard.press("Backspace")
    assert page.get_attribute("#item-form", "data-assignment") != first_assignment
    assert Ranking.objects.count() == 1

    page.locator(".response").first.focus()
    page.keyboard.press("Backspace")
    wait_ranked(page, 0)
    assert page.get_attribute("#item-form", "data-assignment") == first_assignment
    ranks = page.locator(".rank-input").evaluate_all("inputs => inputs.map(input => input.value)")
    assert ranks == ["1", "3", "2"]
    assert page.input_value("textarea[name=rationale]") == "first is right"
    assert not Ranking.objects.exists() and not PreferencePair.objects.exists()
    assert Prompt.objects.get(assignments__pk=int(first_assignment)).ranking_count == 0

    page.locator(".response").first.focus()
    page.keyboard.press("2")
    page.locator(".response").nth(2).focus()
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    wait_ranked(page, 1)
    ranking = Ranking.objects.get()
    assert ranking.tiers == [[c2], [c0], [c1]] and ranking.rationale == "first is right"
    assert PreferencePair.objects.filter(ranking=ranking).count() == 3
    assert Assignment.objects.get(pk=int(first_assignment)).status == Assignment.Status.SUBMITTED
    assert page.js_errors == []


def test_back_from_the_last_item_and_after_a_skip(page, live_server, annotator):
    project = make_project(items=1, responses=3, members=[annotator])
    open_annotation(page, live_server, project)
    assignment, _ = _shown(page)
    page.keyboard.press("s")
    page.wait_for_selector("#annotate-item[data-ready] >> text=Nothing left for you here")
    assert Ranking.objects.get().skipped
    page.keyboard.press("Backspace")
    page.wait_for_selector("#item-form")
    assert page.get_attribute("#item-form", "data-assignment") == assignment
    assert "you had skipped it" in page.inner_text("#reopened-note")
    assert not Ranking.objects.exists()
    assert Assignment.objects.get(pk=int(assignment)).status == Assignment.Status.LEASED
    assert page.js_errors == []
