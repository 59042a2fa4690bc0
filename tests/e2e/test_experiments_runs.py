"""A researcher launches runs from the form and watches them live, cancels one, and compares two."""

import time

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import (
    ARITHMETIC,
    small_config,
    wait_for,
)
from webapp.experiments import selectors, services
from webapp.experiments.models import MetricRow, ModelRef, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _fill(page, values: dict[str, str]) -> None:
    closed = page.locator("details:not([open]) > summary")
    while closed.count():
        closed.first.click()  # open the collapsed groups (data, logging, advanced) as a researcher would
    for name, value in values.items():
        page.fill(f"[name={name}]", value)


def _launch_and_watch(page, live_server, kind: str, values: dict[str, str], *, must_grow: bool = True,
                      preset: str = "") -> Run:
    page.goto(f"{live_server.url}/runs/new?kind={kind}")
    if preset:
        page.click(f"nav.presets a:text-is('{preset}')")
        page.wait_for_url(f"**/runs/new?kind={kind}&preset={preset}")
    _fill(page, values)
    assert page.input_value("[name=model]") == ""  # nothing is chosen for the researcher
    page.select_option("[name=model]", label="tiny arithmetic (local directory, causal LM)")
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    run = Run.objects.order_by("-pk").first()
    page.wait_for_function("window.preflabCharts && window.preflabCharts.points('loss') > 0", timeout=120_000)
    first = page.evaluate("window.preflabCharts.points('loss')")
    if must_grow:
        # The chart showed part of the run, then the polls appended to it (the last poll may be the one that
        # also brings the run's end: the status badge, polled on its own, can say succeeded before it).
        page.wait_for_function(f"window.preflabCharts.points('loss') > {first}", timeout=120_000)
        assert first < int(values["max_steps"]), "the whole run was over before the chart first drew it"
    page.wait_for_selector("#run-status-badge:text('succeeded')", timeout=180_000)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    # Every logged step ends up on the chart (fewer than 2,000, so nothing is downsampled away).
    page.wait_for_function(f"window.preflabCharts.points('loss') === {run.total_steps}")
    # ... exactly once and in order, on both the raw and the smoothed line, however many live appends it took.
    drawn = page.evaluate("[0, 1].map(i => Array.from(document.querySelector('[data-metric=loss]').data[i].x))")
    assert drawn == [list(range(1, run.total_steps + 1))] * 2
    return run


def test_reward_model_run_launched_from_the_form_is_watched_live_and_its_checkpoint_is_a_model(
    page, live_server, researcher, tiny_model, celery_worker_factory
):
    celery_worker_factory(queues=("gpu",))
    log_in(page, live_server, "rita", "rita-password-1")
    # Long enough (seconds, even on a quiet machine) for the page to see the chart grow while it runs.
    run = _launch_and_watch(page, live_server, "reward_model", {
        "name": "browser rm", "size": "32", "max_steps": "800", "batch_size": "4", "max_length": "64",
        "max_prompt_length": "16", "checkpoint_every": "400"})
    assert run.kind == "reward_model" and run.created_by == researcher
    assert page.js_errors == []
    page.goto(f"{live_server.url}/models/")
    checkpoint = ModelRef.objects.get(run=run, step=800)
    cells = page.locator(f"tr[data-model='{checkpoint.pk}'] td").all_inner_texts()
    assert cells[1:] == ["checkpoint", "sequence classifier", checkpoint.path, f"#{run.pk}", "800"]


@pytest.mark.skipif("grpo" not in selectors.launchable_kinds(), reason="trainer/cli.py has no GRPO loop registered yet")
def test_grpo_run_launched_from_the_form_is_watched_live(page, live_server, researcher, tiny_model,
                                                         celery_worker_factory):
    celery_worker_factory(queues=("gpu",))
    log_in(page, live_server, "rita", "rita-password-1")
    run = _launch_and_watch(page, live_server, "grpo", {
        "name": "browser dapo", "size": "16", "max_steps": "6", "batch_size": "2", "group_size": "2",
        "max_new_tokens": "8", "overlong_buffer": "4", "max_length": "64", "max_prompt_length": "16",
        "sample_every": "2"}, must_grow=False, preset="dapo")
    # the preset's fields arrive in the run's config as the trainer defines them
    assert run.config["beta"] == 0.0 and run.config["epsilon_high"] == 0.28
    assert run.config["loss_aggregation"] == "token-mean"
    assert run.config["dynamic_sampling"] and run.config["overlong_filtering"]
    assert run.config["rewards"] == {"answer_match": 1.0, "soft_overlong": 1.0}
    assert ModelRef.objects.filter(run=run, step=6).exists()
    # The page opened before any sample existed; the samples table fills in without a reload, at the newest step.
    page.wait_for_selector("#samples-body table", timeout=15_000)
    assert page.locator("#samples-body strong").inner_text() == "6"
    assert page.locator("#samples-body tbody tr").count() == run.samples.filter(step=6).count() > 0


def test_the_launch_form_shows_only_the_fields_the_chosen_data_source_and_lora_use(page, live_server, researcher,
                                                                                    tiny_model):
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/new?kind=dpo")

    def shown() -> set[str]:
        names = ("level", "size", "project", "aggregation", "upload", "lora_r", "lora_target_modules")
        return {name for name in names if page.locator(f"[name={name}]").is_visible()}

    assert shown() == {"level", "size"}
    page.select_option("[name=data_source]", "project_pairs")
    assert shown() == {"project", "aggregation"}
    page.select_option("[name=data_source]", "project_prompts")
    assert shown() == {"project"}
    page.select_option("[name=data_source]", "upload")
    page.check("[name=use_lora]")
    assert shown() == {"upload", "lora_r", "lora_target_modules"}
    # a field the server refused stays in sight whatever the choices
    page.select_option("[name=data_source]", "project_pairs")
    page.select_option("[name=model]", label="tiny arithmetic (local directory, causal LM)")
    page.click("button[type=submit].primary")
    page.wait_for_selector(".field.invalid [name=project]")
    page.select_option("[name=data_source]", "arithmetic")
    assert "project" in shown() and "level" in shown()
    assert page.js_errors == []


def test_a_run_is_canceled_from_its_page_within_one_step(page, live_server, researcher, tiny_model,
                                                         celery_worker_factory):
    celery_worker_factory(queues=("gpu",))
    run = services.run_create(kind="reward_model", config=small_config(tiny_model, max_steps=500, checkpoint_every=0),
                              data_source=ARITHMETIC, created_by=researcher, name="to cancel")
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    wait_for(lambda: MetricRow.objects.filter(run=run).count() >= 2, timeout_s=120, what="two steps")
    page.once("dialog", lambda dialog: dialog.accept())  # "Cancel run #N …?"
    page.click("#cancel-run")
    # The click only starts the request: count from when the cancel is committed (seen in the database).
    wait_for(lambda: Run.objects.filter(pk=run.pk, cancel_requested=True).exists(), timeout_s=30,
             what="the cancel to be recorded", poll_s=0.005)
    cancel_seen_at = time.time()
    page.wait_for_selector("#run-status-badge:text('canceled')", timeout=60_000)
    assert MetricRow.objects.filter(run=run, wall_time__gt=cancel_seen_at).count() <= 1
    assert page.js_errors == []


LINKED_NAME = "<a href='https://example.com/'>second</a>"


def test_two_runs_are_compared_and_the_diff_shows_exactly_the_differing_keys(page, live_server, researcher,
                                                                             tiny_model, monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")
    first = services.run_create(kind="reward_model", config=small_config(tiny_model), data_source=ARITHMETIC,
                                created_by=researcher, name="first")
    second = services.run_create(kind="reward_model", config=small_config(tiny_model, lr=0.003, seed=7),
                                 data_source=ARITHMETIC, created_by=researcher, name=LINKED_NAME)
    for run, loss in ((first, 1.0), (second, 2.0)):
        services.metric_rows_write(run_id=run.pk, rows=[
            {"step": step, "wall_time": float(step), "tokens_seen": step, "metrics": {"loss": loss / step}}
            for step in range(1, 11)])
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/")
    page.check(f"input[name=runs][value='{first.pk}']")
    page.check(f"input[name=runs][value='{second.pk}']")
    page.click("text=Compare selected")
    page.wait_for_selector("table.config-diff")
    keys = page.locator("table.config-diff tbody tr").evaluate_all("rows => rows.map(row => row.dataset.key)")
    assert keys == ["lr", "seed"]
    page.wait_for_function("window.preflabCharts && window.preflabCharts.points('loss') === 20")
    # the legend shows each run's name as typed: Plotly's own HTML (a link here) is not drawn
    legend = page.locator("[data-metric=loss] .legendtext").all_text_contents()
    assert f"#{first.pk} first" in legend and f"#{second.pk} {LINKED_NAME}" in legend, legend
    assert page.locator("[data-metric=loss] .legend a").count() == 0
    assert page.js_errors == []


def test_a_nan_loss_is_marked_on_the_chart_and_the_failure_is_shown(page, live_server, researcher, tiny_model,
                                                                   monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")
    run = services.run_create(kind="reward_model", config=small_config(tiny_model, debug_nan_at_step=3),
                              data_source=ARITHMETIC, created_by=researcher, name="diverged")
    services.metric_rows_write(run_id=run.pk, rows=[
        {"step": step, "wall_time": float(step), "tokens_seen": step, "metrics": {"loss": float("nan") if step == 3 else 0.7}}
        for step in (1, 2, 3)])
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    services.run_fail(run_id=run.pk, error="TrainingDiverged: loss is NaN at step 3")
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.points('loss') === 3")
    assert page.evaluate("window.preflabCharts.nonfinite('loss')") == ["NaN"]
    marker = page.evaluate("document.querySelector('[data-metric=loss]').data[2]")
    assert marker["x"] == [3] and marker["text"] == ["NaN"]
    assert "loss is NaN at step 3" in page.locator(".status").inner_text()
    assert page.locator("[data-alert=loss_nan]").count() == 1


def test_a_run_on_a_projects_pairs_by_majority_is_launched_from_the_form_and_its_frozen_rows_download(
    page, live_server, researcher, tiny_model
):
    from tests.webapp.annotation.factories import DISPUTED_PAIR_COUNTS, make_disputed_project
    from webapp.experiments.data_snapshot import snapshot_path

    project = make_disputed_project(owner=researcher)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/new?kind=reward_model")
    page.select_option("[name=data_source]", "project_pairs")
    page.select_option("[name=project]", str(project.pk))
    page.select_option("[name=aggregation]", "majority")
    _fill(page, {"batch_size": "4", "max_steps": "2"})
    page.select_option("[name=model]", label="tiny arithmetic (local directory, causal LM)")
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    run = Run.objects.get()
    assert run.data_source == {"type": "project_pairs", "project_id": project.pk, "aggregation": "majority"}
    assert run.data_rows == DISPUTED_PAIR_COUNTS["majority"]
    assert "aggregation: majority" in page.inner_text("#run-data-source")
    with page.expect_download() as download:
        page.click("#run-data-snapshot a")
    assert download.value.path().read_bytes() == snapshot_path(run.pk).read_bytes()
    assert page.js_errors == []
