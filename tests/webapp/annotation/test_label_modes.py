"""The thumbs and ratings modes' answers through the one submission path (services.ranking_submit): labels
written as ResponseLabel rows under the answer's Ranking envelope (empty tiers, no pairs), refused with the response
and aspect named when incomplete or off the scale, idempotent, replaced by a new answer after Back, removed by a
skip."""

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import PreferencePair, Project, Prompt, Ranking, ResponseLabel
from webapp.annotation.selectors import ranking_rows, responses_shown

pytestmark = pytest.mark.django_db

ASPECTS = [{"name": "helpfulness", "description": "Does it help?"}, {"name": "honesty", "description": "Is it true?"}]


def _ratings_project(**options) -> Project:
    project = make_project(mode=Project.Mode.RATINGS, **options)
    return services.project_update(project=project, members=list(project.members.all()), rating_aspects=ASPECTS)


def _lease(project, annotator):
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    return lease, [response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator)]


def _rows(ranking: Ranking) -> set[tuple[int, str, float]]:
    return set(ResponseLabel.objects.filter(ranking=ranking).values_list("response_id", "aspect", "value"))


def test_thumbs_are_written_one_row_per_response_under_an_envelope_without_tiers_or_pairs():
    (annotator,) = make_annotators(1)
    project = make_project(items=2, responses=3, mode=Project.Mode.THUMBS)
    lease, (a, b, c) = _lease(project, annotator)
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                      labels={a: {"": 1.0}, b: {"": 0.0}, c: {"": 1.0}}, rationale=" b is wrong ",
                                      seconds_spent=4.0)
    assert ranking.tiers == [] and not ranking.all_bad and not ranking.skipped and ranking.rationale == "b is wrong"
    assert _rows(ranking) == {(a, "", 1.0), (b, "", 0.0), (c, "", 1.0)}
    label = ResponseLabel.objects.filter(ranking=ranking).first()
    assert (label.project_id, label.prompt_id, label.annotator_id, label.external_annotator) == (
        project.pk, lease.prompt_id, annotator.pk, "")
    assert not PreferencePair.objects.exists()
    assert Prompt.objects.get(pk=lease.prompt_id).ranking_count == 1
    # the rankings export shows the labels where a ranking would be
    (row,) = ranking_rows(project_id=project.pk)
    assert row["tiers"] == [] and {(entry["response_id"], entry["value"]) for entry in row["labels"]} == {
        (a, 1.0), (b, 0.0), (c, 1.0)}
    assert services.preference_pairs_rebuild(project=project) == 0


def test_ratings_rate_every_aspect_and_submitting_twice_writes_nothing_new():
    (annotator,) = make_annotators(1)
    project = _ratings_project(items=1, responses=2)
    lease, (a, b) = _lease(project, annotator)
    labels = {a: {"helpfulness": 5.0, "honesty": 4.0}, b: {"helpfulness": 1.0, "honesty": 2.0}}
    first = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, labels=labels)
    assert _rows(first) == {(a, "helpfulness", 5.0), (a, "honesty", 4.0), (b, "helpfulness", 1.0),
                            (b, "honesty", 2.0)}
    again = services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                    labels={a: {"helpfulness": 1.0, "honesty": 1.0}, b: {"helpfulness": 1.0, "honesty": 1.0}})
    assert again.pk == first.pk and _rows(first) == _rows(again) and ResponseLabel.objects.count() == 4
    assert Ranking.objects.count() == 1 and Prompt.objects.get().ranking_count == 1


@pytest.mark.parametrize(("labels", "message"), [
    ({"a": {"helpfulness": 5.0, "honesty": 4.0}}, "rate every response on every aspect: B helpfulness, B honesty not rated"),
    ({"a": {"helpfulness": 5.0}, "b": {"helpfulness": 1.0, "honesty": 2.0}}, "A honesty not rated"),
    ({"a": {"helpfulness": 6.0, "honesty": 4.0}, "b": {"helpfulness": 1.0, "honesty": 2.0}},
     "response A, helpfulness: 6 is not a whole number from 1 to 5 (the project's scale)"),
    ({"a": {"helpfulness": 2.5, "honesty": 4.0}, "b": {"helpfulness": 1.0, "honesty": 2.0}}, "2.5 is not a whole number"),
    ({"a": {"helpfulness": 2.0, "honesty": 4.0, "style": 3.0}, "b": {"helpfulness": 1.0, "honesty": 2.0}},
     "response A: 'style' is not an aspect of this project (its aspects: helpfulness, honesty)"),
    ({"a": {"helpfulness": 2.0, "honesty": 4.0}, "b": {"helpfulness": 1.0, "honesty": 2.0}, 999999: {"helpfulness": 1.0}},
     "the answer labels response(s) 999999, not shown for this item"),
])
def test_ratings_refused_name_the_response_and_aspect_and_write_nothing(labels, message):
    (annotator,) = make_annotators(1)
    project = _ratings_project(items=1, responses=2)
    lease, (a, b) = _lease(project, annotator)
    ids = {"a": a, "b": b}
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                labels={ids.get(key, key): value for key, value in labels.items()})
    assert not Ranking.objects.exists() and not ResponseLabel.objects.exists()
    assert Prompt.objects.get().ranking_count == 0


def test_thumbs_refusals_and_a_ranking_in_a_labels_mode_or_labels_in_a_ranking_mode():
    (annotator,) = make_annotators(1)
    project = make_project(items=1, responses=2, mode=Project.Mode.THUMBS)
    lease, (a, b) = _lease(project, annotator)
    for labels, message in (({a: {"": 1.0}}, "give every response a thumb up or down: B has none"),
                            ({a: {"": 1.0}, b: {"": 0.5}}, r"response B: a thumb is up \(1\) or down \(0\), not 0.5"),
                            ({a: {"": 1.0}, b: {"overall": 1.0}}, "response B: a thumb has no aspect")):
        with pytest.raises(ValidationError, match=message):
            services.ranking_submit(assignment_id=lease.pk, annotator=annotator, labels=labels)
    with pytest.raises(ValidationError, match="this project's mode is thumbs: its answer is labels"):
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[a], [b]])
    ranked = make_project(items=1, responses=2, name="Ranked")
    lease, (a, b) = _lease(ranked, annotator)
    with pytest.raises(ValidationError, match="this project's mode is ranking: its answer is a ranking, not labels"):
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, labels={a: {"": 1.0}, b: {"": 0.0}})
    assert not Ranking.objects.exists() and not ResponseLabel.objects.exists()


def test_back_then_a_new_answer_replaces_the_labels_and_a_skip_removes_them():
    (annotator,) = make_annotators(1)
    project = make_project(items=2, responses=2, mode=Project.Mode.THUMBS)
    lease, (a, b) = _lease(project, annotator)
    first = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, labels={a: {"": 1.0}, b: {"": 0.0}})
    reopened = services.ranking_withdraw(ranking_id=first.pk, annotator=annotator)
    assert _rows(reopened) == {(a, "", 1.0), (b, "", 0.0)}  # kept until replaced
    replaced = services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                       labels={a: {"": 0.0}, b: {"": 0.0}})
    assert replaced.pk == first.pk and _rows(replaced) == {(a, "", 0.0), (b, "", 0.0)}
    assert ResponseLabel.objects.count() == 2 and Prompt.objects.get(pk=lease.prompt_id).ranking_count == 1

    services.ranking_withdraw(ranking_id=first.pk, annotator=annotator)
    skipped = services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
    assert skipped.skipped and not ResponseLabel.objects.exists()
    assert Prompt.objects.get(pk=lease.prompt_id).ranking_count == 0


def test_the_api_service_writes_labels_once_and_replaces_a_changed_answer():
    annotator, other = make_annotators(2)
    project = _ratings_project(items=1, responses=2, overlap=2, members=[annotator, other])
    prompt = project.prompts.get()
    a, b = (response.pk for response in responses_shown(prompt=prompt, annotator=annotator))
    labels = {a: {"helpfulness": 3, "honesty": 3}, b: {"helpfulness": 2, "honesty": 5}}
    first = services.api_ranking_submit(prompt_id=prompt.pk, annotator=annotator, labels=labels)
    assert first.changed and len(_rows(first.ranking)) == 4
    same = services.api_ranking_submit(prompt_id=prompt.pk, annotator=annotator, labels=labels)
    assert not same.changed
    changed = services.api_ranking_submit(prompt_id=prompt.pk, annotator=annotator,
                                          labels={**labels, b: {"helpfulness": 4, "honesty": 5}})
    assert changed.changed and changed.ranking.pk == first.ranking.pk
    assert (b, "helpfulness", 4.0) in _rows(changed.ranking) and ResponseLabel.objects.count() == 4


@pytest.mark.parametrize(("aspects", "low", "high", "field", "message"), [
    ([{"name": "a"}, {"name": "a"}], 1, 5, "rating_aspects", "aspect 2: 'a' is named twice"),
    ([{"name": " "}], 1, 5, "rating_aspects", "aspect 1: it needs a name"),
    ([], 5, 5, "rating_max", "the highest rating (5) must be above the lowest (5)"),
    ([], 1, 11, "rating_max", "a scale lies within 0..10"),
    ([], 0, 10, "rating_max", "0..10 has 11 values; at most 10"),
])
def test_a_ratings_projects_aspects_and_scale_are_checked(aspects, low, high, field, message):
    with pytest.raises(ValidationError) as refusal:
        services.project_create(name="R", mode=Project.Mode.RATINGS, rating_aspects=aspects, rating_min=low,
                                rating_max=high)
    assert message in refusal.value.message_dict[field][0]
    assert not Project.objects.exists()
