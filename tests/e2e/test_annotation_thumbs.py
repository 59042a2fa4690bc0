"""Thumbs by keyboard alone: one response at a time, ↑/Y up and ↓/N down, ← back to a response of the item before it
is submitted, U undoing a thumb; the thumb on the last response submits. The ResponseLabel rows written are
checked."""

import pytest

from tests.e2e.annotating import open_annotation, wait_ranked
from tests.e2e.conftest import assert_no_problem
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Project, Ranking, ResponseLabel

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _shown(page) -> list[int]:
    return [int(value) for value in page.locator(".response").evaluate_all(
        "cards => cards.map(card => card.dataset.responseId)")]


def _visible(page) -> list[int]:
    return [int(value) for value in page.locator(".response:visible").evaluate_all(
        "cards => cards.map(card => card.dataset.responseId)")]


def test_two_items_thumbed_by_keys_alone(watched_page, live_server, annotator):
    page = watched_page  # every violation of the Content-Security-Policy and console error kept
    project = make_project(items=2, responses=3, members=[annotator], mode=Project.Mode.THUMBS)
    open_annotation(page, live_server, project)
    a, b, c = _shown(page)
    assert _visible(page) == [a] and page.inner_text("#thumb-position") == "Response 1 of 3"

    page.keyboard.press("ArrowUp")     # A up, on to B
    assert _visible(page) == [b] and page.inner_text("#thumb-position") == "Response 2 of 3"
    page.keyboard.press("n")           # B down, on to C
    page.keyboard.press("ArrowLeft")   # back to B: changed to up
    assert _visible(page) == [b] and "👎" in page.inner_text(f".response[data-response-id='{b}'] .thumb-mark")
    page.keyboard.press("y")
    assert _visible(page) == [c]
    page.keyboard.press("r")           # a rationale, then back to the response with Esc
    page.keyboard.type("C misses the point")
    page.keyboard.press("Escape")
    page.keyboard.press("ArrowDown")   # the last response's thumb submits the item
    wait_ranked(page, 1)

    first = Ranking.objects.get()
    assert first.tiers == [] and not first.all_bad and first.rationale == "C misses the point"
    assert set(ResponseLabel.objects.filter(ranking=first).values_list("response_id", "aspect", "value", "annotator")) == {
        (a, "", 1.0, annotator.pk), (b, "", 1.0, annotator.pk), (c, "", 0.0, annotator.pk)}
    assert not first.pairs.exists()

    # the next item: Enter before every response has its thumb is refused, naming what is missing
    page.wait_for_selector(".response:focus")
    a, b, c = _shown(page)
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    assert "Give every response a thumb first (B, C have none)" in page.inner_text("#item-error")
    page.keyboard.press("u")           # undo: A has no thumb again, and is shown
    assert _visible(page) == [a] and page.inner_text("#thumb-summary").split() == ["A", "·", "B", "·", "C", "·"]
    for _ in range(3):
        page.keyboard.press("ArrowDown")
    wait_ranked(page, 2)
    second = Ranking.objects.order_by("id").last()
    assert set(ResponseLabel.objects.filter(ranking=second).values_list("response_id", "value")) == {
        (a, 0.0), (b, 0.0), (c, 0.0)}
    assert ResponseLabel.objects.filter(project=project, prompt=second.prompt).count() == 3
    assert "Nothing left for you here" in page.inner_text("#annotate-item")
    page.keyboard.press("?")
    assert "thumb up for the response shown" in page.inner_text("#keys-dialog")
    assert page.js_errors == [] and page.http_errors == []
    assert_no_problem(page)
