"""Going back to an answer: ranking_withdraw deletes one's own ranking (or skip) and its pairs, gives the lease
back, within the project's lease time only, and never lets the item go past its overlap."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, PreferencePair, Prompt, Ranking
from webapp.annotation.selectors import previous_answer, responses_shown

pytestmark = pytest.mark.django_db


def _rank(assignment, annotator) -> Ranking:
    shown = responses_shown(prompt=assignment.prompt, annotator=annotator)
    return services.ranking_submit(assignment_id=assignment.pk, annotator=annotator, tiers=[[r.pk] for r in shown])


def test_withdraw_deletes_the_ranking_and_its_pairs_and_leases_the_item_again():
    annotator, other = make_annotators(2)
    project = make_project(items=2, responses=3, overlap=1)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    ranking = _rank(lease, annotator)
    current = services.assignment_lease_next(project=project, annotator=annotator)
    assert PreferencePair.objects.filter(ranking=ranking).count() == 3

    withdrawn = services.ranking_withdraw(ranking_id=ranking.pk, annotator=annotator)

    assert withdrawn.tiers == ranking.tiers
    assert not Ranking.objects.exists() and not PreferencePair.objects.exists()
    assert Prompt.objects.get(pk=lease.prompt_id).ranking_count == 0
    again = Assignment.objects.get(pk=lease.pk)
    assert again.status == Assignment.Status.LEASED and again.expires_at > timezone.now() + timedelta(minutes=29)
    # the reopened item comes first for its annotator and is not handed to anyone else meanwhile
    assert services.assignment_lease_next(project=project, annotator=annotator) == again
    assert services.assignment_lease_next(project=project, annotator=other) is None
    assert current.prompt_id != lease.prompt_id
    _rank(again, annotator)
    assert Prompt.objects.get(pk=lease.prompt_id).ranking_count == 1


def test_withdraw_is_refused_after_the_lease_time_and_for_someone_elses_ranking():
    annotator, other = make_annotators(2)
    project = make_project(items=1, responses=2, overlap=2)
    ranking = _rank(services.assignment_lease_next(project=project, annotator=annotator), annotator)
    with pytest.raises(ValidationError, match="not yours"):
        services.ranking_withdraw(ranking_id=ranking.pk, annotator=other)
    Ranking.objects.filter(pk=ranking.pk).update(created_at=timezone.now() - timedelta(minutes=31))
    assert previous_answer(project=project, user=annotator) is None
    with pytest.raises(ValidationError, match=r"only within 30 minutes \(the project's lease time\)"):
        services.ranking_withdraw(ranking_id=ranking.pk, annotator=annotator)
    assert Ranking.objects.filter(pk=ranking.pk).exists()
    assert Prompt.objects.get().ranking_count == 1


def test_a_skip_is_withdrawn_unless_the_item_went_to_someone_else_meanwhile():
    annotator, other = make_annotators(2)
    project = make_project(items=1, responses=2, overlap=1)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    skip = services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
    services.ranking_withdraw(ranking_id=skip.pk, annotator=annotator)
    assert Assignment.objects.get(pk=lease.pk).status == Assignment.Status.LEASED
    assert Prompt.objects.get().ranking_count == 0

    skip = services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
    assert services.assignment_lease_next(project=project, annotator=other) is not None
    with pytest.raises(ValidationError, match="given to someone else"):
        services.ranking_withdraw(ranking_id=skip.pk, annotator=annotator)
    assert Ranking.objects.get().skipped
    assert Assignment.objects.get(pk=lease.pk).status == Assignment.Status.SKIPPED


def test_all_bad_ignores_partial_ranks_and_gives_no_pairs():
    (annotator,) = make_annotators(1)
    project = make_project(items=1, responses=3)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    first, *_ = (r.pk for r in responses_shown(prompt=lease.prompt, annotator=annotator))
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[first]], all_bad=True)
    assert ranking.all_bad and ranking.tiers == [sorted(r.pk for r in lease.prompt.responses.all())]
    assert not PreferencePair.objects.exists()
    assert Prompt.objects.get().ranking_count == 1
