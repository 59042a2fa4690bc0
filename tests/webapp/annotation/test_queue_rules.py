"""The queue: least-annotated first, never twice to one person, never past the overlap, leases expire."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, PreferencePair, Ranking
from webapp.annotation.selectors import responses_shown

pytestmark = pytest.mark.django_db


def _rank_in_shown_order(assignment, annotator, **extra):
    shown = responses_shown(prompt=assignment.prompt, annotator=annotator)
    return services.ranking_submit(assignment_id=assignment.pk, annotator=annotator,
                                   tiers=[[r.pk] for r in shown], **extra)


def test_next_item_is_the_least_annotated_and_the_same_lease_comes_back_until_submitted():
    first, second = make_annotators(2)
    project = make_project(items=2, overlap=2)
    lease = services.assignment_lease_next(project=project, annotator=first)
    assert services.assignment_lease_next(project=project, annotator=first) == lease
    # the other person gets the untouched item, not the one being ranked
    other = services.assignment_lease_next(project=project, annotator=second)
    assert other.prompt_id != lease.prompt_id


def test_an_item_is_never_given_twice_to_one_person_nor_past_its_overlap():
    annotators = make_annotators(3)
    project = make_project(items=1, overlap=2)
    for annotator in annotators[:2]:
        _rank_in_shown_order(services.assignment_lease_next(project=project, annotator=annotator), annotator)
        assert services.assignment_lease_next(project=project, annotator=annotator) is None
    assert services.assignment_lease_next(project=project, annotator=annotators[2]) is None
    assert Ranking.objects.count() == 2


def test_an_expired_lease_returns_to_the_pool():
    first, second = make_annotators(2)
    project = make_project(items=1, overlap=1)
    lease = services.assignment_lease_next(project=project, annotator=first)
    assert services.assignment_lease_next(project=project, annotator=second) is None
    Assignment.objects.filter(pk=lease.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    taken_over = services.assignment_lease_next(project=project, annotator=second)
    assert taken_over is not None and taken_over.prompt_id == lease.prompt_id
    _rank_in_shown_order(taken_over, second)
    # the first annotator comes back too late: the item has its ranking, theirs is refused
    with pytest.raises(ValidationError, match="lease expired"):
        _rank_in_shown_order(lease, first)


def test_submitting_twice_records_one_ranking_and_one_set_of_pairs():
    (annotator,) = make_annotators(1)
    project = make_project(items=1, responses=4)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    first = _rank_in_shown_order(lease, annotator, seconds_spent=3)
    again = _rank_in_shown_order(lease, annotator, seconds_spent=3)
    assert first.pk == again.pk
    assert Ranking.objects.count() == 1
    assert PreferencePair.objects.count() == 6
    assert lease.prompt.__class__.objects.get(pk=lease.prompt_id).ranking_count == 1


def test_a_ranking_must_order_every_shown_response_and_ties_give_no_pair():
    (annotator,) = make_annotators(1)
    project = make_project(items=1, responses=3)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    a, b, c = (r.pk for r in responses_shown(prompt=lease.prompt, annotator=annotator))
    with pytest.raises(ValidationError, match="1 not ranked"):
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[a], [b]])
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[a, b], [c]])
    pairs = sorted((p.chosen_id, p.rejected_id, p.weight, p.margin) for p in PreferencePair.objects.all())
    assert pairs == sorted([(a, c, 1 / 3, 1.0), (b, c, 1 / 3, 1.0)])


def test_skip_gives_the_item_to_others_and_never_back():
    first, second = make_annotators(2)
    project = make_project(items=1, overlap=1)
    lease = services.assignment_lease_next(project=project, annotator=first)
    services.ranking_skip(assignment_id=lease.pk, annotator=first)
    assert services.assignment_lease_next(project=project, annotator=first) is None
    assert services.assignment_lease_next(project=project, annotator=second).prompt_id == lease.prompt_id


def test_each_annotator_sees_the_responses_in_an_order_of_their_own():
    annotators = make_annotators(6)
    project = make_project(items=1, responses=4, overlap=6)
    prompt = project.prompts.get()
    orders = {tuple(r.pk for r in responses_shown(prompt=prompt, annotator=a)) for a in annotators}
    assert len(orders) > 1
    assert all(sorted(order) == sorted(next(iter(orders))) for order in orders)
