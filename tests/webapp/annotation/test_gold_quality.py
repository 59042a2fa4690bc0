"""Gold items and annotator quality through the real services (lease, submit): a random annotator is paused at its
project's minimum number of gold answers with its rows held back; a careful one is not; a researcher's decision."""

import random
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.accounts.services import user_create
from webapp.annotation import selectors, services
from webapp.annotation.models import (
    AnnotatorPause,
    Assignment,
    GoldAnswer,
    PreferencePair,
    Project,
    Prompt,
    Ranking,
)

pytestmark = pytest.mark.django_db

GOLD_ITEMS = 5
NORMAL_ITEMS = 15


def _quality_project(annotators, **settings) -> Project:
    project = make_project(items=GOLD_ITEMS + NORMAL_ITEMS, responses=3, members=annotators)
    Project.objects.filter(pk=project.pk).update(**{"gold_onboarding": GOLD_ITEMS, "gold_min_answers": 5,
                                                    "gold_min_accuracy": 0.8, **settings})
    project.refresh_from_db()
    (researcher,) = [user_create(username="res", role="researcher", password="pw-long-enough-1")[0]]
    # the gold answer of each gold item: its responses in the order added, best first, no tie
    for prompt in Prompt.objects.filter(project=project).order_by("id")[:GOLD_ITEMS]:
        services.gold_answer_set(prompt=prompt, user=researcher, tiers=[[pk] for pk in selectors.gold_responses(prompt)])
    return project


def _answer(lease, annotator, rng: random.Random | None) -> Ranking:
    """A careful answer (the gold's order on a gold item, the order added elsewhere) or, with `rng`, a random one."""
    shown = [response.pk for response in selectors.responses_shown(prompt=lease.prompt, annotator=annotator)]
    order = sorted(shown)
    if rng is not None:
        rng.shuffle(order)
    # the time an answer took is bounded by its lease's age: make the lease a minute old
    Assignment.objects.filter(pk=lease.pk).update(leased_at=timezone.now() - timedelta(minutes=1))
    return services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[pk] for pk in order],
                                   seconds_spent=1.0 if rng else 12.0)


def test_a_random_annotator_is_paused_at_the_minimum_gold_answers_with_rows_held_back_and_a_careful_one_is_not():
    random_one, careful = make_annotators(2)
    project = _quality_project([random_one, careful])
    rng = random.Random(7)
    assert [(row.available, row.paused) for row in selectors.own_progress(user=random_one)] == [(20, False)]

    gold_answers = 0
    while (lease := services.assignment_lease_next(project=project, annotator=random_one)) is not None:
        assert hasattr(lease.prompt, "gold"), "onboarding gives the gold items first"
        assert not AnnotatorPause.objects.filter(annotator=random_one).exists(), "paused before its 5th gold answer"
        _answer(lease, random_one, rng)
        gold_answers += 1
    pause = AnnotatorPause.objects.get(project=project, annotator=random_one)
    assert gold_answers == project.gold_min_answers == 5
    assert pause.decision == AnnotatorPause.Decision.PENDING
    accuracy = selectors.gold_accuracies(project)[random_one.pk]
    assert accuracy.share < 0.8 and accuracy.decisions == 5 * 3
    assert pause.reason == (f"accuracy on gold {accuracy.share:.0%} ({accuracy.matched} of 15 decisions on 5 gold "
                            f"items) is below the project's 80%")
    assert set(Ranking.objects.filter(annotator=random_one).values_list("held_back", flat=True)) == {True}
    assert services.assignment_lease_next(project=project, annotator=random_one) is None
    assert [(row.available, row.paused) for row in selectors.own_progress(user=random_one)] == [(0, True)]

    while (lease := services.assignment_lease_next(project=project, annotator=careful)) is not None:
        _answer(lease, careful, None)
    assert Ranking.objects.filter(annotator=careful).count() == GOLD_ITEMS + NORMAL_ITEMS
    assert not AnnotatorPause.objects.filter(annotator=careful).exists()
    assert not Ranking.objects.filter(annotator=careful, held_back=True).exists()
    assert selectors.gold_accuracies(project)[careful.pk].share == 1.0

    # the random annotator's pairs are stored but give no training row, nor a count in the launch form's menu
    careful_pairs = PreferencePair.objects.filter(ranking__annotator=careful).count()
    assert careful_pairs == (GOLD_ITEMS + NORMAL_ITEMS) * 3
    assert PreferencePair.objects.filter(ranking__annotator=random_one).count() == GOLD_ITEMS * 3
    rows = list(selectors.pair_rows(project_id=project.pk))
    assert {row["annotator"] for row in rows} == {careful.username} and len(rows) == careful_pairs
    assert len(selectors.preference_pairs_for_training(project_id=project.pk)) == careful_pairs
    assert selectors.pair_count(project_id=project.pk) == careful_pairs
    researcher = user_create(username="res2", role="researcher", password="pw-long-enough-1")[0]
    project.members.add(researcher)
    menu = {name: held for _, name, held, _ in selectors.projects_for_training(researcher)}
    assert menu[project.name] == f"{careful_pairs} pairs"
    # the project page's Data card counts what trains and says what is held back
    data = selectors.project_data(project)
    assert (data.ranking_pairs, data.held_back_pairs) == (careful_pairs, GOLD_ITEMS * 3)

    # the raw answers say which were held back and which answered gold
    raw = {(row["annotator"], row["prompt_id"]): row for row in selectors.ranking_rows(project_id=project.pk)}
    assert all(row["held_back"] for (who, _), row in raw.items() if who == random_one.username)
    assert sum(row["gold"] for (who, _), row in raw.items() if who == careful.username) == GOLD_ITEMS

    # the project page's table: accuracy, pace, pause
    table = {row.username: row for row in selectors.annotator_rows(project)}
    assert table[random_one.username].paused == "pending" and table[random_one.username].fast_share == 1.0
    assert table[careful.username].paused == "" and table[careful.username].fast_share == 0.0
    assert str(table[careful.username].gold) == "100% (15 of 15 decisions, 5 gold items)"


def test_a_paused_annotators_submission_is_refused_with_the_reason():
    (annotator,) = make_annotators(1)
    project = _quality_project([annotator], gold_min_accuracy=1.0, gold_min_answers=1)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    shown = [response.pk for response in selectors.responses_shown(prompt=lease.prompt, annotator=annotator)]
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[sorted(shown)])  # all tied
    assert AnnotatorPause.objects.filter(annotator=annotator, decision="pending").exists()
    # an answer reopened by Back cannot be stored again while the pause holds
    services.ranking_withdraw(ranking_id=ranking.pk, annotator=annotator)
    with pytest.raises(ValidationError, match=r"you are paused in this project \(accuracy on gold 0% "):
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[pk] for pk in sorted(shown)])


def test_release_clears_held_back_and_judges_only_later_gold_answers_and_drop_keeps_them_out():
    random_one, dropped_one = make_annotators(2)
    project = _quality_project([random_one, dropped_one], gold_onboarding=2, gold_min_answers=2, gold_rate=0.5)
    researcher = user_create(username="res3", role="researcher", password="pw-long-enough-1")[0]
    for annotator in (random_one, dropped_one):
        for _ in range(2):
            lease = services.assignment_lease_next(project=project, annotator=annotator)
            shown = sorted(r.pk for r in selectors.responses_shown(prompt=lease.prompt, annotator=annotator))
            services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[list(reversed(shown))])
    released = AnnotatorPause.objects.get(annotator=random_one)
    dropped = AnnotatorPause.objects.get(annotator=dropped_one)

    services.annotator_pause_decide(pause_id=released.pk, project=project, decision="released", user=researcher)
    services.annotator_pause_decide(pause_id=dropped.pk, project=project, decision="dropped", user=researcher)
    released.refresh_from_db()
    assert released.decision == "released" and released.decided_by == researcher and released.decided_at
    assert not Ranking.objects.filter(annotator=random_one, held_back=True).exists()
    assert set(Ranking.objects.filter(annotator=dropped_one).values_list("held_back", flat=True)) == {True}
    with pytest.raises(ValidationError, match="decided already"):
        services.annotator_pause_decide(pause_id=dropped.pk, project=project, decision="released", user=researcher)

    # released: judged afresh (nothing yet), items again; dropped: no more items
    assert random_one.pk not in selectors.gold_accuracies(project)
    assert services.assignment_lease_next(project=project, annotator=random_one) is not None
    assert services.assignment_lease_next(project=project, annotator=dropped_one) is None


def test_gold_items_are_mixed_in_at_the_rate_never_twice_and_outside_the_overlap():
    first, second = make_annotators(2)
    project = _quality_project([first, second], gold_onboarding=1, gold_rate=0.25, gold_min_accuracy=0.0)
    kinds = {}
    for annotator in (first, second):
        kinds[annotator.username] = []
        while (lease := services.assignment_lease_next(project=project, annotator=annotator)) is not None:
            kinds[annotator.username].append("gold" if GoldAnswer.objects.filter(prompt=lease.prompt).exists()
                                             else "item")
            _answer(lease, annotator, None)
    # k = 1 (onboarding), then k = 4, 8, 12, 16 (⌊k/4⌋ grows); at k = 20 none is left, so a normal item
    assert [k for k, kind in enumerate(kinds["ann0"], start=1) if kind == "gold"] == [1, 4, 8, 12, 16]
    assert len(kinds["ann0"]) == GOLD_ITEMS + NORMAL_ITEMS
    # the second annotator gets the gold item the first answered (the overlap does not bound gold); then nothing,
    # as no normal item is left and k = 2 is no gold place
    assert kinds["ann1"] == ["gold"]
    assert Prompt.objects.get(pk=Ranking.objects.get(annotator=second).prompt_id).ranking_count == 2


@pytest.mark.parametrize(("k", "onboarding", "rate", "due"), [
    (1, 2, 0.0, True), (2, 2, 0.0, True), (3, 2, 0.0, False), (10, 0, 0.1, True), (9, 0, 0.1, False),
    (20, 0, 0.1, True), (3, 0, 1 / 3, True), (4, 0, 1 / 3, False), (6, 0, 1 / 3, True), (5, 0, 0.0, False),
])
def test_gold_is_due_when_the_floor_of_k_times_the_rate_grows(k, onboarding, rate, due):
    assert services.gold_is_due(k, onboarding=onboarding, rate=rate) is due
