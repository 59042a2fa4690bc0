"""Drag and Shift+↑/↓ in ranking mode move one response up or down the ranking typed so far: the other typed ranks
and ties stay, and what is submitted is that ranking (checked in the database)."""

import pytest

from tests.e2e.annotating import open_annotation, wait_ranked
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import PreferencePair, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _ids(page) -> list[int]:
    """The responses' ids in the order the page shows them."""
    return page.locator(".response").evaluate_all("cards => cards.map(card => Number(card.dataset.responseId))")


def _ranks(page) -> dict[int, str]:
    return dict(zip(_ids(page), page.locator(".rank-input").evaluate_all("inputs => inputs.map(i => i.value)"),
                    strict=True))


def _type_ranks(page, ranks: list[str]) -> None:
    for index, rank in enumerate(ranks):
        page.locator(".response").nth(index).focus()
        page.keyboard.press(rank)


def _submit(page) -> None:
    page.locator(".response").first.focus()
    page.keyboard.press("Enter")
    wait_ranked(page, 1)


def test_drag_to_the_top_keeps_the_other_typed_ranks(page, live_server, annotator):
    project = make_project(items=2, responses=4, members=[annotator])
    open_annotation(page, live_server, project)
    a, b, c, d = _ids(page)
    _type_ranks(page, ["4", "3", "2", "1"])  # D1 C2 B3 A4

    cards = page.locator(".response")
    cards.nth(3).drag_to(cards.nth(0), target_position={"x": 40, "y": 4})  # D dragged above A, to the top

    assert _ranks(page) == {d: "1", c: "2", b: "3", a: "4"}
    assert _ids(page) == [d, c, b, a]  # shown in rank order from then on
    _submit(page)
    assert Ranking.objects.get().tiers == [[d], [c], [b], [a]]
    assert PreferencePair.objects.count() == 6
    assert page.js_errors == []


def test_drag_keeps_a_typed_tie_and_undo_brings_the_typed_ranks_back(page, live_server, annotator):
    project = make_project(items=2, responses=4, members=[annotator])
    open_annotation(page, live_server, project)
    a, b, c, d = _ids(page)
    _type_ranks(page, ["2", "2", "3", "1"])  # D1, A = B 2, C3

    cards = page.locator(".response")
    cards.nth(2).drag_to(cards.nth(0), target_position={"x": 40, "y": 4})  # C to the top

    assert _ranks(page) == {c: "1", d: "2", a: "3", b: "3"}
    page.keyboard.press("u")
    assert _ranks(page) == {a: "2", b: "2", c: "3", d: "1"}
    assert _ids(page) == [a, b, c, d]
    cards.nth(2).drag_to(cards.nth(0), target_position={"x": 40, "y": 4})
    _submit(page)
    assert Ranking.objects.get().tiers == [[c], [d], sorted([a, b])]
    assert PreferencePair.objects.count() == 5  # the tie gives no pair
    assert page.js_errors == []


def test_shift_arrows_keep_the_typed_ranks_and_ties(page, live_server, annotator):
    project = make_project(items=2, responses=4, members=[annotator])
    open_annotation(page, live_server, project)
    a, b, c, d = _ids(page)
    _type_ranks(page, ["1", "1", "2", "3"])  # A = B 1, C2, D3

    page.locator(".response").nth(3).focus()
    page.keyboard.press("Shift+ArrowUp")  # D above C; the tie stays
    assert _ranks(page) == {a: "1", b: "1", d: "2", c: "3"}
    assert page.evaluate("document.activeElement.dataset.responseId") == str(d)
    page.keyboard.press("Shift+ArrowUp")  # D above the tie
    assert _ranks(page) == {d: "1", a: "2", b: "2", c: "3"}
    page.keyboard.press("Shift+ArrowUp")  # first already: nothing moves
    assert _ranks(page) == {d: "1", a: "2", b: "2", c: "3"}
    page.keyboard.press("Shift+ArrowDown")  # back below the tie
    assert _ranks(page) == {a: "1", b: "1", d: "2", c: "3"}
    assert _ids(page) == [a, b, d, c]

    _submit(page)
    assert Ranking.objects.get().tiers == [sorted([a, b]), [d], [c]]
    assert PreferencePair.objects.count() == 5
    assert page.js_errors == []


def test_shift_arrow_on_a_tied_response_takes_it_out_of_the_tie(page, live_server, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    open_annotation(page, live_server, project)
    a, b, c = _ids(page)
    _type_ranks(page, ["1", "1", "2"])

    page.locator(".response").nth(1).focus()
    page.keyboard.press("Shift+ArrowUp")  # B leaves the tie, just above A
    assert _ranks(page) == {b: "1", a: "2", c: "3"}
    _submit(page)
    assert Ranking.objects.get().tiers == [[b], [a], [c]]
    assert page.js_errors == []


def test_moves_on_nothing_typed_rank_by_the_order_shown(page, live_server, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    open_annotation(page, live_server, project)
    a, b, c = _ids(page)
    page.locator(".response").nth(2).focus()
    page.keyboard.press("Shift+ArrowUp")
    assert _ranks(page) == {a: "1", c: "2", b: "3"}
    _submit(page)
    assert Ranking.objects.get().tiers == [[a], [c], [b]]
    assert page.js_errors == []
