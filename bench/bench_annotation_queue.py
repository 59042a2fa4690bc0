"""Queue latency: 32 annotators (processes) at once ask for the next item and submit a ranking, against Postgres.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python bench/bench_annotation_queue.py

Runs on a throw-away test database (created and dropped here). Prints median and p95 latency of next-item,
submit, and the two together, and checks that no item got more rankings than its overlap.
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django

django.setup()

from django.db import connection, connections  # noqa: E402


@contextmanager
def temporary_database() -> Iterator[None]:
    """A fresh, migrated test database for the benchmark, dropped afterwards."""
    if connection.vendor != "postgresql":
        raise SystemExit("this benchmark needs Postgres: set DATABASE_URL=postgres://...")
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        yield
    finally:
        connections.close_all()
        connection.creation.destroy_test_db(old_name, verbosity=0)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _annotate(project_id: int, user_id: int) -> dict[str, list[float]]:
    """One annotator (its own process and connection, like a web worker): next item, submit, until none."""
    from django.contrib.auth.models import User

    from webapp.annotation import services
    from webapp.annotation.models import Project
    from webapp.annotation.selectors import responses_shown

    project, user = Project.objects.get(pk=project_id), User.objects.get(pk=user_id)
    timings: dict[str, list[float]] = {"next": [], "submit": [], "both": []}
    while True:
        started = time.perf_counter()
        lease = services.assignment_lease_next(project=project, annotator=user)
        leased = time.perf_counter()
        if lease is None:
            break
        shown = responses_shown(prompt=lease.prompt, annotator=user)
        services.ranking_submit(assignment_id=lease.pk, annotator=user, tiers=[[r.pk] for r in shown])
        finished = time.perf_counter()
        timings["next"].append(leased - started)
        timings["submit"].append(finished - leased)
        timings["both"].append(finished - started)
    connections.close_all()
    return timings


def run(annotators: int, items: int, overlap: int) -> None:
    from webapp.accounts.services import user_create
    from webapp.annotation import services
    from webapp.annotation.importing import ImportRecord
    from webapp.annotation.models import Ranking

    users = [user_create(username=f"bench{i}", role="annotator", password="bench-password-1")[0] for i in range(annotators)]
    project = services.project_create(name="bench", responses_per_item=4, annotators_per_item=overlap, members=users)
    services.prompts_import(project=project, records=[
        ImportRecord(line=i, external_id=str(i), text=f"prompt {i}", responses=tuple(f"r{i}-{k}" for k in range(4)))
        for i in range(items)
    ])
    connections.close_all()  # each forked annotator process opens its own connection
    context = multiprocessing.get_context("fork")
    wall = time.perf_counter()
    with context.Pool(annotators) as pool:
        results = pool.starmap(_annotate, [(project.pk, user.pk) for user in users])
    wall = time.perf_counter() - wall
    timings = {name: [value for result in results for value in result[name]] for name in ("next", "submit", "both")}
    per_item = Counter(Ranking.objects.values_list("prompt_id", flat=True))
    assert set(per_item.values()) == {overlap} and len(per_item) == items, "overlap violated"
    print(f"{annotators} annotators, {items} items x overlap {overlap} = {len(timings['both'])} rankings "
          f"in {wall:.1f} s ({len(timings['both']) / wall:.0f} rankings/s); every item has exactly {overlap}")
    for name, values in timings.items():
        print(f"  {name:>6}: median {1000 * statistics.median(values):6.1f} ms   p95 {1000 * percentile(values, 0.95):6.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotators", type=int, default=32)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--overlap", type=int, default=2)
    args = parser.parse_args()
    with temporary_database():
        run(args.annotators, args.items, args.overlap)


if __name__ == "__main__":
    main()
