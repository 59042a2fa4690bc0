"""The run list's start, duration and ETA: the ETA counts the end of a run (its final checkpoint and samples), as
measured on the kind's latest succeeded runs, and says "finishing" once every step is logged."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.experiments.models import MetricRow, Run
from webapp.experiments.selectors import duration_text, kind_tail_seconds, run_summaries

pytestmark = pytest.mark.django_db


def _run(researcher, *, status: str, step: int, total: int = 100, started_s_ago: float | None = 100.0,
         finished_s_ago: float | None = None, last_row_s_ago: float | None = None, kind: str = "grpo") -> Run:
    now = timezone.now()
    run = Run.objects.create(
        name=f"{status} {step}", kind=kind, config={}, data_source={"type": "arithmetic", "level": 1, "size": 8},
        status=status, current_step=step, total_steps=total, created_by=researcher,
        started_at=now - timedelta(seconds=started_s_ago) if started_s_ago is not None else None,
        finished_at=now - timedelta(seconds=finished_s_ago) if finished_s_ago is not None else None)
    if last_row_s_ago is not None:
        MetricRow.objects.create(run=run, step=step, wall_time=(now - timedelta(seconds=last_row_s_ago)).timestamp(),
                                 tokens_seen=0, metrics={"loss": 0.5})
    return run


def _finished_with_tail(researcher, tail_s: float, *, kind: str = "grpo") -> Run:
    return _run(researcher, status=Run.Status.SUCCEEDED, step=100, started_s_ago=5000, finished_s_ago=1000,
                last_row_s_ago=1000 + tail_s, kind=kind)


def _summary(run: Run):
    return next(summary for summary in run_summaries(Run.objects.all()) if summary.run.pk == run.pk)


def test_a_kind_s_tail_is_the_median_of_its_latest_succeeded_runs_last_step_to_end(researcher):
    assert kind_tail_seconds("grpo") is None
    for tail in (30, 50, 40):
        _finished_with_tail(researcher, tail)
    _finished_with_tail(researcher, 900, kind="sft")  # another kind's tail does not count
    _run(researcher, status=Run.Status.FAILED, step=100, finished_s_ago=10, last_row_s_ago=500)  # nor a failed run
    assert kind_tail_seconds("grpo") == pytest.approx(40, abs=0.5)
    assert kind_tail_seconds("sft") == pytest.approx(900, abs=0.5)


def test_the_eta_of_a_running_run_adds_the_kind_s_tail_to_its_remaining_steps(researcher):
    running = _run(researcher, status=Run.Status.RUNNING, step=50, started_s_ago=100, last_row_s_ago=1)
    assert _summary(running).eta_s == pytest.approx(100, abs=2)  # no finished run of its kind yet: steps alone
    for tail in (30, 50, 40):
        _finished_with_tail(researcher, tail)
    summary = _summary(running)
    assert summary.eta_s == pytest.approx(140, abs=2)
    assert not summary.finishing


def test_a_run_with_every_step_logged_is_finishing_and_counts_down_the_tail(researcher):
    for tail in (60, 60):
        _finished_with_tail(researcher, tail)
    finishing = _run(researcher, status=Run.Status.RUNNING, step=100, started_s_ago=300, last_row_s_ago=15)
    summary = _summary(finishing)
    assert summary.finishing
    assert summary.eta_s == pytest.approx(45, abs=2)
    overdue = _run(researcher, status=Run.Status.RUNNING, step=100, started_s_ago=300, last_row_s_ago=200)
    assert _summary(overdue).finishing and _summary(overdue).eta_s == 0


def test_duration_is_start_to_end_or_to_now_while_running(researcher):
    finished = _run(researcher, status=Run.Status.SUCCEEDED, step=100, started_s_ago=700, finished_s_ago=100)
    running = _run(researcher, status=Run.Status.RUNNING, step=10, started_s_ago=90)
    queued = _run(researcher, status=Run.Status.QUEUED, step=0, started_s_ago=None)
    assert _summary(finished).duration_s == pytest.approx(600, abs=1)
    assert _summary(running).duration_s == pytest.approx(90, abs=2)
    assert _summary(queued).duration_s is None and _summary(queued).eta_s is None
    assert [duration_text(s) for s in (42.4, 185, 7620)] == ["42 s", "3 min 5 s", "2 h 07 min"]


def test_the_list_page_shows_start_duration_and_finishing_instead_of_zero_seconds(researcher_client, researcher):
    for tail in (60, 60):
        _finished_with_tail(researcher, tail)
    finishing = _run(researcher, status=Run.Status.RUNNING, step=100, started_s_ago=300, last_row_s_ago=15)
    finished = _run(researcher, status=Run.Status.SUCCEEDED, step=100, started_s_ago=700, finished_s_ago=100)
    html = researcher_client.get("/runs/rows").content.decode()
    row = html[html.index(f'data-run="{finishing.pk}"'):]
    row = row[:row.index("</tr>")]
    assert "finishing (saving checkpoint…)" in row and re.search(r"~4[4-6] s", row), row
    assert re.search(r"5 min( [1-2] s)? <span class=\"muted\">so far", row), row
    assert finishing.started_at.strftime("%Y-%m-%d") in row
    row = html[html.index(f'data-run="{finished.pk}"'):]
    assert "10 min</td>" in row[:row.index("</tr>")]
    page = researcher_client.get("/runs/").content.decode()
    assert "<th>Started</th><th>Duration</th>" in page
