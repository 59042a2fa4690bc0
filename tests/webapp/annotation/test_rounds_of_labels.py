"""The second round of a thumbs or a ratings project: its new items hold a copy of the response round 1's labels
rate best (a thumb up over a thumb down, the higher mean rating), and its win rate over round 1 reads the labels (a
new response wins where its thumb or rating is above the copy's, ties count half)."""

import pytest

from tests.webapp.annotation.factories import add_round, make_annotators
from webapp.annotation import selectors, services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Project, Prompt

pytestmark = pytest.mark.django_db


def _project(mode: str) -> Project:
    project = services.project_create(name=f"Rounds of {mode}", mode=mode, responses_per_item=2,
                                      annotators_per_item=1)
    services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"p{index}", text=f"Question {index}?") for index in range(2)])
    return project


def _label_all(project: Project, annotator, value_of) -> int:
    """Answer every item the queue gives: `value_of(response)` is its thumb (1/0) or its rating on every aspect."""
    answered = 0
    while (lease := services.assignment_lease_next(project=project, annotator=annotator)) is not None:
        shown = selectors.responses_shown(prompt=lease.prompt, annotator=annotator)
        aspects = [""] if project.mode == "thumbs" else [aspect["name"] for aspect in project.aspects]
        labels = {response.pk: {aspect: value_of(response) for aspect in aspects} for response in shown}
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, labels=labels)
        answered += 1
    return answered


@pytest.mark.parametrize(("mode", "first_round", "second_round"), [
    # round 2: d0 above its copy (won), d1 equal (tied), d2 below (lost), d3 equal (tied)
    ("thumbs", {"b0": 0, "b1": 1, "b2": 1, "b3": 0}, {"b1": 0, "d0": 1, "d1": 0, "b2": 1, "d2": 0, "d3": 1}),
    ("ratings", {"b0": 2, "b1": 5, "b2": 4, "b3": 1}, {"b1": 3, "d0": 5, "d1": 3, "b2": 4, "d2": 2, "d3": 4}),
])
def test_a_second_round_of_labels_is_set_beside_the_best_labelled_and_has_a_win_rate(mode, first_round,
                                                                                      second_round):
    project = _project(mode)
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    first = add_round(project, "base", {"p0": ["b0", "b1"], "p1": ["b2", "b3"]})
    assert _label_all(project, annotator, lambda response: first_round[response.text]) == 2

    second = add_round(project, "kto", {"p0": ["d0", "d1"], "p1": ["d2", "d3"]})
    items = Prompt.objects.filter(project=project, round=second).order_by("id")
    # each new item holds a copy of round 1's better-labelled response to its prompt (b1, b2) beside a new one
    assert [[r.text for r in item.responses.order_by("id")] for item in items] == [
        ["b1", "d0"], ["b1", "d1"], ["b2", "d2"], ["b2", "d3"]]
    assert _label_all(project, annotator, lambda response: second_round[response.text]) == 4

    rows = {row.round.number: row for row in selectors.round_rows(project)}
    rate = rows[2].win_rate
    assert rows[2].round.compared_with == first and rows[2].ranked_items == 4
    assert (rate.won, rate.tied, rate.lost) == (1, 2, 1)
