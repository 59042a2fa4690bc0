"""A researcher runs GRPO on two processes (torchrun, gloo on this CPU) from the launch form and watches it in
the browser: one series on the charts, Cancel stops both ranks, a SIGKILLed rank fails the run naming it."""

import os
import signal
import time

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import wait_for
from tests.workers.test_distributed_launch import alive, group_pids
from webapp.experiments.models import MetricRow, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TINY_MODEL_LABEL = "tiny arithmetic (local directory, causal LM)"


def _launch_two_process_grpo(page, live_server, max_steps: int) -> Run:
    page.goto(f"{live_server.url}/runs/new?kind=grpo")
    closed = page.locator("details:not([open]) > summary")
    while closed.count():
        closed.first.click()  # open the collapsed groups (processes among them) as a researcher would
    values = {"name": "two processes", "size": "32", "lr": "1e-4", "max_steps": str(max_steps), "batch_size": "4",
              "group_size": "2", "max_new_tokens": "8", "max_length": "48", "checkpoint_every": "0",
              "num_processes": "2"}
    for name, value in values.items():
        page.fill(f"[name={name}]", value)
    page.select_option("[name=parallelism]", "ddp")
    page.select_option("[name=model]", label=TINY_MODEL_LABEL)
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    run = Run.objects.order_by("-pk").first()
    assert (run.config["num_processes"], run.config["parallelism"]) == (2, "ddp")
    return run


def test_a_two_process_grpo_run_from_the_form_succeeds_with_one_series_on_its_charts(
    page, live_server, researcher, tiny_model, celery_worker_factory
):
    celery_worker_factory(queues=("gpu",))
    log_in(page, live_server, "rita", "rita-password-1")
    run = _launch_two_process_grpo(page, live_server, max_steps=6)
    page.wait_for_selector("#run-status-badge:text('succeeded')", timeout=180_000)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert page.locator("#run-processes").inner_text().startswith("2 processes on 1 node · ddp")
    page.wait_for_function(f"window.preflabCharts && window.preflabCharts.points('loss') === {run.total_steps}")
    # each step once, in order: rank 1 reported nothing, so there is no second series or repeated step
    drawn = page.evaluate("Array.from(document.querySelector('[data-metric=loss]').data[0].x)")
    assert drawn == list(range(1, run.total_steps + 1)) == [row.step for row in MetricRow.objects.filter(run=run)]
    assert page.js_errors == []


def test_cancel_on_the_run_page_stops_both_ranks_within_one_step(
    page, live_server, researcher, tiny_model, celery_worker_factory
):
    celery_worker_factory(queues=("gpu",))
    log_in(page, live_server, "rita", "rita-password-1")
    run = _launch_two_process_grpo(page, live_server, max_steps=500)
    wait_for(lambda: MetricRow.objects.filter(run=run).count() >= 2, timeout_s=180, what="two steps")
    group = group_pids(run)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#cancel-run")
    wait_for(lambda: Run.objects.filter(pk=run.pk, cancel_requested=True).exists(), timeout_s=30,
             what="the cancel to be recorded", poll_s=0.005)
    cancel_seen_at = time.time()
    page.wait_for_selector("#run-status-badge:text('canceled')", timeout=60_000)
    assert MetricRow.objects.filter(run=run, wall_time__gt=cancel_seen_at).count() <= 1
    wait_for(lambda: not any(alive(pid) for pid in group), timeout_s=30, what=f"torchrun and both ranks {group}")
    assert page.js_errors == []


def test_a_sigkilled_rank_fails_the_run_and_its_page_names_the_rank(
    page, live_server, researcher, tiny_model, celery_worker_factory
):
    celery_worker_factory(queues=("gpu",))
    log_in(page, live_server, "rita", "rita-password-1")
    run = _launch_two_process_grpo(page, live_server, max_steps=500)
    wait_for(lambda: MetricRow.objects.filter(run=run).exists(), timeout_s=180, what="a step")
    group = group_pids(run)
    os.kill(group[1], signal.SIGKILL)  # rank 1
    page.wait_for_selector("#run-status-badge:text('failed')", timeout=60_000)
    page.reload()
    assert "rank 1 was killed by signal 9 (SIGKILL)" in page.locator(".status").inner_text()
    wait_for(lambda: not any(alive(pid) for pid in group), timeout_s=30, what=f"torchrun and both ranks {group}")
