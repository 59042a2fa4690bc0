"""In the browser: a researcher marks an item gold on its page; an annotator who answers it wrongly is paused and
sees why on the annotate page; the researcher releases them from the project page and they annotate again."""

import pytest

from tests.e2e.conftest import DEFAULT_TIMEOUT_MS, log_in
from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import selectors, services
from webapp.annotation.models import AnnotatorPause, GoldAnswer, Project, Ranking

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_mark_gold_pause_on_a_wrong_gold_answer_and_release(page, browser, live_server, researcher):
    (annotator,) = make_annotators(1)
    project = make_project(items=3, responses=3, members=[annotator], owner=researcher,
                           texts=[["Paris", "Lyon", "Nice"], ["4", "5", "22"], ["red", "blue", "green"]])
    Project.objects.filter(pk=project.pk).update(gold_onboarding=1, gold_min_answers=1, gold_min_accuracy=0.8)
    project.refresh_from_db()
    item = project.prompts.get(external_id="item-0")
    paris, lyon, nice = selectors.gold_responses(item)

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/items/{item.pk}/")
    assert page.locator("#gold-badge").count() == 0
    page.fill("#gold-order", "A > B > C")
    page.fill("#gold-explanation-input", "Paris is the capital.")
    page.click("#gold-submit")
    page.wait_for_selector("#gold-badge")
    assert page.inner_text("#gold-words") == "A > B > C"
    gold = GoldAnswer.objects.get(prompt=item)
    assert gold.tiers == [[paris], [lyon], [nice]] and gold.explanation == "Paris is the capital."
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    assert page.inner_text("#gold-count").startswith("1 · 1 first")

    # the annotator's first item is the gold one (onboarding); answered backwards, it pauses them
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    assert lease.prompt_id == item.pk
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[nice], [lyon], [paris]])
    pause = AnnotatorPause.objects.get(annotator=annotator, decision="pending")
    assert Ranking.objects.get(annotator=annotator).held_back

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    annotator_page = context.new_page()
    annotator_errors: list[str] = []
    annotator_page.on("pageerror", lambda error: annotator_errors.append(str(error)))
    log_in(annotator_page, live_server, annotator.username, "pw-long-enough-1")
    annotator_page.goto(f"{live_server.url}/annotate/")
    annotator_page.click(".paused-note a")
    annotator_page.wait_for_url(f"**/annotate/{project.pk}/")
    reason = annotator_page.inner_text("#pause-reason")
    assert reason == ("Why: accuracy on gold 0% (0 of 3 decisions on 1 gold item) is below the project's 80%.")
    assert "held back from training" in annotator_page.inner_text("#pause-decision")
    assert annotator_page.locator("#item-form").count() == 0 and annotator_page.locator("#back-button").count() == 0

    page.reload()
    row = page.locator(f"#pauses li[data-annotator={annotator.username}]")
    assert "accuracy on gold 0%" in row.inner_text()
    assert "paused" in page.inner_text(f"#progress tr[data-annotator={annotator.username}]")
    row.locator("button.pause-release").click()
    page.wait_for_selector(f"#pauses li[data-annotator={annotator.username}][data-decision=released]")
    pause.refresh_from_db()
    assert pause.decision == "released" and pause.decided_by == researcher
    assert not Ranking.objects.get(annotator=annotator).held_back

    annotator_page.reload()
    annotator_page.wait_for_selector("#item-form")
    assert "released you" in annotator_page.inner_text("#pause-released")
    context.close()
    assert page.js_errors == [] and annotator_errors == []
