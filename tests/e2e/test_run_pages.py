"""The launch form after a refusal, and the run page's controls, in a real browser (issue 13)."""

import pytest
from django.utils import timezone

from tests.e2e.conftest import log_in
from webapp.experiments import services
from webapp.experiments.models import Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _choose_model(page, name: str) -> None:
    options = page.locator("[name=model] option").evaluate_all(
        "options => options.map(option => [option.value, option.textContent])")
    (value,) = [value for value, text in options if text.startswith(name)]
    page.select_option("[name=model]", value)


def test_a_refused_launch_sums_up_its_errors_at_the_top_and_opens_their_section(page, live_server, researcher,
                                                                               tiny_model):
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/new?kind=grpo")
    _choose_model(page, tiny_model.name)
    page.click("details:has([name=max_length]) > summary")  # the collapsed "Sequences and sampling"
    page.fill("[name=max_length]", "64")
    page.fill("[name=max_new_tokens]", "28")
    page.fill("[name=max_prompt_length]", "60")
    page.click("button[type=submit].primary")
    page.wait_for_selector("#launch-errors")
    assert not Run.objects.exists()

    summary = page.locator("#launch-errors")
    assert summary.is_visible()
    box = summary.bounding_box()
    assert 0 <= box["y"] < page.viewport_size["height"], "the summary must be in sight after the refusal"
    items = summary.locator("li").all_inner_texts()
    assert items == ["Max new tokens: max_prompt_length (60) + max_new_tokens (28) exceeds max_length (64)"]
    # the section holding the error is open, the others keep their usual state
    assert page.locator("details:has([name=max_new_tokens])").evaluate("section => section.open")
    assert not page.locator("details:has([name=log_every])").evaluate("section => section.open")
    assert page.locator("[name=max_new_tokens]").is_visible()

    summary.locator("a", has_text="Max new tokens").click()
    assert page.evaluate("document.activeElement.name") == "max_new_tokens"
    assert page.js_errors == []


def _queued_run(researcher, **fields) -> Run:
    return Run.objects.create(name="waiting", kind="reward_model", config={"lr": 0.001},
                              data_source={"type": "arithmetic", "level": 1, "size": 8}, created_by=researcher,
                              **fields)


def test_cancel_asks_first_and_dismissing_writes_nothing(page, live_server, researcher):
    run = _queued_run(researcher)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    asked: list[str] = []

    def dismiss(dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("#cancel-run")
    page.wait_for_timeout(1000)  # time for a request, had one been sent
    run.refresh_from_db()
    assert (run.status, run.cancel_requested) == (Run.Status.QUEUED, False)
    assert asked and asked[0].startswith(f"Cancel run #{run.pk} (waiting)?")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#cancel-run")
    page.wait_for_selector("#run-status-badge:text('canceled')")
    run.refresh_from_db()
    assert (run.status, run.cancel_requested) == (Run.Status.CANCELED, True)
    assert page.js_errors == []


def test_the_queued_message_goes_when_the_run_starts(page, live_server, researcher, tiny_model, monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/new?kind=reward_model")
    _choose_model(page, tiny_model.name)
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    run = Run.objects.get()
    message = page.locator(".messages li", has_text=f"Run #{run.pk} queued.")
    assert message.is_visible()
    page.wait_for_timeout(2500)  # a poll while still queued keeps it
    assert message.is_visible()
    now = timezone.now()
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, started_at=now, heartbeat_at=now)
    page.wait_for_selector("#run-status-badge:text('running')")
    assert message.count() == 0
    assert page.js_errors == []


def _runs_with_metrics(researcher, count: int) -> list[Run]:
    runs = []
    for index in range(count):
        run = Run.objects.create(name=f"charted {index}", kind="grpo", config={"lr": 0.001 * (index + 1)},
                                 data_source={"type": "arithmetic", "level": 1, "size": 8}, created_by=researcher,
                                 status=Run.Status.SUCCEEDED, current_step=40, total_steps=40)
        services.metric_rows_write(run_id=run.pk, rows=[
            {"step": step, "wall_time": float(step), "tokens_seen": step * 10,
             "metrics": {"loss": float("nan") if step == 20 else 1 / step, "reward/mean": step / 40 + index}}
            for step in range(1, 41)])
        runs.append(run)
    return runs


OVERLAPS_JS = """() => [...document.querySelectorAll('.chart')].map((chart) => {
  const legend = chart.querySelector('g.legend')?.getBoundingClientRect();
  const title = chart.querySelector('text.xtitle')?.getBoundingClientRect();
  if (!legend || !title) return [chart.dataset.metric, 'missing'];
  const apart = legend.top >= title.bottom || legend.bottom <= title.top
    || legend.left >= title.right || legend.right <= title.left;
  return [chart.dataset.metric, apart ? 'apart' : 'overlap'];
})"""


def test_the_charts_draw_with_the_vendored_bundle_and_the_legend_clears_the_axis_title(page, live_server,
                                                                                      researcher):
    runs = _runs_with_metrics(researcher, 3)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/compare?" + "&".join(f"runs={run.pk}" for run in runs))
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.metrics()") == ["reward/mean", "loss"]  # GRPO's key metrics first
    assert page.evaluate("window.preflabCharts.points('loss')") == 3 * 40
    assert page.evaluate("window.preflabCharts.nonfinite('loss')") == ["NaN"] * 3
    assert page.evaluate(OVERLAPS_JS) == [["reward/mean", "apart"], ["loss", "apart"]]
    scripts = page.evaluate("performance.getEntriesByType('resource').filter(entry => entry.initiatorType"
                            " === 'script').map(entry => entry.name).filter(name => name.includes('plotly'))")
    assert [name.rsplit("/", 1)[1] for name in scripts] == ["plotly-basic-4.1.1.min.js"]
    # zoom: a drag on the chart asks the server for that range and draws it
    with page.expect_response(lambda response: "x_min=" in response.url):
        box = page.locator("[data-metric=loss] .nsewdrag").first.bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()
    # another x axis redraws every chart; smoothing restyles the smoothed lines in place
    page.select_option("[data-chart-control=x]", "wall_time")
    page.wait_for_function("window.preflabCharts.drawn()"
                           " && document.querySelector('[data-metric=loss]').layout.xaxis.title.text"
                           " === 'seconds since start'")
    page.evaluate("""() => { const slider = document.querySelector('[data-chart-control=smoothing]');
                             slider.value = '0'; slider.dispatchEvent(new Event('input')); }""")
    smoothed = page.evaluate("document.querySelector('[data-metric=\"reward/mean\"]').data[1].y.slice(0, 3)")
    assert smoothed == [1 / 40, 2 / 40, 3 / 40]

    page.goto(f"{live_server.url}/runs/{runs[0].pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.points('reward/mean')") == 40
    assert page.js_errors == []
