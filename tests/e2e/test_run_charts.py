"""The run page's charts in Chromium (issue 30): the smoothed line is the EMA of every row, live refreshes keep
the downsampling, sections with the key metrics first, pins that outlive a reload, whole-number step ticks."""

import numpy as np
import pytest
from django.utils import timezone

from tests.e2e.conftest import _wait_for_function_under_the_policy, assert_no_problem, log_in
from webapp.experiments import services
from webapp.experiments.models import ChartPins, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TRACES_JS = """(metric) => { const data = document.querySelector(`[data-metric="${metric}"]`).data;
  return { rawX: data[0].x, rawY: data[0].y, smoothX: data[1].x, smoothY: data[1].y }; }"""


def _run(researcher, **fields) -> Run:
    values = {"name": "charted", "kind": "grpo", "config": {"lr": 0.001},
              "data_source": {"type": "arithmetic", "level": 1, "size": 8}, "created_by": researcher,
              "status": Run.Status.SUCCEEDED, **fields}
    return Run.objects.create(**values)


def _log(run: Run, steps: range, metrics) -> None:
    for start in range(steps.start, steps.stop, 10_000):  # the service, in the batches a client sends
        services.metric_rows_write(run_id=run.pk, rows=[
            {"step": step, "wall_time": float(step), "tokens_seen": step, "metrics": metrics(step)}
            for step in range(start, min(start + 10_000, steps.stop))])


def _ema(values: np.ndarray, weight: float) -> np.ndarray:
    smoothed, previous = np.empty_like(values), values[0]
    for index, value in enumerate(values):
        previous = weight * previous + (1 - weight) * value
        smoothed[index] = previous
    return smoothed


def _mean_move(values) -> float:
    return float(np.mean(np.abs(np.diff(values))))


def test_the_smoothed_line_of_100k_steps_is_the_ema_of_every_row(page, live_server, researcher):
    steps = np.arange(1, 100_001)
    values = 2.0 * np.exp(-steps / 30_000) + np.random.default_rng(30).normal(scale=0.05, size=steps.size)
    run = _run(researcher, current_step=100_000, total_steps=100_000)
    _log(run, range(1, 100_001), lambda step: {"loss": float(values[step - 1])})
    full_ema = {0.6: _ema(values, 0.6), 0.9: _ema(values, 0.9)}

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    drawn = page.evaluate(TRACES_JS, "loss")
    assert len(drawn["smoothX"]) <= 2000 and len(drawn["rawX"]) <= 2000
    at = np.asarray(drawn["smoothX"], dtype=np.int64) - 1
    assert np.allclose(drawn["smoothY"], full_ema[0.6][at], atol=1e-9)
    # the raw trace keeps each bucket's extremes; the smoothed one is a curve through them
    assert _mean_move(drawn["smoothY"]) < _mean_move(drawn["rawY"]) / 5
    assert max(drawn["rawY"]) == pytest.approx(values.max())

    # dragging the slider asks once it rests: one request for the last weight, not one per position
    asked: list[str] = []
    page.on("request", lambda request: "/metrics?" in request.url and asked.append(request.url))
    page.evaluate("""() => { const slider = document.querySelector('[data-chart-control=smoothing]');
        for (const value of ['0.7', '0.8', '0.85', '0.9']) { slider.value = value;
          slider.dispatchEvent(new Event('input')); } }""")
    last = float(full_ema[0.9][-1])
    page.wait_for_function("window.preflabCharts.smoothing() === 0.9 && Math.abs(document.querySelector("
                           f"'[data-metric=loss]').data[1].y.at(-1) - {last!r}) < 1e-9")
    page.wait_for_timeout(500)
    assert len(asked) == 1 and "smoothing=0.9" in asked[0]
    drawn = page.evaluate(TRACES_JS, "loss")
    assert np.allclose(drawn["smoothY"], full_ema[0.9][np.asarray(drawn["smoothX"], dtype=np.int64) - 1], atol=1e-9)
    assert page.js_errors == []


def test_a_page_left_open_on_a_live_run_keeps_each_trace_under_the_cap(page, live_server, researcher, settings):
    settings.PREFLAB_METRICS_MAX_POINTS = 100
    run = _run(researcher, status=Run.Status.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now())
    noise = np.random.default_rng(2).normal(scale=0.05, size=2000)
    metrics = lambda step: {"loss": 1 / step + float(noise[step - 1]), "reward/mean": step / 2000}  # noqa: E731
    _log(run, range(1, 61), metrics)

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.drawnPoints('loss', 0)") == 60
    for start in range(61, 1201, 380):  # 1,140 rows more while it is open, in three writes a poll or more apart
        _log(run, range(start, start + 380), metrics)
        page.wait_for_timeout(2500)
    page.wait_for_function("document.querySelector('[data-metric=loss]').data[0].x.at(-1) === 1200", timeout=20_000)
    for metric in ("loss", "reward/mean"):
        lengths = page.evaluate("(metric) => document.querySelector(`[data-metric=\"${metric}\"]`).data"
                                ".map((trace) => trace.x.length)", metric)
        raw, smoothed, _markers = lengths
        assert 0 < raw <= 100 and 0 < smoothed <= 100, f"{metric}: {lengths} points on a 100-point chart"
        assert page.evaluate("(metric) => document.querySelector(`[data-metric=\"${metric}\"]`).data[1].x.at(-1)",
                             metric) == 1200
    assert page.js_errors == []


GRPO_METRICS = ("loss", "kl", "entropy", "reward/mean", "reward/std", "lr", "clip_ratio/low", "grad_norm",
                "completion/mean_length", "time/step_s", "throughput/tokens_per_s")


def test_sections_put_the_key_metrics_first_and_a_pin_outlives_a_reload(watched_page, live_server, researcher):
    page = watched_page  # pins and folding sections break no rule of the Content-Security-Policy
    run = _run(researcher, current_step=60, total_steps=60)
    _log(run, range(1, 61), lambda step: {name: step / 60 + index for index, name in enumerate(GRPO_METRICS)})
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.layout()") == [
        ["key", "reward/mean"], ["key", "kl"], ["key", "entropy"], ["key", "loss"],
        ["reward", "reward/std"], ["kl-entropy", "clip_ratio/low"], ["loss", "grad_norm"], ["loss", "lr"],
        ["throughput", "throughput/tokens_per_s"], ["time", "time/step_s"], ["other", "completion/mean_length"],
    ]
    page.click('[data-pin="lr"]')
    assert page.evaluate("window.preflabCharts.layout()")[:2] == [["pinned", "lr"], ["key", "reward/mean"]]
    assert page.get_attribute('[data-pin="lr"]', "aria-pressed") == "true"
    page.wait_for_selector('[data-pin="lr"][data-saved="true"]')
    assert ChartPins.objects.get(user=researcher, kind="grpo").metrics == ["lr"]
    page.click('.chart-section[data-section="reward"] > summary')
    assert not page.locator('[data-metric="reward/std"]').is_visible()
    assert_no_problem(page)

    other = _run(researcher, name="another grpo", current_step=60, total_steps=60)
    _log(other, range(1, 61), lambda step: {"loss": 1 / step, "lr": 0.001, "kl": step / 100})
    # the pin is the user's for the kind, on the server: it holds on another GRPO run, in a new browser context
    fresh = page.context.browser.new_context(viewport={"width": 1400, "height": 900})
    page = fresh.new_page()
    page.js_errors = []
    page.on("pageerror", lambda error: page.js_errors.append(str(error)))
    page.wait_for_function = _wait_for_function_under_the_policy(page)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{other.pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.layout()") == [["pinned", "lr"], ["key", "kl"], ["key", "loss"]]
    page.reload()
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.layout()")[0] == ["pinned", "lr"]

    # a section folds away, and an unpinned chart goes back to its own section
    page.click('.chart-section[data-section="key"] > summary')
    assert not page.locator('[data-metric="kl"]').is_visible()
    page.click('[data-pin="lr"]')
    assert page.evaluate("window.preflabCharts.layout()") == [["key", "kl"], ["key", "loss"], ["loss", "lr"]]
    page.wait_for_selector('[data-pin="lr"][data-saved="false"]')
    page.click('.chart-section[data-section="key"] > summary')
    assert page.locator('[data-metric="kl"]').is_visible()
    assert page.locator('[data-metric="kl"] .main-svg').first.bounding_box()["width"] > 300
    page.reload()
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.layout()")[-1] == ["loss", "lr"]
    assert page.js_errors == []
    fresh.close()


def test_a_short_run_has_whole_step_ticks_and_no_smoothing(page, live_server, researcher):
    run = _run(researcher, kind="sft", current_step=3, total_steps=3)
    _log(run, range(1, 4), lambda step: {"loss": [2.0, 1.0, 1.5][step - 1], "lr": 0.001 * step})
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert page.evaluate("window.preflabCharts.layout()") == [["key", "loss"], ["key", "lr"]]
    ticks = page.locator('[data-metric="loss"] .xtick text').all_text_contents()
    assert ticks == ["1", "2", "3"]
    for metric in ("loss", "lr"):
        drawn = page.evaluate(TRACES_JS, metric)
        assert drawn["smoothY"] == drawn["rawY"], f"{metric}: 3 points are drawn as they are, not smoothed"
    assert page.evaluate("window.preflabCharts.smoothing()") == 0.6
    assert page.js_errors == []


def test_a_long_learning_rate_is_never_smoothed(page, live_server, researcher):
    run = _run(researcher, kind="sft", current_step=200, total_steps=200)
    _log(run, range(1, 201), lambda step: {"loss": 1 / step + (step % 2) * 0.1, "lr": 0.001 * min(step, 20) / 20})
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    learning_rate = page.evaluate(TRACES_JS, "lr")
    assert learning_rate["smoothY"] == learning_rate["rawY"]
    loss = page.evaluate(TRACES_JS, "loss")
    assert loss["smoothY"] != loss["rawY"] and _mean_move(loss["smoothY"]) < _mean_move(loss["rawY"])
    ticks = page.locator('[data-metric="loss"] .xtick text').all_text_contents()
    assert ticks and all(tick.replace(",", "").isdigit() for tick in ticks), ticks
    assert page.js_errors == []
