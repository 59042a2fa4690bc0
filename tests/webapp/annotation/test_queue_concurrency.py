"""16 annotators asking for items at once, overlap 2, 50 items: every item gets exactly 2 rankings from 2 people."""

import random
import threading
from collections import Counter

import pytest
from django.db import connection, connections

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, PreferencePair, Ranking
from webapp.annotation.selectors import responses_shown

pytestmark = pytest.mark.django_db(transaction=True)


def _annotate_until_empty(project, annotator, errors: list[str], start: threading.Barrier) -> None:
    rng = random.Random(annotator.pk)
    try:
        start.wait()
        while True:
            assignment = services.assignment_lease_next(project=project, annotator=annotator)
            if assignment is None:
                return
            shown = [r.pk for r in responses_shown(prompt=assignment.prompt, annotator=annotator)]
            rng.shuffle(shown)
            tiers = [[response] for response in shown]
            services.ranking_submit(assignment_id=assignment.pk, annotator=annotator, tiers=tiers, seconds_spent=1)
            # a double click: the second submit must not record a second ranking
            services.ranking_submit(assignment_id=assignment.pk, annotator=annotator, tiers=tiers, seconds_spent=1)
    except Exception as error:  # reported by the main thread
        errors.append(f"{annotator.username}: {type(error).__name__}: {error}")
    finally:
        connections.close_all()


def test_sixteen_annotators_in_parallel_fill_every_item_exactly_to_its_overlap():
    if connection.vendor != "postgresql":
        pytest.skip("the concurrency guarantee is tested on Postgres (SELECT ... FOR UPDATE SKIP LOCKED)")
    annotators = make_annotators(16)
    project = make_project(items=50, responses=3, overlap=2, members=annotators)
    errors: list[str] = []
    start = threading.Barrier(len(annotators))
    threads = [threading.Thread(target=_annotate_until_empty, args=(project, a, errors, start)) for a in annotators]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)

    assert errors == []
    per_item = Counter(Ranking.objects.filter(prompt__project=project).values_list("prompt_id", flat=True))
    assert len(per_item) == 50
    assert set(per_item.values()) == {2}
    people = Counter(Ranking.objects.values_list("prompt_id", "annotator_id"))
    assert set(people.values()) == {1}
    assert Ranking.objects.count() == 100
    assert not Assignment.objects.filter(status=Assignment.Status.LEASED).exists()
    assert PreferencePair.objects.count() == 100 * 3  # C(3,2) pairs per ranking, no ties
    assert project.prompts.filter(ranking_count=2).count() == 50
