"""The run list keeps its filters and the ticked compare boxes across its live polls (issue 13, bug 5)."""

import re

import pytest

from tests.e2e.conftest import log_in
from webapp.experiments.models import Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROWS = re.compile(r"/runs/rows")


def _runs(researcher) -> dict[str, list[Run]]:
    """Runs of several statuses, written directly: no worker runs them, the list only reads them."""
    statuses = [Run.Status.QUEUED, Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELED,
                Run.Status.CANCELED, Run.Status.SUCCEEDED]
    runs: dict[str, list[Run]] = {}
    for number, status in enumerate(statuses):
        run = Run.objects.create(name=f"{status} {number}", kind="reward_model", config={"lr": 0.001 * (number + 1)},
                                 data_source={"type": "arithmetic", "level": 1, "size": 8}, status=status,
                                 created_by=researcher)
        runs.setdefault(status, []).append(run)
    return runs


def _shown_ids(page) -> list[int]:
    return [int(value) for value in page.locator("#run-rows tr[data-run]").evaluate_all(
        "rows => rows.map(row => row.dataset.run)")]


def _wait_past_a_poll(page) -> None:
    """Until the table's own poll (every 3 s) has answered and been swapped in."""
    with page.expect_response(lambda response: ROWS.search(response.url) and response.request.headers.get(
            "hx-trigger") == "run-rows", timeout=10_000):
        pass
    page.wait_for_timeout(300)


def test_a_status_filter_and_ticked_boxes_survive_the_polls_and_compare_opens_the_ticked_runs(
    page, live_server, researcher
):
    runs = _runs(researcher)
    canceled = sorted((run.pk for run in runs[Run.Status.CANCELED]), reverse=True)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/")
    assert len(_shown_ids(page)) == 6

    with page.expect_response(ROWS):
        page.select_option("form.filters [name=status]", "canceled")
    page.wait_for_function("document.querySelectorAll('#run-rows tr[data-run]').length === 2")
    _wait_past_a_poll(page)
    assert _shown_ids(page) == canceled
    assert page.locator("form.filters [name=status]").input_value() == "canceled"
    # a reload keeps the filter: it is in the address bar
    assert page.url.endswith("/runs/?status=canceled")

    for run_id in canceled:
        page.check(f"input[name=runs][value='{run_id}']")
    _wait_past_a_poll(page)
    _wait_past_a_poll(page)
    assert [page.is_checked(f"input[name=runs][value='{run_id}']") for run_id in canceled] == [True, True]

    page.click("text=Compare selected")
    page.wait_for_url(re.compile(r"/runs/compare\?"))
    compared = page.locator("table.config-diff thead th a").all_inner_texts()
    assert compared == [f"#{run.pk} {run.name}" for run in sorted(runs[Run.Status.CANCELED], key=lambda run: run.pk)]
    assert page.js_errors == []


def test_a_filter_without_a_match_says_so_and_offers_to_clear_it(page, live_server, researcher):
    _runs(researcher)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/")
    with page.expect_response(ROWS):
        page.select_option("form.filters [name=status]", "running")
    page.wait_for_selector("#no-runs")
    assert page.locator("#no-runs").inner_text() == "No runs match these filters. Clear the filters."
    _wait_past_a_poll(page)
    assert page.locator("#no-runs").inner_text().startswith("No runs match these filters.")
    page.click("#no-runs a")
    page.wait_for_url(f"{live_server.url}/runs/")
    assert len(_shown_ids(page)) == 6
    assert page.js_errors == []


def test_a_ticked_run_filtered_out_of_sight_stays_chosen_for_compare(page, live_server, researcher):
    runs = _runs(researcher)
    succeeded, canceled = runs[Run.Status.SUCCEEDED][0], runs[Run.Status.CANCELED][0]
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/")
    page.check(f"input[name=runs][value='{succeeded.pk}']")
    with page.expect_response(ROWS):
        page.select_option("form.filters [name=status]", "canceled")
    page.wait_for_function("document.querySelectorAll('#run-rows tr[data-run]').length === 2")
    page.check(f"input[name=runs][value='{canceled.pk}']")
    assert page.locator("#compare-chosen").inner_text() == "2 runs chosen"
    page.click("text=Compare selected")
    page.wait_for_url(re.compile(r"/runs/compare\?"))
    compared = page.locator("table.config-diff thead th a").all_inner_texts()
    assert compared == [f"#{run.pk} {run.name}" for run in sorted((succeeded, canceled), key=lambda run: run.pk)]
    assert page.js_errors == []
