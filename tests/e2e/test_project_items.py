"""A researcher browses a project's items: two annotators who disagree on the best response put the item under
"Disputed", and opening it shows both rankings side by side with the item's Kendall tau."""

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.selectors import responses_shown

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _rank(project, annotator, texts_best_first: list[str], rationale: str) -> None:
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    by_text = {response.text: response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator)}
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator, rationale=rationale, seconds_spent=7.5,
                            tiers=[[by_text[text]] for text in texts_best_first])


def test_a_disputed_item_side_by_side(page, live_server, researcher):
    ann0, ann1 = make_annotators(2)
    project = make_project(items=2, responses=3, overlap=2, members=[ann0, ann1],
                           texts=[["Paris", "Lyon", "Nice"], ["4", "5", "22"]], owner=researcher)
    # the queue hands each annotator the least-annotated item first: ann0 gets both, then ann1 both
    _rank(project, ann0, ["Paris", "Lyon", "Nice"], "the capital")
    _rank(project, ann0, ["4", "5", "22"], "")
    _rank(project, ann1, ["Lyon", "Paris", "Nice"], "I like Lyon")
    _rank(project, ann1, ["4", "22", "5"], "")  # same best response: not disputed

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.click("a.button:has-text('Items')")
    assert page.locator("#items tr[data-item]").count() == 2
    page.click(".status-tabs a[data-status=disputed]")
    page.wait_for_url("**status=disputed")
    rows = page.locator("#items tr[data-item]")
    assert rows.count() == 1 and "Question 0?" in rows.inner_text() and "disputed" in rows.inner_text()

    rows.locator("a").last.click()
    page.wait_for_selector("#answers")
    assert page.locator("#disputed-badge").is_visible()
    assert page.locator("th.annotator").all_inner_texts() == ["ann0", "ann1"]
    by_response = {row.locator("pre").inner_text(): row.locator("td.rank").all_inner_texts()
                   for row in page.locator("#answers tr[data-response]").all()}
    assert by_response == {"Paris": ["1", "2"], "Lyon": ["2", "1"], "Nice": ["3", "3"]}
    assert page.inner_text("#item-tau") == "0.333"  # (2 concordant - 1 discordant) / 3 pairs
    assert "the capital" in page.inner_text("tr.rationale") and "I like Lyon" in page.inner_text("tr.rationale")
    assert page.inner_text("tr.seconds").count(" s") == 2  # each one's time (capped by the lease's age)

    page.goto(f"{live_server.url}/projects/{project.pk}/items/")
    majority = page.locator("#annotators tr[data-username] td.majority").all_inner_texts()
    assert majority == ["0.667", "0.667"]  # each orders 4 of the 6 response pairs as the other does
    page.fill("input[name=q]", "Lyon")
    page.click("#items-filter button[type=submit]")
    page.wait_for_url("**q=Lyon**")
    assert page.locator("#items tr[data-item]").count() == 1
    assert page.js_errors == []
