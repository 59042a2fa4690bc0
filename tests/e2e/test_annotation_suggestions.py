"""Machine suggestions in the browser: shown marked as a machine's with agent and confidence, the controls left
empty, accepted with M (filled in and submitted); the rows written say the answer came from the suggestion. The
after-answer setting shows nothing before the answer and the suggestion beside it after. The guidelines come before
the first item, and Enter starts."""

import pytest

from tests.e2e.annotating import open_annotation, wait_ranked
from tests.e2e.conftest import assert_no_problem, log_in
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Assignment, Project, Prompt, Ranking, ResponseLabel, Suggestion
from webapp.annotation.selectors import responses_shown

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _shown(page) -> list[int]:
    return [int(value) for value in page.locator(".response").evaluate_all(
        "cards => cards.map(card => card.dataset.responseId)")]


def _first_item(project: Project) -> Prompt:
    return Prompt.objects.filter(project=project).order_by("id").first()


def _suggest_all(project: Project, annotator, value_of, **fields) -> dict[int, Suggestion]:
    """A suggestion for every item, its value made from the responses in the order `annotator` sees them."""
    rows = {}
    for prompt in Prompt.objects.filter(project=project):
        shown = [response.pk for response in responses_shown(prompt=prompt, annotator=annotator)]
        rows[prompt.pk] = Suggestion.objects.create(project=project, prompt=prompt, value=value_of(shown), **fields)
    return rows


def test_a_ranking_suggestion_accepted_with_m(watched_page, live_server, annotator):
    page = watched_page
    project = make_project(items=2, responses=3, members=[annotator])
    rows = _suggest_all(project, annotator, lambda shown: [[shown[2]], [shown[0]], [shown[1]]],
                        question="ranking", score=0.82, agent="judge SmolLM2")
    open_annotation(page, live_server, project)
    a, b, c = _shown(page)
    assert page.inner_text("#suggestion-source") == "Suggested by judge SmolLM2 · confidence 0.82"
    assert page.inner_text("#suggestion-text") == "C > A > B"
    assert page.inner_text(f".response[data-response-id='{c}'] .machine-mark") == "machine: rank 1"
    # marked, never filled in: the rank boxes stay empty until the annotator accepts
    assert page.locator(".rank-input").evaluate_all("boxes => boxes.map(box => box.value)") == ["", "", ""]
    page.keyboard.press("?")
    assert "accept the machine's suggestion" in page.inner_text("#keys-dialog")
    page.keyboard.press("Escape")

    page.keyboard.press("m")
    wait_ranked(page, 1)
    first = Ranking.objects.get()
    assert first.tiers == [[c], [a], [b]] and first.suggestion_id == rows[first.prompt_id].pk
    assert first.pairs.count() == 3

    # Back reopens the accepted answer as usual; changed (B and A swapped) and submitted, it has no origin
    page.keyboard.press("Backspace")
    page.wait_for_selector("#reopened-note")
    page.wait_for_function("document.getElementById('annotate-item')?.dataset.ready === '1'")
    assert page.locator(f".response[data-response-id='{a}'] .rank-input").input_value() == "2"
    page.locator(f".response[data-response-id='{b}']").focus()
    page.keyboard.press("2")
    page.locator(f".response[data-response-id='{a}']").focus()
    page.keyboard.press("3")
    page.keyboard.press("Enter")
    wait_ranked(page, 1)
    page.wait_for_selector("#reopened-note", state="detached")
    page.wait_for_function("document.getElementById('annotate-item')?.dataset.ready === '1'")
    first.refresh_from_db()
    assert first.tiers == [[c], [b], [a]] and first.suggestion_id is None

    # the next item: answered by the annotator's own ranks, not the suggestion's, so no origin
    a, b, c = _shown(page)
    for card, rank in ((a, "1"), (b, "2"), (c, "3")):
        page.locator(f".response[data-response-id='{card}']").focus()
        page.keyboard.press(rank)
    page.keyboard.press("Enter")
    wait_ranked(page, 2)
    second = Ranking.objects.order_by("id").last()
    assert second.tiers == [[a], [b], [c]] and second.suggestion_id is None
    assert_no_problem(page)


def test_thumbs_suggested_per_response_accepted_with_m(watched_page, live_server, annotator):
    page = watched_page
    project = make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.THUMBS)
    prompt = _first_item(project)
    shown = [response.pk for response in responses_shown(prompt=prompt, annotator=annotator)]
    rows = {response: Suggestion.objects.create(project=project, prompt=prompt, response_id=response,
                                                question="thumb", value=value, score=score,
                                                agent="reward model run #12")
            for response, value, score in zip(shown, (1, 0), (0.93, 0.64), strict=True)}
    open_annotation(page, live_server, project)
    assert page.inner_text("#suggestion-source") == "Suggested by reward model run #12 · confidence 0.64"
    assert page.inner_text("#suggestion-text") == "A 👍; B 👎"
    assert page.locator(".thumb-input").evaluate_all("boxes => boxes.map(box => box.value)") == ["", ""]

    page.keyboard.press("m")
    wait_ranked(page, 1)
    labels = {label.response_id: (label.value, label.suggestion_id) for label in ResponseLabel.objects.all()}
    assert labels == {shown[0]: (1.0, rows[shown[0]].pk), shown[1]: (0.0, rows[shown[1]].pk)}
    assert Ranking.objects.get().suggestion_id is not None
    assert_no_problem(page)


def test_after_answer_shows_the_suggestion_beside_the_answer_only_after(watched_page, live_server, annotator):
    page = watched_page
    project = make_project(items=2, responses=2, members=[annotator], mode=Project.Mode.PAIRWISE)
    Project.objects.filter(pk=project.pk).update(suggestions_display=Project.SuggestionDisplay.AFTER_ANSWER)
    _suggest_all(project, annotator, lambda shown: [[shown[1]], [shown[0]]], question="ranking", score=0.71,
                 agent="judge SmolLM2")
    open_annotation(page, live_server, project)
    assert page.locator("#suggestion, .machine-mark, #suggestion-after").count() == 0
    page.keyboard.press("m")  # the key does nothing here: no suggestion is shown to accept
    page.wait_for_timeout(300)
    assert not Ranking.objects.exists()

    page.keyboard.press("a")
    wait_ranked(page, 1)
    assert " ".join(page.inner_text("#suggestion-after").split()) == (
        "Last item: you answered A is better; MACHINE judge SmolLM2 suggested B is better (confidence 0.71).")
    assert page.locator("#suggestion, .machine-mark").count() == 0  # the new item's suggestion still hidden
    assert Ranking.objects.get().suggestion_id is None
    assert_no_problem(page)


def test_guidelines_first_then_enter_starts(watched_page, live_server, annotator):
    page = watched_page
    project = make_project(items=1, responses=2, members=[annotator], guidelines="# Be *kind*\n\nPrefer **correct** answers.")
    log_in(page, live_server, "abel", "abel-password-1")
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    page.wait_for_selector("#start-button:focus")
    assert "Prefer correct answers." in page.inner_text("#guidelines-first")
    assert page.locator(".response").count() == 0 and not Assignment.objects.exists()
    page.keyboard.press("Enter")
    page.wait_for_selector(".response:focus")
    assert Assignment.objects.count() == 1
    page.keyboard.press("g")  # still one key away
    assert page.locator("#guidelines-dialog[open]").count() == 1
    assert "Prefer correct answers." in page.inner_text("#guidelines-dialog")
    assert_no_problem(page)
