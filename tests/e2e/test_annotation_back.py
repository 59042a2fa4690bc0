"""Back to the previous item (Backspace): the item comes back with its answer filled in (ties and rationale too, also
after a reload), the answer stays stored (its Ranking and pairs) until a new answer or a skip replaces it, and
meanwhile nobody else gets the item."""

import pytest

from tests.e2e.annotating import open_annotation, wait_ranked
from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, PreferencePair, Project, Prompt, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _wait_for_item(page, assignment: str, *, reopened: bool) -> None:
    """Wait until the item of `assignment` is shown and set up, with the note of a reopened answer or without."""
    page.wait_for_function(
        f"document.getElementById('item-form')?.dataset.assignment === '{assignment}'"
        " && document.getElementById('annotate-item').dataset.ready === '1'"
        f" && !!document.getElementById('reopened-note') === {str(reopened).lower()}"
    )


def _wait_for_next_item(page, assignment: str) -> None:
    page.wait_for_function(
        f"document.getElementById('item-form')?.dataset.assignment !== '{assignment}'"
        " && document.getElementById('annotate-item').dataset.ready === '1'"
    )


def _ranks(page) -> list[str]:
    return page.locator(".rank-input").evaluate_all("inputs => inputs.map(input => input.value)")


def _rank_with_keys(page, keys: tuple[str, ...], rationale: str = "") -> None:
    """Type the ranks (each key ranks the focused response; the focus then goes to the next unranked one)."""
    page.locator(".response").first.focus()
    for key in keys:
        page.keyboard.press(key)
    if rationale:
        page.keyboard.press("r")
        page.keyboard.type(rationale)
        page.keyboard.press("Escape")
    page.keyboard.press("Enter")


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
    _wait_for_item(page, first_assignment, reopened=True)
    assert page.get_attribute(".choice.selected", "data-choice") == "a"
    assert page.inner_text("#ranked-count") == "1"  # the answer is kept until replaced
    assert Ranking.objects.get().tiers == [[a_id], [b_id]] and PreferencePair.objects.get().chosen_id == a_id
    assignment = Assignment.objects.get(pk=int(first_assignment))
    assert assignment.status == Assignment.Status.LEASED and assignment.prompt.ranking_count == 1
    # both items are held by abel: the queue gives the other annotator nothing beyond the overlap
    assert services.assignment_lease_next(project=project, annotator=other) is None

    page.keyboard.press("b")
    _wait_for_item(page, next_assignment, reopened=False)
    wait_ranked(page, 1)
    ranking = Ranking.objects.get()
    assert ranking.assignment_id == int(first_assignment) and ranking.tiers == [[b_id], [a_id]]
    pair = PreferencePair.objects.get()
    assert (pair.chosen_id, pair.rejected_id) == (b_id, a_id)
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

    second_assignment = page.get_attribute("#item-form", "data-assignment")
    page.locator(".response").first.focus()
    page.keyboard.press("Backspace")
    _wait_for_item(page, first_assignment, reopened=True)
    assert _ranks(page) == ["1", "3", "2"]
    assert page.input_value("textarea[name=rationale]") == "first is right"
    first = Ranking.objects.get()
    assert first.tiers == [[c0], [c2], [c1]] and PreferencePair.objects.filter(ranking=first).count() == 3
    assert Prompt.objects.get(assignments__pk=int(first_assignment)).ranking_count == 1

    page.locator(".response").first.focus()
    page.keyboard.press("2")
    page.locator(".response").nth(2).focus()
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    _wait_for_item(page, second_assignment, reopened=False)
    ranking = Ranking.objects.get()
    assert ranking.pk == first.pk
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
    _wait_for_item(page, assignment, reopened=True)
    assert "you had skipped it" in page.inner_text("#reopened-note")
    assert Ranking.objects.get().skipped
    assert Assignment.objects.get(pk=int(assignment)).status == Assignment.Status.LEASED
    assert page.js_errors == []


def test_back_then_reload_shows_the_ranking_with_its_tie_and_rationale(page, live_server, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    open_annotation(page, live_server, project)
    first_assignment, (c0, c1, c2) = _shown(page)
    _rank_with_keys(page, ("1", "1", "2"), rationale="A and B are as good")
    wait_ranked(page, 1)

    page.keyboard.press("Backspace")
    _wait_for_item(page, first_assignment, reopened=True)
    page.reload()  # or a stray Backspace, then the page opened again
    _wait_for_item(page, first_assignment, reopened=True)

    assert _ranks(page) == ["1", "1", "2"]
    assert page.input_value("textarea[name=rationale]") == "A and B are as good"
    assert page.inner_text("#ranked-count") == "1"
    ranking = Ranking.objects.get()
    assert ranking.tiers == [sorted([c0, c1]), [c2]] and ranking.rationale == "A and B are as good"
    assert PreferencePair.objects.filter(ranking=ranking).count() == 2
    assert page.js_errors == []


def test_back_twice_then_closing_the_tab_keeps_both_answers(page, live_server, annotator):
    project = make_project(items=3, responses=3, members=[annotator])
    open_annotation(page, live_server, project)
    first_assignment, (a0, a1, a2) = _shown(page)
    _rank_with_keys(page, ("1", "2", "3"), rationale="in order")
    wait_ranked(page, 1)
    second_assignment, (b0, b1, b2) = _shown(page)
    _rank_with_keys(page, ("2", "1", "1"), rationale="B and C tie")
    wait_ranked(page, 2)

    page.keyboard.press("Backspace")
    _wait_for_item(page, second_assignment, reopened=True)
    assert _ranks(page) == ["2", "1", "1"]
    page.keyboard.press("Backspace")
    _wait_for_item(page, first_assignment, reopened=True)
    assert _ranks(page) == ["1", "2", "3"]
    page.close()

    answers = {ranking.assignment_id: ranking for ranking in Ranking.objects.all()}
    assert set(answers) == {int(first_assignment), int(second_assignment)}
    first, second = answers[int(first_assignment)], answers[int(second_assignment)]
    assert (first.tiers, first.rationale) == ([[a0], [a1], [a2]], "in order")
    assert (second.tiers, second.rationale) == ([sorted([b1, b2]), [b0]], "B and C tie")
    assert PreferencePair.objects.filter(ranking=first).count() == 3
    assert PreferencePair.objects.filter(ranking=second).count() == 2
    assert Prompt.objects.filter(ranking_count=1).count() == 2
    assert page.js_errors == []


def test_skip_on_a_reopened_item_replaces_its_ranking(page, live_server, annotator):
    (other,) = make_annotators(1)
    project = make_project(items=2, responses=3, members=[annotator, other])
    open_annotation(page, live_server, project)
    first_assignment, _ = _shown(page)
    _rank_with_keys(page, ("1", "2", "3"), rationale="in order")
    wait_ranked(page, 1)
    second_assignment, _ = _shown(page)

    page.keyboard.press("Backspace")
    _wait_for_item(page, first_assignment, reopened=True)
    page.keyboard.press("s")
    _wait_for_item(page, second_assignment, reopened=False)
    wait_ranked(page, 0)

    ranking = Ranking.objects.get()
    assert ranking.assignment_id == int(first_assignment)
    assert ranking.skipped and ranking.tiers == [] and ranking.rationale == ""
    assert not PreferencePair.objects.exists()
    assert Assignment.objects.get(pk=int(first_assignment)).status == Assignment.Status.SKIPPED
    # the skipped item is free for someone else
    skipped_prompt = Assignment.objects.get(pk=int(first_assignment)).prompt_id
    assert services.assignment_lease_next(project=project, annotator=other).prompt_id == skipped_prompt
    assert page.js_errors == []
