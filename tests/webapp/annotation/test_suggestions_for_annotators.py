"""Machine suggestions as annotators meet them: shown marked as a machine's (never filled in), accepted with a key,
the answer's origin recorded only when it is the suggestion unchanged; the project's display setting; the queue's
uncertainty order and the share of open items it moves; the guidelines before an annotator's first item."""

import re

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Assignment, Project, Prompt, Ranking, ResponseLabel, Suggestion
from webapp.annotation.selectors import responses_shown
from webapp.annotation.suggestions import item_suggestion, uncertainty_reordering

pytestmark = pytest.mark.django_db


def _lease_and_shown(project: Project, annotator) -> tuple[Assignment, list[int]]:
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    return lease, [response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator)]


def _suggest(prompt: Prompt, value, *, question: str = "ranking", response_id: int | None = None,
             score: float | None = 0.82, agent: str = "judge SmolLM2") -> Suggestion:
    return Suggestion.objects.create(project=prompt.project, prompt=prompt, response_id=response_id,
                                     question=question, value=value, score=score, agent=agent)


def _set(project: Project, **settings: str) -> None:
    Project.objects.filter(pk=project.pk).update(**settings)
    project.refresh_from_db()


# Origin ------------------------------------------------------------------------------------------------------


def test_a_ranking_accepted_unchanged_records_its_suggestion_through_the_page(annotator_client, annotator):
    project = make_project(items=1, responses=3, members=[annotator])
    lease, shown = _lease_and_shown(project, annotator)
    suggested = [[shown[2]], [shown[0], shown[1]]]  # C first, A and B tied
    older = _suggest(lease.prompt, [[shown[0]], [shown[1]], [shown[2]]], agent="reward model run #3", score=0.4)
    row = _suggest(lease.prompt, suggested)
    ranks = {f"rank_{shown[2]}": "1", f"rank_{shown[0]}": "2", f"rank_{shown[1]}": "2"}
    annotator_client.post(f"/annotate/items/{lease.pk}/submit/", {**ranks, "suggestion": str(row.pk)},
                          HTTP_HX_REQUEST="true")
    ranking = Ranking.objects.get()
    assert ranking.suggestion_id == row.pk != older.pk
    assert ranking.tiers == [[shown[2]], sorted(shown[:2])] and ranking.pairs.count() == 2


def test_an_answer_changed_after_accepting_records_no_origin(annotator):
    project = make_project(items=1, responses=3, members=[annotator])
    lease, shown = _lease_and_shown(project, annotator)
    row = _suggest(lease.prompt, [[shown[0]], [shown[1]], [shown[2]]])
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, suggestion_id=row.pk,
                                      tiers=[[shown[1]], [shown[0]], [shown[2]]])
    assert ranking.suggestion_id is None and Ranking.objects.get().suggestion_id is None


def test_all_bad_is_never_the_accepted_suggestion(annotator):
    project = make_project(items=1, responses=2, members=[annotator])
    lease, shown = _lease_and_shown(project, annotator)
    row = _suggest(lease.prompt, [sorted(shown)])  # a tie: the same tiers "all bad" stores
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, suggestion_id=row.pk, all_bad=True)
    assert ranking.all_bad and ranking.suggestion_id is None


def test_a_suggestion_of_another_item_is_refused_naming_the_field(annotator):
    project = make_project(items=2, responses=2, members=[annotator])
    lease, shown = _lease_and_shown(project, annotator)
    other = Prompt.objects.exclude(pk=lease.prompt_id).get()
    row = _suggest(other, [[response.pk] for response in other.responses.all()])
    with pytest.raises(ValidationError) as refusal:
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, suggestion_id=row.pk,
                                tiers=[[shown[0]], [shown[1]]])
    assert refusal.value.messages == [f"suggestion: suggestion {row.pk} is not one of this item's (item 'item-0')"]
    assert not Ranking.objects.exists()


def test_a_project_not_showing_suggestions_refuses_an_accepted_one(annotator_client, annotator):
    project = make_project(items=1, responses=2, members=[annotator])
    _set(project, suggestions_display=Project.SuggestionDisplay.AFTER_ANSWER)
    lease, shown = _lease_and_shown(project, annotator)
    row = _suggest(lease.prompt, [[shown[0]], [shown[1]]])
    answer = annotator_client.post(f"/annotate/items/{lease.pk}/submit/",
                                   {f"rank_{shown[0]}": "1", f"rank_{shown[1]}": "2", "suggestion": str(row.pk)},
                                   HTTP_HX_REQUEST="true").content.decode()
    assert answer.startswith("suggestion: this project does not show suggestions while annotating")
    assert not Ranking.objects.exists()
    bad = annotator_client.post(f"/annotate/items/{lease.pk}/submit/",
                                {f"rank_{shown[0]}": "1", f"rank_{shown[1]}": "2", "suggestion": "x1"},
                                HTTP_HX_REQUEST="true").content.decode()
    assert bad == "suggestion: a suggestion number is expected, not &#x27;x1&#x27;"


def test_thumbs_accepted_record_each_labels_suggestion(annotator):
    project = make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.THUMBS)
    lease, shown = _lease_and_shown(project, annotator)
    up = _suggest(lease.prompt, 1, question="thumb", response_id=shown[0], score=0.9)
    down = _suggest(lease.prompt, 0, question="thumb", response_id=shown[1], score=0.7)
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, suggestion_id=down.pk,
                                      labels={shown[0]: {"": 1.0}, shown[1]: {"": 0.0}})
    labels = {label.response_id: label.suggestion_id for label in ResponseLabel.objects.filter(ranking=ranking)}
    assert labels == {shown[0]: up.pk, shown[1]: down.pk} and ranking.suggestion_id == down.pk


def test_ratings_accepted_take_the_suggestion_on_the_projects_scale(annotator):
    project = make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.RATINGS)
    lease, shown = _lease_and_shown(project, annotator)
    rows = [_suggest(lease.prompt, value, question="overall", response_id=response, agent="reward model run #12")
            for response, value in zip(shown, (3.6, 7.2), strict=True)]
    suggestion = item_suggestion(project=project, prompt_id=lease.prompt_id, shown=shown)
    assert suggestion.labels == {shown[0]: {"overall": 4.0}, shown[1]: {"overall": 5.0}} and suggestion.complete
    changed = {shown[0]: {"overall": 4.0}, shown[1]: {"overall": 4.0}}
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, suggestion_id=rows[0].pk,
                                      labels=changed)
    assert ranking.suggestion_id is None
    assert not ResponseLabel.objects.filter(suggestion__isnull=False).exists()
    services.ranking_withdraw(ranking_id=ranking.pk, annotator=annotator)  # Back, then accept it unchanged
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, suggestion_id=rows[0].pk,
                                      labels=suggestion.labels)
    assert ranking.suggestion_id == rows[1].pk
    assert sorted(ResponseLabel.objects.values_list("suggestion_id", flat=True)) == [row.pk for row in rows]


def test_the_newest_source_is_the_items_suggestion(annotator):
    project = make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.THUMBS)
    lease, shown = _lease_and_shown(project, annotator)
    _suggest(lease.prompt, 1, question="thumb", response_id=shown[0], agent="reward model run #1")
    _suggest(lease.prompt, 1, question="thumb", response_id=shown[1], agent="reward model run #1")
    newest = _suggest(lease.prompt, 0, question="thumb", response_id=shown[0], agent="judge X", score=0.3)
    suggestion = item_suggestion(project=project, prompt_id=lease.prompt_id, shown=shown)
    # one source at a time: the judge's, which has no thumb for B, so it cannot be accepted whole
    assert suggestion.agent == "judge X" and suggestion.labels == {shown[0]: {"": 0.0}}
    assert suggestion.parts == {(shown[0], ""): newest.pk} and not suggestion.complete


# Display -----------------------------------------------------------------------------------------------------


def test_shown_marks_the_suggestion_as_a_machines_and_fills_nothing_in(annotator_client, annotator):
    project = make_project(items=1, responses=3, members=[annotator])
    lease, shown = _lease_and_shown(project, annotator)
    _suggest(lease.prompt, [[shown[1]], [shown[0]], [shown[2]]])
    page = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert "Suggested by judge SmolLM2 · confidence 0.82" in page
    assert '<strong id="suggestion-text">B &gt; A &gt; C</strong>' in page and "machine: rank 1" in page
    assert 'id="accept-suggestion"' in page and "accept the machine's suggestion" in page
    assert re.findall(r'name="rank_\d+" value="([^"]*)"', page) == ["", "", ""]
    assert '<input type="hidden" name="suggestion" value="">' in page


def test_off_shows_no_suggestion_nor_its_key(annotator_client, annotator):
    project = make_project(items=1, responses=2, members=[annotator])
    _set(project, suggestions_display=Project.SuggestionDisplay.OFF)
    lease, shown = _lease_and_shown(project, annotator)
    _suggest(lease.prompt, [[shown[1]], [shown[0]]])
    page = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert 'id="suggestion"' not in page and "Suggested by" not in page and "machine:" not in page
    assert "<kbd>M</kbd>" not in page


def test_after_answer_shows_the_suggestion_only_beside_the_answer_given(annotator_client, annotator):
    project = make_project(items=2, responses=2, members=[annotator], mode=Project.Mode.PAIRWISE)
    _set(project, suggestions_display=Project.SuggestionDisplay.AFTER_ANSWER)
    lease, shown = _lease_and_shown(project, annotator)
    _suggest(lease.prompt, [[shown[1]], [shown[0]]], score=0.71)
    before = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert "Suggested by" not in before and 'id="suggestion-after"' not in before and "<kbd>M</kbd>" not in before
    after = annotator_client.post(f"/annotate/items/{lease.pk}/submit/",
                                  {"response_a": shown[0], "response_b": shown[1], "choice": "a"},
                                  HTTP_HX_REQUEST="true").content.decode()
    line = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", after.split('id="suggestion-after">')[1].split("</p>")[0]))
    assert line == "Last item: you answered A is better; machine judge SmolLM2 suggested B is better (confidence 0.71)."
    assert Ranking.objects.get().suggestion_id is None


# Queue order -------------------------------------------------------------------------------------------------


def _scored_items(project: Project, scores: list[float | None]) -> list[Prompt]:
    """Each item given a ranking suggestion with the score, or none for None."""
    prompts = list(Prompt.objects.filter(project=project).order_by("id"))
    for prompt, score in zip(prompts, scores, strict=True):
        if score is not None:
            _suggest(prompt, [[response.pk] for response in prompt.responses.all()], score=score)
    return prompts


def test_uncertainty_order_leases_the_least_confident_first(researcher_client, researcher):
    annotators = make_annotators(4)
    project = make_project(items=4, responses=2, members=annotators, owner=researcher)
    prompts = _scored_items(project, [0.1, 0.9, None, 0.5])
    default = [services.assignment_lease_next(project=project, annotator=annotator).prompt_id
               for annotator in annotators[:2]]
    assert default == [prompts[0].pk, prompts[1].pk]
    Assignment.objects.all().delete()
    _set(project, queue_order=Project.QueueOrder.UNCERTAINTY)
    leased = [services.assignment_lease_next(project=project, annotator=annotator).prompt_id
              for annotator in annotators]
    assert leased == [prompts[0].pk, prompts[3].pk, prompts[1].pk, prompts[2].pk]
    reordering = uncertainty_reordering(project)
    assert (reordering.moved, reordering.open_items, reordering.percent) == (3, 4, 75)
    page = researcher_client.get(f"/projects/{project.pk}/").content.decode()
    assert "Least confident suggestion first reorders 3 of 4 open items (75 %)." in page
    form = researcher_client.get(f"/projects/{project.pk}/edit/").content.decode()
    assert "Now it would reorder 3 of 4 open items (75 %)." in form


def test_load_comes_before_confidence(annotator):
    (other,) = make_annotators(1)
    project = make_project(items=2, responses=2, members=[annotator, other], overlap=2)
    _set(project, queue_order=Project.QueueOrder.UNCERTAINTY)
    prompts = _scored_items(project, [0.9, 0.2])
    lease = services.assignment_lease_next(project=project, annotator=other)
    assert lease.prompt_id == prompts[1].pk
    # the least confident item is leased to `other`: the one nobody holds comes first, confident or not
    assert services.assignment_lease_next(project=project, annotator=annotator).prompt_id == prompts[0].pk


def test_the_project_form_takes_the_settings_and_refuses_a_bad_one(researcher_client, researcher):
    project = make_project(items=1, responses=2, owner=researcher)
    form = {"name": project.name, "mode": "ranking", "guidelines": "", "responses_per_item": 2,
            "annotators_per_item": 1, "lease_minutes": 30, "suggestions_display": "after_answer",
            "queue_order": "uncertainty"}
    assert researcher_client.post(f"/projects/{project.pk}/edit/", form).status_code == 302
    project.refresh_from_db()
    assert (project.suggestions_display, project.queue_order) == ("after_answer", "uncertainty")
    refused = researcher_client.post(f"/projects/{project.pk}/edit/", {**form, "queue_order": "random"})
    assert "queue_order" in refused.context["form"].errors
    with pytest.raises(ValidationError, match="queue_order"):
        services.project_update(project=project, members=[], queue_order="random")


# Guidelines first --------------------------------------------------------------------------------------------


def test_guidelines_come_before_the_first_item_and_lease_nothing(annotator_client, annotator):
    project = make_project(items=2, responses=2, members=[annotator], guidelines="Prefer **correct** answers.")
    first = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert 'id="guidelines-first"' in first and "<strong>correct</strong>" in first and 'id="start-button"' in first
    assert "Question" not in first and not Assignment.objects.exists()
    started = annotator_client.get(f"/annotate/{project.pk}/?start=1", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="guidelines-first"' not in started and "Question 0?" in started
    lease = Assignment.objects.get()
    services.ranking_skip(assignment_id=lease.pk, annotator=annotator)  # any answer, a skip too, means they began
    again = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert 'id="guidelines-first"' not in again and "Question 1?" in again


def test_a_project_without_guidelines_goes_straight_to_the_item(annotator_client, annotator):
    project = make_project(items=1, responses=2, members=[annotator], guidelines="  \n")
    page = annotator_client.get(f"/annotate/{project.pk}/").content.decode()
    assert 'id="guidelines-first"' not in page and "Question 0?" in page


def test_the_api_records_an_accepted_suggestion_as_the_page_does(annotator, client):
    from tests.webapp.api.conftest import ApiClient
    from webapp.accounts.services import api_token_create

    api = ApiClient(client, api_token_create(user=annotator, name="tests")[1])
    project = make_project(items=2, responses=2, members=[annotator])
    first, second = Prompt.objects.filter(project=project).order_by("id")
    a, b = (response.pk for response in responses_shown(prompt=first, annotator=annotator))
    row = _suggest(first, [[b], [a]])
    accepted = api.post(f"/items/{first.pk}/ranking", {"ranking": [b, a], "suggestion": row.pk})
    assert accepted.status_code == 200 and Ranking.objects.get(prompt=first).suggestion_id == row.pk
    refused = api.post(f"/items/{second.pk}/ranking", {"ranking": [r.pk for r in second.responses.all()],
                                                       "suggestion": row.pk})
    assert refused.status_code == 409 and refused.json()["detail"].startswith(
        f"suggestion: suggestion {row.pk} is not one of this item's")
    assert not Ranking.objects.filter(prompt=second).exists()
