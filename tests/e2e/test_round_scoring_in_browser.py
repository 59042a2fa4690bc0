"""Issue 29 in the browser: the Rounds card's form scores a round with a reward-model run; a real gpu worker
scores it, and the card, refreshing itself, shows the reward model's win rate beside the annotators'."""

import pytest

from tests.e2e.conftest import assert_no_problem, log_in
from tests.webapp.annotation.test_round_scoring import _ranked_rounds, _run, reward_checkpoint  # noqa: F401
from webapp.annotation import selectors
from webapp.annotation.models import Response, RewardScore, RoundScoring

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_scoring_a_round_from_the_rounds_card(
    watched_page, live_server, researcher, celery_worker_factory, reward_checkpoint,  # noqa: F811
):
    page = watched_page
    project, second = _ranked_rounds(researcher)
    sft = _run(researcher, kind="sft", checkpoint=reward_checkpoint)
    run = _run(researcher, checkpoint=reward_checkpoint)
    celery_worker_factory(queues=("gpu",), OMP_NUM_THREADS="1")

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    form = page.locator("#round-scoring-form")
    assert form.locator("select[name=reward_run] option").all_inner_texts() == [f"#{run.pk} {run.name}"]
    # a run that is not a reward model, posted as a program could: refused on the card, nothing queued
    form.locator("select[name=reward_run]").evaluate(
        f"select => {{ select.options[0].value = '{sft.pk}'; }}")
    with page.expect_response(lambda response: "/rounds/score/" in response.url) as answer:
        form.locator("button[type=submit]").click()
    assert answer.value.status == 422
    page.locator("#round-scoring-error").wait_for()
    assert "reward_run:" in page.locator("#round-scoring-error").inner_text()
    assert not RoundScoring.objects.exists()
    page.problems.clear()  # the browser logs the 422 it was answered, as it should
    page.http_errors.clear()

    page.reload()
    form.locator("select[name=round]").select_option(str(second.number))
    form.locator("select[name=reward_run]").select_option(str(run.pk))
    form.locator("button[type=submit]").click()
    cell = page.locator("#round-2 .rm-win-rate")
    page.wait_for_function("document.querySelector('#round-2 .rm-win-rate').innerText.includes('won')", timeout=90_000)
    scoring = RoundScoring.objects.get(round=second)
    assert scoring.status == RoundScoring.Status.SUCCEEDED and scoring.reward_run == run
    assert RewardScore.objects.filter(scoring=scoring).count() == Response.objects.filter(prompt__round=second).count()
    row = {row.round.number: row for row in selectors.round_rows(project)}[2]
    assert row.rm_win_rate.text in cell.inner_text() and f"run #{run.pk}" in cell.inner_text()
    assert_no_problem(page)
