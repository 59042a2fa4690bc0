"""How an answer is judged against a gold answer (webapp.annotation.gold), and accuracy in the labels modes through
the real services."""

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.accounts.services import user_create
from webapp.annotation import gold, selectors, services
from webapp.annotation.models import AnnotatorPause, Project, Ranking


@pytest.mark.parametrize(("gold_tiers", "answer", "matched", "total"), [
    ([[1], [2], [3]], [[1], [2], [3]], 3, 3),
    ([[1], [2], [3]], [[3], [2], [1]], 0, 3),
    ([[1], [2], [3]], [[2], [1], [3]], 2, 3),
    ([[2], [1, 3]], [[2], [1], [3]], 2, 3),  # the gold's tie is matched only by a tie
    ([[2], [1, 3]], [[2], [1, 3]], 3, 3),
    ([[1, 2]], [[1], [2]], 0, 1),  # pairwise: a tie is a decision of its own
    ([[1], [2]], [[1, 2]], 0, 1),
])
def test_a_ranking_is_judged_pair_by_pair_ties_included(gold_tiers, answer, matched, total):
    assert gold.tier_decisions(gold_tiers, answer) == gold.Decisions(matched=matched, total=total)


def test_ratings_within_one_step_match_and_thumbs_must_be_equal():
    right = {1: {"helpful": 4.0, "honest": 5.0}, 2: {"helpful": 1.0, "honest": 2.0}}
    given = {1: {"helpful": 5.0, "honest": 3.0}, 2: {"helpful": 1.0}}
    assert gold.label_decisions(right, given, tolerance=gold.RATING_TOLERANCE) == gold.Decisions(matched=2, total=4)
    assert gold.label_decisions({1: {"": 1.0}, 2: {"": 0.0}}, {1: {"": 1.0}, 2: {"": 1.0}},
                                tolerance=0) == gold.Decisions(matched=1, total=2)


def test_an_order_names_letters_or_r_numbers_and_refusals_name_the_field():
    assert gold.tiers_from_order(" c>a = R2 ", [10, 11, 12]) == [[12], [10, 11]]
    with pytest.raises(ValidationError, match="order: write the responses best first"):
        gold.tiers_from_order("  ", [10, 11])
    with pytest.raises(ValidationError, match="order: 'AB' is not a response letter"):
        gold.tiers_from_order("AB > C", [10, 11, 12])
    with pytest.raises(ValidationError, match="choice: a pairwise item compares two responses"):
        gold.tiers_from_choice("A", [10, 11, 12])


@pytest.mark.django_db
def test_a_thumbs_annotator_whose_thumbs_disagree_with_the_gold_is_paused():
    careless, careful = make_annotators(2)
    project = make_project(items=3, responses=2, mode=Project.Mode.THUMBS, members=[careless, careful])
    Project.objects.filter(pk=project.pk).update(gold_onboarding=2, gold_min_answers=2, gold_min_accuracy=0.75)
    project.refresh_from_db()
    researcher = user_create(username="res", role="researcher", password="pw-long-enough-1")[0]
    for prompt in project.prompts.order_by("id")[:2]:
        first, second = selectors.gold_responses(prompt)
        services.gold_answer_set(prompt=prompt, user=researcher, labels={first: {"": 1.0}, second: {"": 0.0}})
    for annotator, thumbs in ((careless, (1.0, 1.0)), (careful, (1.0, 0.0))):
        for _ in range(2):
            lease = services.assignment_lease_next(project=project, annotator=annotator)
            first, second = selectors.gold_responses(lease.prompt)
            services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                    labels={first: {"": thumbs[0]}, second: {"": thumbs[1]}})
    assert AnnotatorPause.objects.get(annotator=careless).reason.startswith("accuracy on gold 50% (2 of 4 decisions")
    assert not AnnotatorPause.objects.filter(annotator=careful).exists()
    # told the gold's thumbs in the letters they saw the responses under
    ranking = Ranking.objects.filter(annotator=careless).first()
    shown = [r.pk for r in selectors.responses_shown(prompt=ranking.prompt, annotator=careless)]
    first = selectors.gold_responses(ranking.prompt)[0]
    expected = "A 👍; B 👎" if shown[0] == first else "A 👎; B 👍"
    assert selectors.gold_feedback(ranking) == f"That was a check item; its expected answer is {expected}."
    assert selectors.gold_feedback(Ranking.objects.filter(annotator=careful).first()) is None
    # held back: the careless annotator's thumbs give no KTO rows
    assert {row["annotator"] for row in selectors.unpaired_rows(project_id=project.pk)} == {careful.username}
