"""Metrics endpoint of a run of 100k steps x 20 metrics: response time and points per series, against Postgres.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python bench/bench_metrics_endpoint.py

Runs on a throw-away test database (created and dropped here). The request goes through the whole Django stack
(URL routing, login, role check, query, JSON decoding, downsampling, JSON encoding) with the test client.
Prints the median and max of the full chart load (uncached: the cache is cleared before each request, which is
also what a running run always costs; and cached: a finished run's series are kept until the run changes), a
zoomed request (10% of the range, full resolution; one metric as a chart asks, and all 20) and a live poll (the
rows after the last step seen), and the largest number of points any series returned.
"""

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django

django.setup()

from bench_annotation_queue import temporary_database  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.test import Client  # noqa: E402

from webapp.accounts.services import user_create  # noqa: E402
from webapp.experiments.models import MetricRow, Run  # noqa: E402

METRIC_NAMES = ["loss", "reward/mean", "reward/std", "kl", "entropy", "clip_ratio/low", "clip_ratio/high",
                "advantage/mean", "completion/mean_length", "completion/clipped_ratio", "grad_norm", "lr",
                "throughput/tokens_per_s", "time/step_s", "rewards/chosen", "rewards/rejected", "rewards/accuracy",
                "rewards/margin", "value/loss", "eval/accuracy"]


def metrics_at(step: int, phase: float) -> dict:
    values = {name: math.sin(step / 500 + index + phase) + index for index, name in enumerate(METRIC_NAMES)}
    if step % 25_000 == 0:
        values["loss"] = "NaN"  # stored spelling of a non-finite value
    return values


def create_run(*, steps: int, name: str, phase: float = 0.0) -> Run:
    """A finished run with `steps` metric rows of the 20 metrics (written in batches, as the sink does)."""
    run = Run.objects.create(name=name, kind="grpo", config={"lr": 1e-6, "seed": int(phase * 10)},
                             data_source={"type": "arithmetic", "level": 1, "size": 64}, status=Run.Status.SUCCEEDED,
                             current_step=steps, total_steps=steps, metric_names=sorted(METRIC_NAMES))
    batch = 5000
    for start in range(1, steps + 1, batch):
        MetricRow.objects.bulk_create([
            MetricRow(run=run, step=step, wall_time=1.7e9 + step * 0.5, tokens_seen=step * 512,
                      metrics=metrics_at(step, phase))
            for step in range(start, min(start + batch, steps + 1))
        ])
    return run


def researcher_client() -> Client:
    user, _ = user_create(username="bench-researcher", role="researcher", password="bench-password-1")
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    return client


def timed_get(client: Client, url: str) -> tuple[float, dict]:
    started = time.perf_counter()
    response = client.get(url)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"{url}: HTTP {response.status_code}")
    return elapsed, response.json()


def uncached_get(client: Client, url: str) -> tuple[float, dict]:
    cache.clear()
    return timed_get(client, url)


def largest_series(answer: dict) -> int:
    return max(len(series["x"]) + len(series["nonfinite_x"]) for series in answer["series"].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with temporary_database():
        started = time.perf_counter()
        run = create_run(steps=args.steps, name="bench")
        print(f"wrote {args.steps} rows x {len(METRIC_NAMES)} metrics in {time.perf_counter() - started:.1f} s")
        client = researcher_client()
        url = f"/runs/{run.pk}/metrics"
        full = [uncached_get(client, url) for _ in range(args.repeats)]
        cached = [timed_get(client, url) for _ in range(args.repeats)]
        answer = full[-1][1]
        if cached[-1][1] != answer:
            raise SystemExit("the cached answer differs from the computed one")
        low, high = args.steps * 0.45, args.steps * 0.55
        zoom_one = [timed_get(client, f"{url}?x_min={low}&x_max={high}&metric=loss") for _ in range(args.repeats)]
        zoom = [timed_get(client, f"{url}?x_min={low}&x_max={high}") for _ in range(args.repeats)]
        poll = [timed_get(client, f"{url}?after={args.steps - 2}") for _ in range(args.repeats)]
        loss = answer["series"]["loss"]
        print(f"series: {len(answer['series'])}; largest series: {largest_series(answer)} points "
              f"(zoomed: {largest_series(zoom[-1][1])}); loss NaN markers kept: {len(loss['nonfinite_x'])}")
        for label, timings in (("full chart load", full), ("full, cached", cached), ("zoom 10%, 1 metric", zoom_one),
                               ("zoom 10%, all", zoom), ("live poll", poll)):
            seconds = [elapsed for elapsed, _ in timings]
            print(f"{label:>18}: median {statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms")
        if largest_series(answer) > 2000 or largest_series(zoom[-1][1]) > 2000:
            raise SystemExit("a series has more than 2,000 points")


if __name__ == "__main__":
    main()
