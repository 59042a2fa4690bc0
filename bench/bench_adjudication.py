"""What label sources cost: a project of ranked items (3 annotators each, random rankings of 4 responses, seeded),
on Postgres: the items' standings (agreement, queue, source), the adjudication page, and the pairs export under
`all` and `resolved`, through the real views.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python bench/bench_adjudication.py [--items 5000]
"""

import argparse
import random
import time

from bench_annotation_queue import temporary_database
from bench_export import timed_download

ANNOTATORS, RESPONSES = 3, 4


def build(items: int, owner, seed: int = 0) -> int:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from webapp.annotation import services
    from webapp.annotation.importing import ImportRecord
    from webapp.annotation.models import Assignment, Ranking

    people = [User.objects.create_user(f"bench-annotator-{n}", password="bench-password-1") for n in range(ANNOTATORS)]
    project = services.project_create(name="adjudication bench", responses_per_item=RESPONSES,
                                      annotators_per_item=ANNOTATORS, owner=owner)
    services.prompts_import(project=project, records=[
        ImportRecord(line=i, external_id=str(i), text=f"prompt {i}",
                     responses=tuple(f"response {i}-{k}" for k in range(RESPONSES))) for i in range(items)])
    now, draw = timezone.now(), random.Random(seed)
    prompts = list(project.prompts.order_by("id"))
    responses = {p.pk: list(p.responses.order_by("id").values_list("id", flat=True)) for p in prompts}
    assignments = Assignment.objects.bulk_create(
        Assignment(prompt=p, annotator=person, status=Assignment.Status.SUBMITTED, leased_at=now, expires_at=now)
        for p in prompts for person in people)
    Ranking.objects.bulk_create(
        Ranking(assignment=a, prompt_id=a.prompt_id, annotator_id=a.annotator_id,
                tiers=[[r] for r in draw.sample(responses[a.prompt_id], RESPONSES)]) for a in assignments)
    services.preference_pairs_rebuild(project=project)
    return project.pk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000)
    args = parser.parse_args()
    with temporary_database():
        from collections import Counter

        from django.test import Client

        from webapp.accounts.services import user_create
        from webapp.annotation import selectors

        researcher = user_create(username="bench-researcher", role="researcher", password="bench-pw-1")[0]
        project_id = build(args.items, researcher)
        started = time.perf_counter()
        standings = selectors.item_standings(project_id=project_id)
        seconds = time.perf_counter() - started
        sources = Counter(standing.source for standing in standings.values())
        print(f"{args.items} items, {args.items * ANNOTATORS} answers: standings in {seconds:.2f} s; "
              f"queued {sum(standing.queued for standing in standings.values())}; {dict(sorted(sources.items()))}")
        client = Client(HTTP_HOST="localhost")
        client.force_login(researcher)
        for url in (f"/projects/{project_id}/adjudication/", f"/projects/{project_id}/"):
            started = time.perf_counter()
            assert client.get(url).status_code == 200
            print(f"  GET {url:<28} {time.perf_counter() - started:6.2f} s")
        for aggregation in ("all", "resolved"):
            seconds, size, lines = timed_download(client, f"/projects/{project_id}/export/pairs.jsonl/?aggregation="
                                                          f"{aggregation}")
            print(f"  pairs.jsonl {aggregation:<9} {lines:>7} rows  {seconds:6.2f} s")


if __name__ == "__main__":
    main()
