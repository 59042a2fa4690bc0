"""Gold items on the item page (each mode's form, refusals naming the field, unmark, an annotator's answer as gold),
the quality settings in the project form, a researcher's decision on a pause from the project page."""

import pytest
from django.urls import reverse

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import gold, selectors, services
from webapp.annotation.models import AnnotatorPause, GoldAnswer, Project, Ranking

pytestmark = pytest.mark.django_db


def _item(project):
    return project.prompts.order_by("id").first()


def _gold_url(project, prompt, remove: bool = False) -> str:
    name = "annotation:project_item_gold_remove" if remove else "annotation:project_item_gold"
    return reverse(name, args=[project.pk, prompt.pk])


def test_ranking_gold_is_an_order_of_letters_with_ties_and_a_bad_order_is_refused_naming_the_field(
        researcher_client, researcher):
    project = make_project(items=1, responses=3, owner=researcher)
    prompt = _item(project)
    r1, r2, r3 = selectors.gold_responses(prompt)
    answer = researcher_client.post(_gold_url(project, prompt), {"order": "b > a = R3", "explanation": " B is right "})
    assert answer.status_code == 302
    stored = GoldAnswer.objects.get(prompt=prompt)
    assert stored.tiers == [[r2], [r1, r3]] and stored.explanation == "B is right" and stored.created_by == researcher
    page = researcher_client.get(reverse("annotation:project_item", args=[project.pk, prompt.pk])).content.decode()
    assert 'id="gold-words">B &gt; A = C<' in page and 'id="gold-badge"' in page

    for order, refusal in (("A > B", "order: place every response; C not placed"),
                           ("A > B > A = C", "order: a response is named twice"),
                           ("A > D > B = C", "order: D is not a response of this item"),
                           ("A >> B = C", "order: &#x27;A &gt;&gt; B = C&#x27; has an empty place")):
        refused = researcher_client.post(_gold_url(project, prompt), {"order": order})
        assert refused.status_code == 400 and refusal in refused.content.decode(), order
    assert GoldAnswer.objects.get(prompt=prompt).tiers == [[r2], [r1, r3]]  # unchanged by the refusals

    assert researcher_client.post(_gold_url(project, prompt, remove=True)).status_code == 302
    assert not GoldAnswer.objects.filter(prompt=prompt).exists()


@pytest.mark.parametrize(("mode", "post", "expected"), [
    (Project.Mode.PAIRWISE, {"choice": "tie"}, {"tiers": "tie"}),
    (Project.Mode.PAIRWISE, {"choice": "B"}, {"tiers": "B"}),
    (Project.Mode.THUMBS, {"thumb_{0}": "up", "thumb_{1}": "down"}, {"labels": {0: {"": 1.0}, 1: {"": 0.0}}}),
    (Project.Mode.RATINGS, {"rating_{0}_overall": "5", "rating_{1}_overall": "2"},
     {"labels": {0: {"overall": 5.0}, 1: {"overall": 2.0}}}),
])
def test_each_mode_marks_gold_in_its_own_terms(researcher_client, researcher, mode, post, expected):
    project = make_project(items=1, responses=2, mode=mode, owner=researcher)
    prompt = _item(project)
    ids = selectors.gold_responses(prompt)
    data = {key.format(*ids): value for key, value in post.items()}
    assert researcher_client.post(_gold_url(project, prompt), data).status_code == 302
    stored = GoldAnswer.objects.get(prompt=prompt)
    if "tiers" in expected:
        assert stored.tiers == {"tie": [ids], "B": [[ids[1]], [ids[0]]]}[expected["tiers"]] and stored.labels == {}
    else:
        assert gold.labels_from_json(stored.labels) == {ids[index]: given
                                                         for index, given in expected["labels"].items()}


@pytest.mark.parametrize(("mode", "post", "refusal"), [
    (Project.Mode.PAIRWISE, {"choice": "C"}, "choice: A, B or tie"),
    (Project.Mode.THUMBS, {"thumb_{0}": "up"}, "give every response a thumb up or down: B"),
    (Project.Mode.THUMBS, {"thumb_{0}": "up", "thumb_{1}": "sideways"}, "thumb_{1}: up or down"),
    (Project.Mode.RATINGS, {"rating_{0}_overall": "5", "rating_{1}_overall": "9"},
     "response B, overall: 9 is not a whole number from 1 to 5"),
])
def test_a_gold_answer_the_mode_refuses_names_the_field_and_writes_nothing(researcher_client, researcher, mode, post,
                                                                          refusal):
    project = make_project(items=1, responses=2, mode=mode, owner=researcher)
    prompt = _item(project)
    ids = selectors.gold_responses(prompt)
    answer = researcher_client.post(_gold_url(project, prompt), {key.format(*ids): v for key, v in post.items()})
    assert answer.status_code == 400 and refusal.format(*ids) in answer.content.decode()
    assert not GoldAnswer.objects.exists()


def test_an_annotators_answer_becomes_the_gold_answer(researcher_client, researcher):
    (annotator,) = make_annotators(1)
    project = make_project(items=1, responses=3, owner=researcher, members=[annotator])
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    r1, r2, r3 = selectors.gold_responses(lease.prompt)
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[r3], [r1, r2]])
    page = researcher_client.get(reverse("annotation:project_item", args=[project.pk, lease.prompt_id]))
    assert f'name="ranking" value="{ranking.pk}"' in page.content.decode()
    assert researcher_client.post(_gold_url(project, lease.prompt), {"ranking": ranking.pk}).status_code == 302
    assert GoldAnswer.objects.get(prompt=lease.prompt).tiers == [[r3], [r1, r2]]


def test_the_project_form_sets_the_quality_settings_and_refuses_a_share_above_one(researcher_client, researcher):
    project = make_project(items=1, owner=researcher)
    url = reverse("annotation:project_edit", args=[project.pk])
    base = {"name": project.name, "mode": project.mode, "responses_per_item": 3, "annotators_per_item": 1,
            "lease_minutes": 30}
    refused = researcher_client.post(url, {**base, "gold_min_accuracy": "1.5"})
    assert refused.status_code == 200 and "Ensure this value is less than or equal to 1" in refused.content.decode()
    researcher_client.post(url, {**base, "gold_rate": "0.1", "gold_onboarding": "3", "gold_min_answers": "4",
                                 "gold_min_accuracy": "0.7", "fast_answer_seconds": "2.5"})
    project.refresh_from_db()
    assert (project.gold_rate, project.gold_onboarding, project.gold_min_answers, project.gold_min_accuracy,
            project.fast_answer_seconds) == (0.1, 3, 4, 0.7, 2.5)
    researcher_client.post(url, {**base, "lease_minutes": 20})  # a form without them keeps them
    project.refresh_from_db()
    assert (project.lease_minutes, project.gold_onboarding, project.gold_min_accuracy) == (20, 3, 0.7)
    page = researcher_client.get(reverse("annotation:project_detail", args=[project.pk])).content.decode()
    assert "70% accuracy on gold, after 4 gold answers" in page


def test_the_researcher_releases_a_paused_annotator_from_the_project_page(researcher_client, researcher):
    (annotator,) = make_annotators(1)
    project = make_project(items=2, responses=2, owner=researcher, members=[annotator])
    Project.objects.filter(pk=project.pk).update(gold_onboarding=1, gold_min_answers=1, gold_min_accuracy=1.0)
    project.refresh_from_db()
    services.gold_answer_set(prompt=_item(project), user=researcher, tiers=[selectors.gold_responses(_item(project))])
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    first, second = selectors.gold_responses(lease.prompt)
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[first], [second]])
    pause = AnnotatorPause.objects.get(annotator=annotator)
    page = researcher_client.get(reverse("annotation:project_detail", args=[project.pk])).content.decode()
    assert f"<strong>{annotator.username}</strong>: accuracy on gold 0% (0 of 1 decision on 1 gold item)" in page
    decide = reverse("annotation:annotator_pause_decide", args=[project.pk, pause.pk])
    assert researcher_client.post(decide, {"decision": "maybe"}).status_code == 302
    pause.refresh_from_db()
    assert pause.decision == "pending"
    researcher_client.post(decide, {"decision": "released"})
    pause.refresh_from_db()
    assert pause.decision == "released" and pause.decided_by == researcher
    assert not Ranking.objects.filter(annotator=annotator, held_back=True).exists()


@pytest.mark.parametrize("htmx", [True, False])
def test_an_annotator_who_answers_a_gold_item_otherwise_is_shown_its_answer_in_their_own_letters(
        annotator_client, annotator, researcher, htmx):
    project = make_project(items=3, responses=3, owner=researcher, members=[annotator])
    Project.objects.filter(pk=project.pk).update(gold_onboarding=2)
    project.refresh_from_db()
    first, second = project.prompts.order_by("id")[:2]
    for prompt in (first, second):
        services.gold_answer_set(prompt=prompt, user=researcher, explanation="R1 cites its source.",
                                 tiers=[[pk] for pk in selectors.gold_responses(prompt)])
    extra = {"HTTP_HX_REQUEST": "true"} if htmx else {"follow": True}

    def submit(ranks_best_first: list[int]):
        lease = services.assignment_lease_next(project=project, annotator=annotator)
        shown = [r.pk for r in selectors.responses_shown(prompt=lease.prompt, annotator=annotator)]
        posted = {f"rank_{pk}": str(rank) for rank, pk in enumerate(ranks_best_first(shown), start=1)}
        return shown, annotator_client.post(f"/annotate/items/{lease.pk}/submit/", posted, **extra).content.decode()

    # wrong: the order shown, whatever it is, reversed from the gold's (R1 > R2 > R3) unless it happens to match
    shown, page = submit(lambda shown: sorted(shown, reverse=True))
    letters = {pk: "ABC"[shown.index(pk)] for pk in shown}
    expected = " &gt; ".join(letters[pk] for pk in sorted(shown))
    # htmx: above the next item; a plain form's redirect: in the page's messages
    assert f"That was a check item; its expected answer is {expected}. R1 cites its source." in page
    assert ('id="gold-note"' in page) is htmx
    # right: nothing is said
    _, page = submit(lambda shown: sorted(shown))
    assert "check item" not in page
    assert Ranking.objects.filter(annotator=annotator).count() == 2


def test_the_data_card_counts_a_paused_annotators_thumbs_apart_until_they_are_released(researcher_client, researcher):
    """The Data card counts what trains: a paused annotator's thumbs are held back (out of the KTO rows), said apart;
    released, they count again."""
    (annotator,) = make_annotators(1)
    project = make_project(items=2, responses=2, owner=researcher, members=[annotator], mode=Project.Mode.THUMBS)
    Project.objects.filter(pk=project.pk).update(gold_onboarding=1, gold_min_answers=1, gold_min_accuracy=1.0)
    project.refresh_from_db()
    first, second = selectors.gold_responses(_item(project))
    services.gold_answer_set(prompt=_item(project), user=researcher, labels={first: {"": 1.0}, second: {"": 0.0}})
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator, labels={first: {"": 0.0}, second: {"": 1.0}})
    pause = AnnotatorPause.objects.get(annotator=annotator)
    data_url = reverse("annotation:project_data", args=[project.pk])

    data = selectors.project_data(project)
    assert (data.labels_given, data.held_back_labels, data.unpaired_rows) == (0, 2, 0)
    card = researcher_client.get(data_url).content.decode()
    assert '<dd id="labels-given">0 <span class="muted" id="held-back-labels">(and 2 held back: a paused ' in card

    services.annotator_pause_decide(pause_id=pause.pk, project=project, decision="released", user=researcher)
    data = selectors.project_data(project)
    assert (data.labels_given, data.held_back_labels, data.unpaired_rows) == (2, 0, 2)
    assert "held-back-labels" not in researcher_client.get(data_url).content.decode()
