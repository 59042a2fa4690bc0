"""Ratings by keyboard alone: a digit rates the focused box (a response's aspect) and moves on to the next box;
Enter submits once all are rated and is refused, naming the boxes, before. The ResponseLabel rows written are
checked, aspect by aspect."""

import pytest

from tests.e2e.annotating import wait_ranked
from tests.e2e.conftest import assert_no_problem, log_in
from tests.webapp.annotation.factories import make_project
from webapp.annotation import services
from webapp.annotation.models import Project, Ranking, ResponseLabel

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ASPECTS = [{"name": "helpfulness", "description": "Does it answer the question?"},
           {"name": "honesty", "description": "Does it say only what is true?"}]


def test_an_item_rated_on_two_aspects_by_keys_alone(watched_page, live_server, annotator):
    page = watched_page  # every violation of the Content-Security-Policy and console error kept
    project = make_project(items=2, responses=2, members=[annotator], mode=Project.Mode.RATINGS)
    services.project_update(project=project, members=[annotator], rating_aspects=ASPECTS, rating_min=1, rating_max=10)
    log_in(page, live_server, "abel", "abel-password-1")
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    page.wait_for_selector(".rating-input:focus")
    assert "Does it say only what is true?" in page.inner_text("#rating-legend")
    a, b = (int(value) for value in page.locator(".response").evaluate_all(
        "cards => cards.map(card => card.dataset.responseId)"))

    page.keyboard.press("4")   # A helpfulness, then the focus is on A honesty
    page.keyboard.press("0")   # A honesty: 0 gives 10 on a 1-10 scale
    page.keyboard.press("Enter")
    assert "Rate every response on every aspect first (B helpfulness, B honesty not rated)" in page.inner_text("#item-error")
    page.keyboard.press("7")   # B helpfulness
    page.keyboard.press("ArrowUp")  # back to it: changed to 2
    page.keyboard.press("2")
    page.keyboard.press("9")   # B honesty
    page.keyboard.press("Enter")
    wait_ranked(page, 1)

    ranking = Ranking.objects.get()
    assert ranking.tiers == [] and not ranking.pairs.exists()
    assert set(ResponseLabel.objects.filter(ranking=ranking).values_list("response_id", "aspect", "value", "annotator")) == {
        (a, "helpfulness", 4.0, annotator.pk), (a, "honesty", 10.0, annotator.pk),
        (b, "helpfulness", 2.0, annotator.pk), (b, "honesty", 9.0, annotator.pk)}
    page.keyboard.press("?")
    assert "rate the focused box" in page.inner_text("#keys-dialog")
    assert page.js_errors == [] and page.http_errors == []
    assert_no_problem(page)
