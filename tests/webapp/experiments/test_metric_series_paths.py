"""The metric series a chart draws: the Postgres and portable readers agree, finished runs are cached safely,
and a cache that is down or full only makes the charts compute again."""

import logging
import math
import shutil

import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from tests.workers.test_faults import PrivateRedis
from webapp import caching
from webapp.env import cache_from_url
from webapp.experiments import selectors, services
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db

STEPS = 3000


def _run(status: str) -> Run:
    finished = status not in (Run.Status.QUEUED, Run.Status.RUNNING)
    return Run.objects.create(name="series", kind="grpo", config={}, data_source={"type": "arithmetic"},
                              status=status, finished_at=timezone.now() if finished else None)


def _metrics(step: int) -> dict[str, float]:
    metrics = {"loss": math.sin(step / 50), "kl": 0.01 * step}
    if step == 1234:
        metrics["loss"] = 80.0  # a single spike
    if step in (700, 701):
        metrics["loss"] = math.nan
    if step == 1800:
        metrics["kl"] = math.inf
    if step == 2900:
        metrics["kl"] = -math.inf
    if step % 100 == 0:
        metrics["eval/accuracy"] = step / STEPS  # logged between other steps only
    if step > STEPS // 2:
        metrics["late"] = -step  # appears halfway
    return metrics


def _write(run: Run, steps: range) -> None:
    services.metric_rows_write(run_id=run.pk, rows=[
        # wall time has equal neighbours (two steps a second) so ties in x are exercised too
        {"step": step, "wall_time": 1000.0 + step // 2, "tokens_seen": step * 64, "metrics": _metrics(step)}
        for step in steps
    ])


def _portable(monkeypatch: pytest.MonkeyPatch, **query) -> dict:
    with monkeypatch.context() as patch:
        patch.setattr(selectors, "COLUMN_READERS", {})
        return selectors.metric_series(**query)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the SQL path runs on Postgres only")
@pytest.mark.parametrize("query", [
    {}, {"x_axis": "wall_time"}, {"x_axis": "tokens_seen"}, {"after_step": 2500}, {"x_min": 600, "x_max": 1900},
    {"x_axis": "wall_time", "x_min": 1400, "x_max": 2000}, {"metrics": ["loss", "late"]}, {"after_step": STEPS},
])
def test_sql_and_portable_paths_give_identical_series(monkeypatch, query):
    run = _run(Run.Status.RUNNING)
    _write(run, range(1, STEPS + 1))
    sql = selectors.metric_series(run_id=run.pk, max_points=100, **query)
    assert sql == _portable(monkeypatch, run_id=run.pk, max_points=100, **query)
    assert all(len(series["x"]) + len(series["nonfinite_x"]) <= 100 for series in sql["series"].values())


def test_downsampled_series_keep_spikes_ends_and_non_finite_markers(monkeypatch):
    run = _run(Run.Status.RUNNING)
    _write(run, range(1, STEPS + 1))
    series = selectors.metric_series(run_id=run.pk, max_points=100)["series"]
    loss, kl = series["loss"], series["kl"]
    assert loss["x"][0] == 1 and loss["x"][-1] == STEPS
    assert max(loss["y"]) == 80.0 and loss["x"][loss["y"].index(80.0)] == 1234
    assert list(zip(loss["nonfinite_x"], loss["nonfinite"], strict=True)) == [(700, "NaN"), (701, "NaN")]
    assert list(zip(kl["nonfinite_x"], kl["nonfinite"], strict=True)) == [(1800, "Infinity"), (2900, "-Infinity")]
    assert series["eval/accuracy"]["x"] == list(range(100, STEPS + 1, 100))
    assert series["late"]["x"][0] == STEPS // 2 + 1


def test_a_finished_run_is_cached_until_rows_are_written_and_a_running_run_never(monkeypatch):
    cache.clear()
    reads = []
    reader = selectors.COLUMN_READERS.get(connection.vendor, selectors._columns_portable)

    def counting_reader(*args):
        reads.append(args)
        return reader(*args)

    monkeypatch.setattr(selectors, "COLUMN_READERS", {connection.vendor: counting_reader})
    finished, running = _run(Run.Status.SUCCEEDED), _run(Run.Status.RUNNING)
    for run in (finished, running):
        _write(run, range(1, 11))
    first = selectors.metric_series(run_id=finished.pk)
    assert selectors.metric_series(run_id=finished.pk) == first and len(reads) == 1
    selectors.metric_series(run_id=finished.pk, x_axis="wall_time")
    selectors.metric_series(run_id=finished.pk, x_min=2, x_max=5)
    assert len(reads) == 3  # another axis and a zoom are other answers
    _write(finished, range(11, 13))  # e.g. a late flush of a worker that was marked failed
    assert selectors.metric_series(run_id=finished.pk)["last_step"] == 12 and len(reads) == 4
    selectors.metric_series(run_id=running.pk)
    _write(running, range(11, 12))
    assert selectors.metric_series(run_id=running.pk)["last_step"] == 11 and len(reads) == 6


def test_only_the_asked_metrics_are_returned(researcher_client, researcher):
    run = _run(Run.Status.RUNNING)
    Run.objects.filter(pk=run.pk).update(created_by=researcher)  # the researcher's run
    _write(run, range(1, 21))
    answer = researcher_client.get(f"/runs/{run.pk}/metrics?metric=loss&metric=late&metric=unknown").json()
    assert list(answer["series"]) == ["loss"] and answer["last_step"] == 20


def test_a_finished_runs_series_are_shared_through_redis_when_cache_url_is_set(settings):
    import redis

    settings.CACHES = {"default": cache_from_url("CACHE_URL", "redis://127.0.0.1:6379/5")}
    client = redis.Redis.from_url("redis://127.0.0.1:6379/5")
    client.flushdb()
    try:
        run = _run(Run.Status.SUCCEEDED)
        _write(run, range(1, 101))
        first = selectors.metric_series(run_id=run.pk)
        assert list(client.scan_iter("preflab:*"))  # stored where other processes see it
        assert selectors.metric_series(run_id=run.pk) == first
    finally:
        client.flushdb()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server for a cache of its own")
def test_the_charts_answer_while_the_caches_redis_is_down_or_full(settings, researcher_client, researcher, tmp_path,
                                                                  monkeypatch, caplog):
    import redis as redis_client

    monkeypatch.setattr(caching, "_skip_until", 0.0)  # no outage left over from another test
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        settings.CACHES = {"default": cache_from_url("CACHE_URL", server.url)}
        run = _run(Run.Status.SUCCEEDED)
        Run.objects.filter(pk=run.pk).update(created_by=researcher)  # the researcher's run
        _write(run, range(1, 101))
        url = f"/runs/{run.pk}/metrics"
        first = researcher_client.get(url)
        assert first.status_code == 200 and list(redis_client.Redis.from_url(server.url).scan_iter("preflab:*"))

        # full (maxmemory reached, nothing to evict): a read still answers, a write is refused
        redis_client.Redis.from_url(server.url).config_set("maxmemory", 1)
        with caplog.at_level(logging.WARNING, logger="webapp.caching"):
            by_time = researcher_client.get(url, {"x": "wall_time"})
        assert by_time.status_code == 200 and sorted(by_time.json()["series"]) == sorted(first.json()["series"])
        assert "the cache could not be written (OutOfMemoryError" in caplog.text

        server.stop()
        monkeypatch.setattr(caching, "_skip_until", 0.0)  # try the stopped server now, not in 30 s
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="webapp.caching"):
            down = researcher_client.get(url)
            again = researcher_client.get(url)  # within the retry delay: the cache is not even tried
        assert down.status_code == 200 and down.json() == first.json()
        assert again.status_code == 200 and again.json() == first.json()
        assert caplog.text.count("the cache could not be read (ConnectionError") == 1
    finally:
        server.stop()
