"""A pairwise item answered "tie" with one key; the next item comes without a page load."""

import pytest

from tests.e2e.annotating import wait_ranked
from tests.e2e.conftest import log_in
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Project, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# counts the times a response got focus while htmx had not yet bound its item's form
COUNT_UNBOUND_FOCUS = """
window.__unboundFocus = 0;
document.addEventListener("focusin", (event) => {
  const form = event.target.closest?.(".response") && document.getElementById("item-form");
  if (form && !form["htmx-internal-data"]?.initHash) window.__unboundFocus += 1;
}, true);
"""


def test_tie_then_a_better_by_keys(page, live_server, annotator):
    project = make_project(items=2, responses=2, members=[annotator], mode=Project.Mode.PAIRWISE)
    log_in(page, live_server, "abel", "abel-password-1")
    # a key works as soon as a response has focus, so htmx must have bound the form by then (else the form
    # submits natively, with a page load)
    page.add_init_script(COUNT_UNBOUND_FOCUS)
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    page.wait_for_selector(".response:focus")
    page.evaluate("window.__sameDocument = true")
    page.keyboard.press("t")
    wait_ranked(page, 1)
    first = Ranking.objects.get()
    assert len(first.tiers) == 1 and len(first.tiers[0]) == 2 and not first.all_bad
    assert not first.pairs.exists()

    page.wait_for_selector(".response:focus")
    a_id = int(page.locator(".response").first.get_attribute("data-response-id"))
    page.keyboard.press("a")
    wait_ranked(page, 2)
    second = Ranking.objects.order_by("id").last()
    assert second.tiers[0] == [a_id]
    assert second.pairs.get().chosen_id == a_id
    assert page.evaluate("window.__sameDocument") is True  # htmx swapped fragments; the page never reloaded
    assert page.evaluate("window.__unboundFocus") == 0
    assert page.js_errors == []
