"""Export time for 100k preference pairs (TRL JSONL and CSV streamed, and the datasets zip, through the real
views), on Postgres; for the zip also the peak of extra anonymous memory while the server builds it.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python bench/bench_export.py
"""

import argparse
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench_annotation_queue import temporary_database


def build(pairs: int) -> int:
    """A project with pairs / 10 rankings of 5 responses each (C(5,2) = 10 pairs per ranking)."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from webapp.annotation import services
    from webapp.annotation.importing import ImportRecord
    from webapp.annotation.models import Assignment, Ranking

    annotator = User.objects.create_user("bench-annotator", password="bench-password-1")
    project = services.project_create(name="export bench", responses_per_item=5)
    items = pairs // 10
    services.prompts_import(project=project, records=[
        ImportRecord(line=i, external_id=str(i), text=f"prompt {i} " + "lorem ipsum " * 20,
                     responses=tuple(f"response {i}-{k} " + "dolor sit amet " * 30 for k in range(5)))
        for i in range(items)
    ])
    now = timezone.now()
    prompts = list(project.prompts.order_by("id"))
    assignments = Assignment.objects.bulk_create(
        Assignment(prompt=p, annotator=annotator, status=Assignment.Status.SUBMITTED, leased_at=now, expires_at=now)
        for p in prompts
    )
    responses = {p.pk: list(p.responses.order_by("id").values_list("id", flat=True)) for p in prompts}
    Ranking.objects.bulk_create(
        Ranking(assignment=a, prompt_id=a.prompt_id, annotator=annotator, tiers=[[r] for r in responses[a.prompt_id]])
        for a in assignments
    )
    services.preference_pairs_rebuild(project=project)
    return project.pk


def timed_download(client, url: str) -> tuple[float, int, int]:
    started = time.perf_counter()
    response = client.get(url)
    size = lines = 0
    for chunk in response.streaming_content:
        size += len(chunk)
        lines += chunk.count(b"\n")
    return time.perf_counter() - started, size, lines


def anonymous_memory_mb() -> int:
    """This process's resident anonymous memory (file-backed pages, e.g. memory-mapped Arrow files, excluded)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


@contextmanager
def peak_anonymous_growth_mb() -> Iterator[list[int]]:
    """Yields a one-item list that holds, on exit, the peak growth of anonymous memory during the block."""
    base, peak, done = anonymous_memory_mb(), [0], threading.Event()

    def watch() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], anonymous_memory_mb() - base)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield peak
    finally:
        done.set()
        watcher.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    args = parser.parse_args()
    with temporary_database():
        from django.test import Client

        from webapp.accounts.services import user_create
        from webapp.annotation.models import PreferencePair

        started = time.perf_counter()
        project_id = build(args.pairs)
        print(f"built {PreferencePair.objects.count()} pairs in {time.perf_counter() - started:.1f} s")
        client = Client()
        client.force_login(user_create(username="bench-researcher", role="researcher", password="bench-pw-1")[0])
        for kind in ("pairs.jsonl", "pairs.csv"):
            seconds, size, lines = timed_download(client, f"/projects/{project_id}/export/{kind}/")
            print(f"  {kind:<12} {lines:>7} lines  {size / 1e6:7.1f} MB  {seconds:6.2f} s  ({lines / seconds:,.0f} lines/s)")
        import datasets  # noqa: F401  (loaded before measuring, as a warm server would have it)

        with peak_anonymous_growth_mb() as peak:
            seconds, size, _ = timed_download(client, f"/projects/{project_id}/export/dataset.zip/")
        print(f"  {'dataset.zip':<12} {args.pairs:>7} pairs  {size / 1e6:7.1f} MB  {seconds:6.2f} s  "
              f"(peak extra anonymous memory {peak[0]} MB)")


if __name__ == "__main__":
    main()
