"""An annotator ranks three items with the keyboard only; the rankings are in the database."""

import pytest

from tests.e2e.annotating import wait_ranked
from tests.e2e.conftest import log_in
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_three_items_ranked_by_keyboard_alone(page, live_server, annotator):
    project = make_project(items=3, responses=3, members=[annotator])
    log_in(page, live_server, "abel", "abel-password-1")
    page.goto(f"{live_server.url}/annotate/{project.pk}/")

    # Enter on the untouched default order is refused
    page.wait_for_selector(".response:focus")
    page.keyboard.press("Enter")
    assert "Rank every response first" in page.inner_text("#item-error")
    # a rank, then undo
    page.keyboard.press("1")
    assert page.locator(".rank-input").first.input_value() == "1"
    page.keyboard.press("u")
    assert page.locator(".rank-input").first.input_value() == ""

    for done in range(1, 4):
        page.wait_for_selector(".response:focus")
        letters = page.locator(".response").evaluate_all("cards => cards.map(card => card.dataset.responseId)")
        page.keyboard.press("1")  # first response best, then focus jumps to the next unranked one
        page.keyboard.press("3")
        page.keyboard.press("2")
        page.keyboard.press("Enter")
        wait_ranked(page, done)
        ranking = Ranking.objects.order_by("-id").first()
        assert ranking.tiers == [[int(letters[0])], [int(letters[2])], [int(letters[1])]]
        assert ranking.seconds_spent >= 0

    assert "Nothing left for you here" in page.inner_text("#annotate-item")
    assert Ranking.objects.filter(annotator=annotator, skipped=False).count() == 3
    assert set(Ranking.objects.values_list("prompt__project", flat=True)) == {project.pk}
    page.keyboard.press("?")
    assert page.locator("#keys-dialog").is_visible()
    assert page.js_errors == []
