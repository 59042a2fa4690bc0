"""The Submit button: a mouse click sends a complete ranking (and refuses an incomplete one), and its Enter hint
is readable on the button's accent background."""

import pytest

from tests.e2e.annotating import open_annotation, wait_ranked
from tests.e2e.conftest import log_in
from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Project, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# WCAG contrast ratio between a kbd's text and what is behind it (its own background, or the button's when
# the kbd's is transparent)
KBD_CONTRAST = """kbd => {
  const rgba = (text) => text.match(/[\\d.]+/g).map(Number);
  const luminance = ([r, g, b]) => {
    const channel = (value) => { const c = value / 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  };
  const own = rgba(getComputedStyle(kbd).backgroundColor);
  const background = own.length === 4 && own[3] === 0 ? rgba(getComputedStyle(kbd.parentElement).backgroundColor) : own;
  const [light, dark] = [luminance(rgba(getComputedStyle(kbd).color)), luminance(background)].sort((a, b) => b - a);
  return (light + 0.05) / (dark + 0.05);
}"""


def test_clicking_submit_sends_a_complete_ranking_and_refuses_an_incomplete_one(page, live_server, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    open_annotation(page, live_server, project)
    page.keyboard.press("2")
    page.click("#submit-ranking")
    assert "not ranked" in page.inner_text("#item-error")
    assert not Ranking.objects.exists()
    page.locator(".response").nth(1).focus()
    page.keyboard.press("1")
    page.keyboard.press("3")
    page.click("#submit-ranking")
    wait_ranked(page, 1)
    ranking = Ranking.objects.get()
    assert not ranking.skipped and not ranking.all_bad and len(ranking.tiers) == 3
    assert ranking.pairs.count() == 3
    assert page.js_errors == []


def test_the_enter_hint_on_submit_and_a_chosen_answer_is_readable(page, live_server, annotator):
    ranking = make_project(items=1, responses=2, members=[annotator], name="Ranked")
    pairwise = make_project(items=1, responses=2, members=[annotator], name="Paired", mode=Project.Mode.PAIRWISE)
    log_in(page, live_server, "abel", "abel-password-1")
    page.goto(f"{live_server.url}/annotate/{ranking.pk}/")
    assert page.locator("#submit-ranking kbd").evaluate(KBD_CONTRAST) >= 4.5
    page.goto(f"{live_server.url}/annotate/{pairwise.pk}/")
    page.evaluate("document.querySelector('.choice[data-choice=a]').classList.add('selected')")
    assert page.locator(".choice.selected kbd").evaluate(KBD_CONTRAST) >= 4.5
