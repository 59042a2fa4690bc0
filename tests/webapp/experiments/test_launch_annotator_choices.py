"""The launch form's `annotator:<username>` aggregations: one a person, however many pairs they gave (the walk of
issue 32 found the demo annotator offered 19 times, once a pair: SELECT DISTINCT with the pairs' ordering by id)."""

import pytest

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import selectors, services


@pytest.mark.django_db
def test_each_annotator_who_gave_pairs_is_offered_once(researcher):
    first, second = make_annotators(2)
    project = make_project(items=3, responses=3, overlap=2, members=[first, second], owner=researcher)
    for annotator in (first, second):
        while (assignment := services.assignment_lease_next(project=project, annotator=annotator)) is not None:
            responses = list(assignment.prompt.responses.values_list("pk", flat=True))
            services.ranking_submit(assignment_id=assignment.pk, annotator=annotator,
                                    tiers=[[response] for response in responses])
    assert project.pairs.count() == 18  # 3 items × 3 pairs × 2 annotators
    assert selectors.pair_annotators_for_training(researcher) == sorted([first.username, second.username])
