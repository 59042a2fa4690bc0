"""Resuming a run from an earlier checkpoint in the browser: the page lists what it would remove and asks;
nothing is removed until the researcher confirms, then the later checkpoints' rows and directories are gone."""

from pathlib import Path

import pytest
from django.template.defaultfilters import filesizeformat

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import (
    finished_run_with_checkpoints,
    register_tiny_model,
    tiny_model_roots,
)
from webapp.experiments.models import MetricRow, ModelRef, Run
from webapp.experiments.selectors import directory_size

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _size(run: Run, step: int) -> str:
    return filesizeformat(directory_size(ModelRef.objects.get(run=run, step=step).path)).replace("\xa0", " ")


def _steps(run: Run) -> list[int]:
    return sorted(ModelRef.objects.filter(run=run).values_list("step", flat=True))


def test_resume_from_an_earlier_checkpoint_asks_then_removes_the_later_ones(
    page, live_server, researcher, settings, tmp_path, tiny_model_dir, monkeypatch
):
    queued: list[int] = []
    monkeypatch.setattr("webapp.queueing.publish", lambda task, *, kind, object_id, args=(): queued.append(object_id))
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    settings.RUNS_DIR = tmp_path / "runs"
    run = finished_run_with_checkpoints(register_tiny_model(tiny_model_dir), tiny_model_dir, researcher)
    later = [Path(ModelRef.objects.get(run=run, step=step).path) for step in (4, 6)]
    queued.clear()  # the run's first launch
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    sizes = page.locator("#checkpoints tbody tr").evaluate_all(
        "rows => rows.map(row => [row.dataset.step, row.cells[1].textContent.replace('\\u00a0', ' ')])")
    assert sizes == [[str(step), _size(run, step)] for step in (2, 4, 6)]  # each checkpoint's size on disk
    assert sizes[0][1] != sizes[2][1]

    page.select_option("select[name=checkpoint]", label="step 2 (optimizer restarts)")
    page.click("#resume-run")
    confirm = page.locator("#resume-confirm")
    confirm.wait_for()
    assert "Resuming from step 2 removes 2 later checkpoints" in confirm.inner_text()
    assert [text.replace("\xa0", " ") for text in confirm.locator("li").all_inner_texts()] == [
        f"step 4 · {_size(run, 4)}", f"step 6 · {_size(run, 6)}"]
    # asked, not done: every row and directory is still there and nothing was queued
    assert _steps(run) == [2, 4, 6] and all(directory.is_dir() for directory in later)
    assert MetricRow.objects.filter(run=run).count() == 6 and queued == []
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED

    page.click("#confirm-resume")
    page.wait_for_selector("#run-status-badge:text('queued')")
    assert _steps(run) == [2] and not any(directory.exists() for directory in later)
    assert list(MetricRow.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
    assert queued == [run.pk]
    assert page.js_errors == []


def test_keeping_them_removes_nothing(page, live_server, researcher, settings, tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    settings.RUNS_DIR = tmp_path / "runs"
    run = finished_run_with_checkpoints(register_tiny_model(tiny_model_dir), tiny_model_dir, researcher)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.select_option("select[name=checkpoint]", label="step 4 (optimizer restarts)")
    page.click("#resume-run")
    page.click("#resume-confirm >> text=Keep them")
    page.wait_for_selector("#resume-confirm", state="detached")
    assert _steps(run) == [2, 4, 6]
    assert all(Path(model.path).is_dir() for model in ModelRef.objects.filter(run=run))
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED
