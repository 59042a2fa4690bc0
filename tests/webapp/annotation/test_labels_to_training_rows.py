"""The thumbs and ratings modes' answers, given through the one submission path (services.ranking_submit, as the
page and the API call it), become the training rows the README's rules say: a ratings item's binarized pair and
margin, a thumbs item's KTO rows; and Back, which replaces an answer, changes them."""

import pytest

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import selectors, services
from webapp.annotation.models import Project
from webapp.annotation.selectors import responses_shown

pytestmark = pytest.mark.django_db

ASPECTS = [{"name": "helpfulness", "description": "Does it help?"}, {"name": "honesty", "description": "Is it true?"}]


def _answer(project: Project, annotator, labels_by_text: dict[str, dict[str, float]]):
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    by_text = {response.text: response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator)}
    labels = {by_text[text]: values for text, values in labels_by_text.items()}
    return services.ranking_submit(assignment_id=lease.pk, annotator=annotator, labels=labels)


def test_two_annotators_ratings_become_the_documented_pair_and_margin():
    first, second = make_annotators(2)
    project = make_project(items=1, texts=[["good", "fair", "poor"]], mode=Project.Mode.RATINGS, overlap=2)
    project = services.project_update(project=project, members=[first, second], rating_aspects=ASPECTS)
    _answer(project, first, {"good": {"helpfulness": 5, "honesty": 5}, "fair": {"helpfulness": 3, "honesty": 4},
                             "poor": {"helpfulness": 1, "honesty": 2}})
    _answer(project, second, {"good": {"helpfulness": 4, "honesty": 5}, "fair": {"helpfulness": 3, "honesty": 3},
                              "poor": {"helpfulness": 2, "honesty": 1}})
    # means: good 4.75, fair 3.25, poor 1.5; "worst" takes poor, "random" one of the two lower ones by the seed
    worst = list(selectors.pair_rows(project_id=project.pk, binarization="worst"))
    assert [(row["chosen"], row["rejected"], row["margin"], row["weight"]) for row in worst] == [
        ("good", "poor", 3.25, 1.0)]
    drawn = {(row["rejected"], row["margin"]) for seed in range(12)
             for row in selectors.pair_rows(project_id=project.pk, binarization="random", seed=seed)}
    assert drawn == {("fair", 1.5), ("poor", 3.25)}
    unpaired = list(selectors.unpaired_rows(project_id=project.pk, binarization="worst"))
    assert [(row["completion"], row["label"]) for row in unpaired] == [("good", True), ("poor", False)]


def test_thumbs_answers_become_kto_rows_and_a_changed_answer_changes_them():
    (annotator,) = make_annotators(1)
    project = make_project(items=1, texts=[["right", "wrong"]], mode=Project.Mode.THUMBS)
    answer = _answer(project, annotator, {"right": {"": 1.0}, "wrong": {"": 1.0}})
    assert sorted((row["completion"], row["label"]) for row in selectors.unpaired_rows(project_id=project.pk)) == [
        ("right", True), ("wrong", True)]
    services.ranking_withdraw(ranking_id=answer.pk, annotator=annotator)  # Back, then a new answer
    _answer(project, annotator, {"right": {"": 1.0}, "wrong": {"": 0.0}})
    rows = list(selectors.unpaired_for_training(project_id=project.pk))
    assert sorted((row["completion"], row["label"]) for row in rows) == [("right", True), ("wrong", False)]
    assert all(set(row) == {"prompt", "completion", "label"} for row in rows)
