"""Going back to an answer: ranking_withdraw reopens one's own ranking (or skip) to change it and gives the lease
back, within the project's lease time only. The answer and its pairs stay stored (counted, exported) until a new
answer or a skip on the item replaces them in one transaction; the item never goes past its overlap."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, PreferencePair, Prompt, Ranking
from webapp.annotation.selectors import (
    own_progress,
    own_ranked_count,
    pair_rows,
    previous_answer,
    ranking_rows,
    reopened_answer,
    responses_shown,
)

pytestmark = pytest.mark.django_db


def _rank(assignment, annotator, *, reverse: bool = False, rationale: str = "") -> Ranking:
    shown = responses_shown(prompt=assignment.prompt, annotator=annotator)
    tiers = [[r.pk] for r in (reversed(shown) if reverse else shown)]
    return services.ranking_submit(assignment_id=assignment.pk, annotator=annotator, tiers=tiers, rationale=rationale)


def _pairs(ranking: Ranking) -> set[tuple[int, int]]:
    return set(PreferencePair.objects.filter(ranking=ranking).values_list("chosen_id", "rejected_id"))


def test_back_keeps_the_ranking_and_its_pairs_until_a_new_ranking_replaces_them():
    annotator, other = make_annotators(2)
    project = make_project(items=2, responses=3, overlap=1)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    ranking = _rank(lease, annotator, rationale="first thoughts")
    current = services.assignment_lease_next(project=project, annotator=annotator)
    first_pairs = _pairs(ranking)
    assert len(first_pairs) == 3

    reopened = services.ranking_withdraw(ranking_id=ranking.pk, annotator=annotator)

    # nothing is deleted: the answer still counts, is exported, and is what the item shows
    assert reopened.pk == ranking.pk and Ranking.objects.get().tiers == ranking.tiers
    assert _pairs(ranking) == first_pairs
    assert Prompt.objects.get(pk=lease.prompt_id).ranking_count == 1
    assert own_ranked_count(project=project, user=annotator) == 1
    assert len(list(pair_rows(project_id=project.pk))) == 3 and len(list(ranking_rows(project_id=project.pk))) == 1
    again = Assignment.objects.get(pk=lease.pk)
    assert again.status == Assignment.Status.LEASED and again.expires_at > timezone.now() + timedelta(minutes=29)
    assert reopened_answer(assignment=again).rationale == "first thoughts"
    # the reopened item comes first for its annotator and is not handed to anyone else meanwhile
    assert services.assignment_lease_next(project=project, annotator=annotator) == again
    assert services.assignment_lease_next(project=project, annotator=other) is None
    assert current.prompt_id != lease.prompt_id

    replaced = _rank(again, annotator, reverse=True, rationale="second thoughts")

    assert replaced.pk == ranking.pk and Ranking.objects.count() == 1
    assert replaced.tiers == ranking.tiers[::-1] and replaced.rationale == "second thoughts"
    assert _pairs(replaced) == {(rejected, chosen) for chosen, rejected in first_pairs}
    assert Prompt.objects.get(pk=lease.prompt_id).ranking_count == 1
    assert Assignment.objects.get(pk=lease.pk).status == Assignment.Status.SUBMITTED
    assert reopened_answer(assignment=Assignment.objects.get(pk=lease.pk)) is None
    # sent twice (a double click): the second submit changes nothing
    assert _rank(again, annotator).tiers == replaced.tiers


def test_skip_on_a_reopened_item_replaces_the_ranking_and_frees_its_place():
    annotator, other = make_annotators(2)
    project = make_project(items=1, responses=3, overlap=1)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    ranking = _rank(lease, annotator, rationale="why")
    services.ranking_withdraw(ranking_id=ranking.pk, annotator=annotator)
    assert services.assignment_lease_next(project=project, annotator=other) is None

    skip = services.ranking_skip(assignment_id=lease.pk, annotator=annotator)

    assert skip.pk == ranking.pk and skip.skipped and skip.tiers == [] and skip.rationale == ""
    assert not PreferencePair.objects.exists()
    assert Prompt.objects.get().ranking_count == 0
    assert own_ranked_count(project=project, user=annotator) == 0
    assert Assignment.objects.get(pk=lease.pk).status == Assignment.Status.SKIPPED
    assert services.assignment_lease_next(project=project, annotator=other) is not None


def test_back_twice_keeps_both_answers_and_reopens_them_oldest_first():
    (annotator,) = make_annotators(1)
    project = make_project(items=3, responses=2, overlap=2, members=[annotator])
    first_lease = services.assignment_lease_next(project=project, annotator=annotator)
    first = _rank(first_lease, annotator)
    second = _rank(services.assignment_lease_next(project=project, annotator=annotator), annotator)
    third_lease = services.assignment_lease_next(project=project, annotator=annotator)

    assert previous_answer(project=project, user=annotator) == second
    services.ranking_withdraw(ranking_id=second.pk, annotator=annotator)
    # the second Back reopens the answer before, not the reopened one again
    assert previous_answer(project=project, user=annotator) == first
    services.ranking_withdraw(ranking_id=first.pk, annotator=annotator)
    assert previous_answer(project=project, user=annotator) is None
    # reopening again (a second Back sent meanwhile) changes nothing
    assert services.ranking_withdraw(ranking_id=first.pk, annotator=annotator) == first

    assert list(Ranking.objects.order_by("pk").values_list("pk", "tiers")) == [(first.pk, first.tiers),
                                                                              (second.pk, second.tiers)]
    assert PreferencePair.objects.count() == 2
    assert own_ranked_count(project=project, user=annotator) == 2
    assert services.assignment_lease_next(project=project, annotator=annotator) == first_lease

    # the tab is closed: the reopened leases run out and the answers stay, never offered to their annotator anew
    Assignment.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert Ranking.objects.count() == 2 and PreferencePair.objects.count() == 2
    assert services.assignment_lease_next(project=project, annotator=annotator).prompt_id == third_lease.prompt_id
    (row,) = own_progress(user=annotator)
    assert (row.ranked, row.available) == (2, 1)


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
    assert Assignment.objects.get(annotator=annotator).status == Assignment.Status.SUBMITTED


def test_a_skip_is_reopened_unless_the_item_went_to_someone_else_meanwhile():
    annotator, other = make_annotators(2)
    project = make_project(items=1, responses=2, overlap=1)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    skip = services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
    services.ranking_withdraw(ranking_id=skip.pk, annotator=annotator)
    assert Assignment.objects.get(pk=lease.pk).status == Assignment.Status.LEASED
    assert Ranking.objects.get().skipped and Prompt.objects.get().ranking_count == 0
    # the reopened skip holds the item's one place
    assert services.assignment_lease_next(project=project, annotator=other) is None
    ranking = _rank(lease, annotator)
    assert ranking.pk == skip.pk and not ranking.skipped and Prompt.objects.get().ranking_count == 1

    services.ranking_withdraw(ranking_id=ranking.pk, annotator=annotator)
    skip = services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
    assert Prompt.objects.get().ranking_count == 0
    assert services.assignment_lease_next(project=project, annotator=other) is not None
    with pytest.raises(ValidationError, match="given to someone else"):
        services.ranking_withdraw(ranking_id=skip.pk, annotator=annotator)
    assert Ranking.objects.get().skipped
    assert Assignment.objects.get(pk=lease.pk).status == Assignment.Status.SKIPPED


def test_a_reopened_ranking_leaves_the_others_place_in_the_overlap():
    annotator, other = make_annotators(2)
    project = make_project(items=1, responses=2, overlap=2)
    ranking = _rank(services.assignment_lease_next(project=project, annotator=annotator), annotator)
    services.ranking_withdraw(ranking_id=ranking.pk, annotator=annotator)
    lease = services.assignment_lease_next(project=project, annotator=other)
    assert lease is not None
    _rank(lease, other)
    assert Prompt.objects.get().ranking_count == 2


def test_all_bad_ignores_partial_ranks_and_gives_no_pairs():
    (annotator,) = make_annotators(1)
    project = make_project(items=1, responses=3)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    first, *_ = (r.pk for r in responses_shown(prompt=lease.prompt, annotator=annotator))
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[first]], all_bad=True)
    assert ranking.all_bad and ranking.tiers == [sorted(r.pk for r in lease.prompt.responses.all())]
    assert not PreferencePair.objects.exists()
    assert Prompt.objects.get().ranking_count == 1


def test_the_item_page_shows_a_reopened_answer_with_its_ties_and_rationale_after_a_reload(annotator_client, annotator):
    project = make_project(items=2, responses=3, members=[annotator])
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    first, second, third = responses_shown(prompt=lease.prompt, annotator=annotator)
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                      tiers=[[third.pk], [first.pk, second.pk]], rationale="A and B alike")
    annotator_client.post(f"/annotate/{project.pk}/back/", {"answer": ranking.pk}, HTTP_HX_REQUEST="true")

    page = annotator_client.get(f"/annotate/{project.pk}/").content.decode()

    assert f'data-assignment="{lease.pk}"' in page and 'id="reopened-note"' in page
    for response, rank in ((first, 2), (second, 2), (third, 1)):
        assert f'name="rank_{response.pk}" value="{rank}"' in page
    assert "A and B alike</textarea>" in page
    assert Ranking.objects.get().tiers == [[third.pk], [first.pk, second.pk]]
