"""Issue 32 in the browser: the Rounds card starts a suggestion job for round 2 with a reward-model run; canceled
while queued, resumed, then run by a real gpu worker; the card, refreshing itself, follows it to the end, and every
item of the round holds one suggestion of the run."""

import pytest

from tests.e2e.conftest import assert_no_problem, log_in
from tests.webapp.annotation.test_round_scoring import _ranked_rounds, _run, reward_checkpoint  # noqa: F401
from webapp.annotation.models import Prompt, Suggestion, SuggestionJob

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_suggestion_job_started_canceled_and_resumed_from_the_rounds_card(
    watched_page, live_server, researcher, celery_worker_factory, reward_checkpoint,  # noqa: F811
):
    page = watched_page
    project, second = _ranked_rounds(researcher)
    run = _run(researcher, checkpoint=reward_checkpoint)

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    form = page.locator("#suggestion-job-form")
    # a judge with no model: refused on the card, naming the field, nothing queued
    form.locator("select[name=source]").select_option("judge")
    with page.expect_response(lambda response: "/suggestions/" in response.url) as answer:
        form.locator("button[type=submit]").click()
    assert answer.value.status == 422
    page.locator("#suggestion-job-error").wait_for()
    assert "judge_model: give the judge model" in page.locator("#suggestion-job-error").inner_text()
    assert not SuggestionJob.objects.exists()
    page.problems.clear()  # the browser logs the 422 it was answered, as it should
    page.http_errors.clear()

    # queued with no gpu worker listening: canceled at once by its Cancel button
    form.locator("select[name=round]").select_option(str(second.number))
    form.locator("select[name=source]").select_option("reward_model")
    form.locator("select[name=reward_run]").select_option(str(run.pk))
    form.locator("button[type=submit]").click()
    job_row = page.locator(".suggestion-job").first
    job_row.locator(".suggestion-cancel").click()
    page.wait_for_function("document.querySelector('.suggestion-job .suggestion-status').innerText.includes('canceled')")
    job = SuggestionJob.objects.get()
    assert (job.status, job.round, job.reward_run, job.agent) == ("canceled", second, run, f"reward model run #{run.pk}")

    celery_worker_factory(queues=("gpu",), OMP_NUM_THREADS="1")
    job_row.locator(".suggestion-resume").click()
    page.wait_for_function("document.querySelector('.suggestion-job .suggestion-status').innerText.includes('succeeded')",
                           timeout=90_000)
    job.refresh_from_db()
    items = set(Prompt.objects.filter(round=second).values_list("pk", flat=True))
    assert job.status == "succeeded" and (job.progress_done, job.progress_total) == (len(items), len(items))
    rows = Suggestion.objects.filter(job=job)
    assert sorted(rows.values_list("prompt_id", flat=True)) == sorted(items)
    assert all(row.question == "ranking" and 0 <= row.score <= 1 for row in rows)
    assert f"{len(items)} / {len(items)} items" in job_row.inner_text()
    assert_no_problem(page)
