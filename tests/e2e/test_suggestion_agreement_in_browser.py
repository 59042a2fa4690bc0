"""Issue 32, point 2, in the browser: the project page's card measures each suggestion source against the
annotators (the figures worked by hand in tests/webapp/annotation/test_suggestion_agreement.py), and refreshes
itself when a source's suggestions arrive, under the page's Content-Security-Policy."""

import pytest

from tests.e2e.conftest import assert_no_problem, log_in
from tests.webapp.annotation.test_suggestion_agreement import JUDGE, RM, make_measured_project
from webapp.annotation.models import Prompt, Suggestion

# slow: the page test (test_suggestion_agreement.py, Django client) checks the card's figures and the SmolLM2 loop
# (test_real_model_loop.py) reads the card in Chromium; this one adds its live refresh (39 s)
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_suggestions_card_shows_each_source_and_refreshes_itself(watched_page, live_server, researcher):
    page = watched_page
    project = make_measured_project(owner=researcher)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")

    rm = page.locator(f'#suggestion-agreement tr[data-agent="{RM}"]')
    assert rm.locator(".accuracy").inner_text() == "79 % (52–92 %) of 14 pairs (11 of 14)"
    assert rm.locator(".tied").inner_text() == "2" and rm.locator(".tau").inner_text() == "0.730 over 5 answers"
    judge = page.locator(f'#suggestion-agreement tr[data-agent="{JUDGE}"]')
    assert "position bias 100 % (6 of 6 comparisons decided by the order)" in judge.inner_text()

    # a new source: its one suggestion on Question 1? orders it as ann1 does (3 of 3) and ann0's d>e, d>f (2 of 2)
    prompt = Prompt.objects.get(project=project, text="Question 1?")
    ids = dict(prompt.responses.values_list("text", "pk"))
    Suggestion.objects.create(project=project, prompt=prompt, question="ranking", agent="late source",
                              value=[[ids["e"]], [ids["d"]], [ids["f"]]])
    late = page.locator('#suggestion-agreement tr[data-agent="late source"] .accuracy')
    late.wait_for(timeout=20_000)
    assert late.inner_text().startswith("80 % (38–96 %) of 5 pairs (4 of 5)")
    assert_no_problem(page)
