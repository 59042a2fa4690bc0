"""A researcher adjudicates in the browser (issue 32): the project page links the queue with its count, the queue
shows every annotator's answer side by side, lowest agreement first; taking one annotator's answer with a reason
writes the Adjudication row and the item leaves the queue for the decided list. A decision without a reason is
refused by the page (the browser asks for one) and by the server (no row)."""

import pytest

from tests.e2e.conftest import assert_no_problem, log_in
from tests.webapp.annotation.adjudication_fixtures import QUEUE, make_adjudication_project
from webapp.annotation.models import Adjudication, Prompt, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_researcher_decides_an_item_of_the_queue(watched_page, live_server, researcher):
    page = watched_page
    project = make_adjudication_project(owner=researcher)
    first, second, third = (Prompt.objects.get(project=project, text=text) for text in QUEUE)

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    assert page.inner_text("#adjudication-link") == "Adjudication (3)"
    page.click("#adjudication-link")
    page.wait_for_selector("#queue-heading")
    items = page.locator("section[id^=queued-]")
    assert [int(item.get_attribute("data-prompt")) for item in items.all()] == [first.pk, second.pk, third.pk]
    assert items.first.locator(".item-agreement").inner_text() == "0.333"
    assert items.first.locator("th.annotator").all_inner_texts() == ["ann0", "ann1", "ann2"]
    assert "ann1 on Question 2?" in items.first.locator("tr.rationale").inner_text()

    item = page.locator(f"#queued-{first.pk}")
    ann1 = Ranking.objects.get(prompt=first, annotator__username="ann1")
    item.locator(f"input[value=ranking-{ann1.pk}]").check()
    item.locator("button[type=submit]").click()  # no reason: the browser refuses to send it
    assert Adjudication.objects.count() == 0
    item.locator("textarea[name=reason]").fill("ann1 read the question right")
    item.locator("button[type=submit]").click()
    page.wait_for_selector(f"#decided-{first.pk}")

    decision = Adjudication.objects.get()
    assert (decision.prompt_id, decision.tiers, decision.reason, decision.decided_by.username) == (
        first.pk, ann1.tiers, "ann1 read the question right", "rita")
    assert [int(item.get_attribute("data-prompt")) for item in page.locator("section[id^=queued-]").all()] == [
        second.pk, third.pk]
    decided = page.locator(f"#decided-{first.pk}")
    assert decided.locator(".decision-reason").inner_text() == "ann1 read the question right"
    assert decided.locator(".decision-words").inner_text() == "R3 > R2 > R1"  # z > y > x
    assert "decided" in page.inner_text(".messages")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    assert page.inner_text("#adjudication-link") == "Adjudication (2)"
    assert_no_problem(page)
