"""The run page's chart data: the EMA of the whole series at the downsampled points, what is never smoothed,
the stale-run hint, the model in the header and the pinned charts (issue 30)."""

import json
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from webapp.experiments import selectors, services
from webapp.experiments.downsampling import exponential_moving_average
from webapp.experiments.models import ChartPins, ModelRef, Run

pytestmark = pytest.mark.django_db


def ema_by_loop(values, weight):
    smoothed, previous = [], None
    for value in values:
        previous = value if previous is None else weight * previous + (1 - weight) * value
        smoothed.append(previous)
    return np.array(smoothed)


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.6, 0.99, 0.999])
def test_the_closed_form_ema_is_the_loop_over_a_long_series(weight):
    values = np.random.default_rng(7).normal(size=30_000) * 1e3 + 5
    assert np.allclose(exponential_moving_average(values, weight), ema_by_loop(values, weight), rtol=0, atol=1e-8)


def test_an_ema_weight_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match=r"smoothing weight must be in \[0, 1\), got 1"):
        exponential_moving_average([1.0, 2.0], 1.0)


def _run(researcher, **fields) -> Run:
    values = {"name": "charted", "kind": "grpo", "config": {"lr": 0.001},
              "data_source": {"type": "arithmetic", "level": 1, "size": 8}, "created_by": researcher,
              "status": Run.Status.SUCCEEDED, **fields}
    return Run.objects.create(**values)


def _log(run: Run, steps: int, metrics) -> None:
    services.metric_rows_write(run_id=run.pk, rows=[
        {"step": step, "wall_time": float(step), "tokens_seen": step, "metrics": metrics(step)}
        for step in range(1, steps + 1)])


def test_the_smoothed_series_is_the_full_series_ema_at_the_kept_points(researcher, settings):
    settings.PREFLAB_METRICS_MAX_POINTS = 100
    run = _run(researcher)
    noise = np.random.default_rng(3).normal(scale=0.05, size=3000)
    _log(run, 3000, lambda step: {"loss": float(1 / step ** 0.5 + noise[step - 1]) if step != 1500 else float("nan"),
                                  "lr": 1e-3 * step, **({"eval/accuracy": step / 3000} if step % 100 == 0 else {})})
    payload = selectors.metric_series(run_id=run.pk, smoothing=0.9)
    loss = payload["series"]["loss"]
    assert len(loss["x"]) <= 100 and len(loss["smoothed_x"]) == len(loss["smoothed"]) == 100
    finite_steps = np.array([step for step in range(1, 3001) if step != 1500])
    finite_values = np.array([1 / step ** 0.5 + noise[step - 1] for step in finite_steps])
    full_ema = dict(zip(finite_steps.tolist(), ema_by_loop(finite_values, 0.9), strict=True))
    assert np.allclose(loss["smoothed"], [full_ema[int(x)] for x in loss["smoothed_x"]], atol=1e-9)
    assert loss["smoothed_x"][0] == 1 and loss["smoothed_x"][-1] == 3000
    assert loss["nonfinite"] == ["NaN"]
    # the raw series keeps each bucket's extremes (for the spikes); the smoothed one takes evenly spaced rows
    assert max(loss["y"]) == pytest.approx(max(finite_values))
    assert max(np.diff(loss["smoothed_x"])) <= 31
    # a learning rate and a series under 50 points are never smoothed
    assert "smoothed" not in payload["series"]["lr"]
    assert "smoothed" not in payload["series"]["eval/accuracy"]
    # without a weight, nothing is smoothed
    assert "smoothed" not in selectors.metric_series(run_id=run.pk)["series"]["loss"]

    zoomed = selectors.metric_series(run_id=run.pk, smoothing=0.9, x_min=2000, x_max=2080, metrics=["loss"])
    series = zoomed["series"]["loss"]
    assert series["x"] == series["smoothed_x"] == [float(step) for step in range(2000, 2081)]
    assert np.allclose(series["smoothed"], [full_ema[step] for step in range(2000, 2081)], atol=1e-9), \
        "a zoomed range is smoothed with the history before it"


def test_the_metrics_view_refuses_a_smoothing_weight_of_one_or_more(researcher_client, researcher):
    run = _run(researcher)
    response = researcher_client.get(f"/runs/{run.pk}/metrics?smoothing=1")
    assert response.status_code == 404
    assert researcher_client.get(f"/runs/{run.pk}/metrics?smoothing=0.5").status_code == 200


@pytest.mark.parametrize(("name", "points", "applies"), [
    ("loss", 50, True), ("loss", 49, False), ("lr", 5000, False), ("optimizer/lr", 5000, False),
    ("learning_rate", 5000, False), ("reward/mean", 1000, True),
])
def test_which_series_are_smoothed(name, points, applies):
    assert selectors.smoothing_applies(name, points) is applies


def test_a_running_run_silent_for_long_says_so_and_when_its_last_data_came(researcher_client, researcher):
    run = _run(researcher, status=Run.Status.RUNNING, started_at=timezone.now(),
               heartbeat_at=timezone.now() - timedelta(seconds=125))
    page = researcher_client.get(f"/runs/{run.pk}/status").content.decode()
    assert 'id="run-stale"' in page
    assert "No data for 2 min 5 s: the program may have stopped or lost the server." in page
    assert "(2 min 5 s ago; a row or a heartbeat)" in page

    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=5))
    page = researcher_client.get(f"/runs/{run.pk}/status").content.decode()
    assert 'id="run-stale"' not in page
    assert "(5 s ago; a row or a heartbeat)" in page

    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, heartbeat_at=timezone.now() - timedelta(hours=2))
    assert 'id="run-stale"' not in researcher_client.get(f"/runs/{run.pk}/").content.decode(), \
        "a finished run is silent by right"


def test_the_run_header_names_its_model(researcher_client, researcher, settings, tmp_path):
    ModelRef.objects.create(name="SmolLM2-135M-Instruct", path=str(tmp_path / "smol"))
    run = _run(researcher, config={"model": str(tmp_path / "smol"), "lr": 0.001})
    assert ('id="run-model" title="the model it trains (config: model)">· SmolLM2-135M-Instruct</span>'
            in researcher_client.get(f"/runs/{run.pk}/").content.decode())
    external = _run(researcher, kind="external", config={"model": "HuggingFaceTB/SmolLM2-135M"})
    assert "· HuggingFaceTB/SmolLM2-135M</span>" in researcher_client.get(f"/runs/{external.pk}/").content.decode()
    bare = _run(researcher, config={"lr": 0.1})
    assert 'id="run-model"' not in researcher_client.get(f"/runs/{bare.pk}/").content.decode()


def _post_pins(client, body):
    return client.post("/runs/chart-pins", data=body if isinstance(body, str) else json.dumps(body),
                       content_type="application/json")


def test_pins_are_kept_per_user_and_kind_and_shown_to_that_user_only(researcher_client, researcher,
                                                                      django_user_model):
    assert _post_pins(researcher_client, {"kind": "grpo", "metrics": ["lr", "kl", "lr"]}).json() == {
        "kind": "grpo", "metrics": ["lr", "kl"]}
    assert _post_pins(researcher_client, {"kind": "dpo", "metrics": ["loss"]}).status_code == 200
    assert selectors.chart_pins(user=researcher, kind="grpo") == ["lr", "kl"]
    run = _run(researcher)
    assert "data-pins='[&quot;lr&quot;, &quot;kl&quot;]'" in researcher_client.get(f"/runs/{run.pk}/").content.decode()
    other = django_user_model.objects.create_user("otto")
    assert selectors.chart_pins(user=other, kind="grpo") == []
    assert _post_pins(researcher_client, {"kind": "grpo", "metrics": []}).json()["metrics"] == []
    assert selectors.chart_pins(user=researcher, kind="grpo") == []
    assert selectors.chart_pins(user=researcher, kind="dpo") == ["loss"]
    assert researcher_client.get("/runs/chart-pins").json() == {"pins": {"dpo": ["loss"], "grpo": []}}


@pytest.mark.parametrize(("body", "message"), [
    ("not json", "the body must be JSON"),
    ("[1]", "the body must be a JSON object"),
    ({"kind": "nope", "metrics": []}, "kind must be one of"),
    ({"kind": "grpo", "metrics": "loss"}, "metrics must be a list of metric names, got str"),
    ({"kind": "grpo", "metrics": ["loss", 3]}, "metrics[1] must be a metric name"),
    ({"kind": "grpo", "metrics": [f"m{index}" for index in range(51)]}, "at most 50 pinned charts, got 51"),
])
def test_bad_pins_are_refused_with_what_and_where(researcher_client, researcher, body, message):
    response = _post_pins(researcher_client, body)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert not ChartPins.objects.exists()
