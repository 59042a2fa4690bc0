"""Adjudication and label sources (issue 32, point 5), on fixtures with known disputes: the queue holds exactly the
items below the threshold, lowest agreement first; a decision changes the exported label sources and the pairs (and
a run's training rows) that the `resolved` aggregation yields; the same for thumbs and ratings (labels)."""

import csv
import io
import json
import re

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from tests.webapp.annotation.adjudication_fixtures import (
    AGREEMENTS,
    QUEUE,
    RESOLVED_PAIRS,
    SOURCES,
    make_adjudication_project,
)
from tests.webapp.annotation.factories import make_annotators, make_project
from tests.webapp.annotation.feedback_fixtures import _answer
from webapp.annotation import selectors, services
from webapp.annotation.models import Adjudication, Project, Prompt, Ranking
from webapp.experiments.data_sources import data_source_rows, training_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def disputes(researcher):
    return make_adjudication_project(owner=researcher)


def _prompt(project, text: str) -> Prompt:
    return Prompt.objects.get(project=project, text=text)


def _ids(prompt: Prompt) -> dict[str, int]:
    return {response.text: response.pk for response in prompt.responses.all()}


def _body(response) -> str:
    return b"".join(response.streaming_content).decode()


def _directions(rows) -> set[tuple[str, str, str]]:
    return {(row["prompt"], row["chosen"], row["rejected"]) for row in rows}


def _sources_by_prompt(rows, key: str = "prompt") -> dict[str, set[str]]:
    by_prompt: dict[str, set[str]] = {}
    for row in rows:
        by_prompt.setdefault(row[key], set()).add(row["label_source"])
    return by_prompt


def _decide_with_ann1(project, researcher, text: str) -> Adjudication:
    prompt = _prompt(project, text)
    answer = Ranking.objects.get(prompt=prompt, annotator__username="ann1")
    return services.adjudication_decide(prompt=prompt, decided_by=researcher, reason="ann1 read the question right",
                                        answer_id=answer.pk)


def test_each_items_agreement_and_source_are_the_documented_ones(disputes):
    standings = selectors.item_standings(project_id=disputes.pk)
    texts = dict(Prompt.objects.filter(project=disputes).values_list("pk", "text"))
    assert {texts[pk]: standing.agreement for pk, standing in standings.items()} == pytest.approx(AGREEMENTS)
    assert {texts[pk]: standing.source for pk, standing in standings.items()} == SOURCES


def test_the_queue_holds_exactly_the_items_below_the_threshold_lowest_first(disputes, researcher):
    queue = selectors.adjudication_queue(disputes)
    assert [_prompt(disputes, text).pk for text in QUEUE] == [standing.prompt_id for standing in queue]
    assert [standing.agreement for standing in queue] == pytest.approx([3 / 9, 3 / 9, 5 / 9])
    _decide_with_ann1(disputes, researcher, "Question 2?")
    assert [standing.prompt_id for standing in selectors.adjudication_queue(disputes)] == [
        _prompt(disputes, "Question 3?").pk, _prompt(disputes, "Question 4?").pk]


def test_a_decision_changes_the_exported_label_sources(disputes, researcher, researcher_client):
    url = f"/projects/{disputes.pk}/export/pairs.csv/"
    before = list(csv.DictReader(io.StringIO(_body(researcher_client.get(url)))))
    assert len(before) == 9 * 5 + 6  # every annotator's rows under `all`: 3 pairs each, Question 5 two answers
    assert _sources_by_prompt(before) == {text: {source} for text, source in SOURCES.items()}
    _decide_with_ann1(disputes, researcher, "Question 2?")
    after = list(csv.DictReader(io.StringIO(_body(researcher_client.get(url)))))
    # under `all` the annotators' rows stay, each now marked adjudicated
    assert len(after) == len(before)
    assert _sources_by_prompt(after) == {**{text: {source} for text, source in SOURCES.items()},
                                         "Question 2?": {"adjudicated"}}
    raw = [json.loads(line) for line in _body(researcher_client.get(f"/projects/{disputes.pk}/export/rankings.jsonl/"))
           .splitlines()]
    assert {row["prompt"]: row["label_source"] for row in raw if not row["skipped"]} == {
        **SOURCES, "Question 2?": "adjudicated"}
    assert [row["label_source"] for row in raw if row["skipped"]] == [None]
    unpaired = selectors.unpaired_rows(project_id=disputes.pk)
    assert _sources_by_prompt(unpaired) == {text: {source} for text, source in SOURCES.items()} | {
        "Question 2?": {"adjudicated"}}


def test_resolved_yields_the_resolved_items_and_then_the_decision(disputes, researcher, researcher_client):
    source = {"type": "project_pairs", "project_id": disputes.pk, "aggregation": "resolved"}
    rows = list(selectors.pair_rows(project_id=disputes.pk, aggregation="resolved"))
    assert _directions(rows) == RESOLVED_PAIRS and len(rows) == 6
    assert data_source_rows("dpo", source) == 6
    assert _directions(training_rows("dpo", source)[0]) == RESOLVED_PAIRS

    decision = _decide_with_ann1(disputes, researcher, "Question 2?")  # z > y > x, the minority's answer
    decided = {("Question 2?", "z", "y"), ("Question 2?", "z", "x"), ("Question 2?", "y", "x")}
    rows = list(selectors.pair_rows(project_id=disputes.pk, aggregation="resolved"))
    assert _directions(rows) == RESOLVED_PAIRS | decided and len(rows) == 9
    decision_rows = [row for row in rows if row["prompt"] == "Question 2?"]
    assert {(row["label_source"], row["annotator"], row["ranking_id"]) for row in decision_rows} == {
        ("adjudicated", "rita", None)}
    assert {row["label_source"] for row in rows if row["prompt"] != "Question 2?"} == {"unanimous", "majority"}
    assert data_source_rows("dpo", source) == 9
    assert _directions(training_rows("dpo", source)[0]) == RESOLVED_PAIRS | decided
    # the page's export says the same
    page = list(csv.DictReader(io.StringIO(_body(researcher_client.get(
        f"/projects/{disputes.pk}/export/pairs.csv/?aggregation=resolved")))))
    assert _directions(page) == RESOLVED_PAIRS | decided
    # majority too takes the decision in place of the annotators' 2 votes to 1 for x > y > z
    majority = _directions(selectors.pair_rows(project_id=disputes.pk, aggregation="majority"))
    assert {row for row in majority if row[0] == "Question 2?"} == decided
    # a changed decision replaces the first: one row an item
    services.adjudication_decide(prompt=decision.prompt, decided_by=researcher, reason="on second thought",
                                 tiers=[[_ids(decision.prompt)["x"]], [_ids(decision.prompt)["y"], _ids(decision.prompt)["z"]]])
    assert Adjudication.objects.filter(prompt=decision.prompt).count() == 1
    rows = list(selectors.pair_rows(project_id=disputes.pk, aggregation="resolved"))
    assert {row for row in _directions(rows) if row[0] == "Question 2?"} == {("Question 2?", "x", "y"),
                                                                             ("Question 2?", "x", "z")}


def test_resolved_is_offered_wherever_an_aggregation_is_chosen(disputes, researcher_client):
    detail = researcher_client.get(f"/projects/{disputes.pk}/").content.decode()
    assert 'value="resolved"' in detail and f"Adjudication ({len(QUEUE)})" in detail
    launch = researcher_client.get("/runs/new?kind=dpo").content.decode()
    assert 'value="resolved"' in launch


def test_a_decision_is_refused_without_a_reason_or_with_a_foreign_answer(disputes, researcher):
    prompt = _prompt(disputes, "Question 2?")
    other = Ranking.objects.filter(prompt__project=disputes).exclude(prompt=prompt).first()
    with pytest.raises(ValidationError, match="reason"):
        services.adjudication_decide(prompt=prompt, decided_by=researcher, reason="  ", tiers=[[1], [2]])
    with pytest.raises(ValidationError, match="answer"):
        services.adjudication_decide(prompt=prompt, decided_by=researcher, reason="r", answer_id=other.pk)
    with pytest.raises(ValidationError, match="tiers: response"):
        services.adjudication_decide(prompt=prompt, decided_by=researcher, reason="r",
                                     tiers=[[other.tiers[0][0]], [_ids(prompt)["x"]]])
    with pytest.raises(ValidationError, match="answer: take one"):
        services.adjudication_decide(prompt=prompt, decided_by=researcher, reason="r")
    assert not Adjudication.objects.exists()


def test_the_page_decides_and_refuses_as_the_service_does(disputes, researcher_client, annotator):
    prompt = _prompt(disputes, "Question 3?")
    url = f"/projects/{disputes.pk}/adjudication/{prompt.pk}/"
    annotators_client = Client()
    annotators_client.force_login(annotator)
    assert annotators_client.get(f"/projects/{disputes.pk}/adjudication/").status_code == 403
    assert annotators_client.post(url, {"answer": "own", "order": "R1 > R2 > R3", "reason": "x"}).status_code == 403
    assert not Adjudication.objects.exists()
    page = researcher_client.get(f"/projects/{disputes.pk}/adjudication/").content.decode()
    assert [int(pk) for pk in re.findall(r'id="queued-(\d+)"', page)] == [_prompt(disputes, text).pk for text in QUEUE]
    researcher_client.post(url, {"answer": "own", "order": "R4 > R1", "reason": "typo"})
    assert not Adjudication.objects.exists()
    researcher_client.post(url, {"answer": "own", "order": "R3 > R1 = R2", "reason": "z is right"})
    decision = Adjudication.objects.get(prompt=prompt)
    ids = _ids(prompt)
    assert (decision.tiers, decision.reason, decision.decided_by.username) == (
        [[ids["z"]], [ids["x"], ids["y"]]], "z is right", "rita")


def _labels_project(mode: str, owner):
    annotators = make_annotators(3)
    project = make_project(items=2, texts=[["a", "b"], ["c", "d"]], mode=mode, overlap=3, owner=owner,
                           members=annotators, name=mode)
    return project, {annotator.username: annotator for annotator in annotators}


def test_thumbs_labels_carry_their_source_and_resolved_takes_the_decision(researcher):
    project, people = _labels_project("thumbs", researcher)
    first, second = project.prompts.order_by("id")
    for name in ("ann0", "ann1", "ann2"):  # Question 0: all agree
        _answer(first, people[name], {"a": {"": 1.0}, "b": {"": 0.0}})
    _answer(second, people["ann0"], {"c": {"": 1.0}, "d": {"": 0.0}})  # Question 1: agreement 0, queued
    _answer(second, people["ann1"], {"c": {"": 0.0}, "d": {"": 1.0}})
    assert [standing.prompt_id for standing in selectors.adjudication_queue(project)] == [second.pk]
    labels = list(selectors.label_rows(project_id=project.pk))
    assert _sources_by_prompt(labels) == {"Question 0?": {"unanimous"}, "Question 1?": {"unresolved"}}
    resolved = list(selectors.unpaired_rows(project_id=project.pk, aggregation="resolved"))
    assert {(row["completion"], row["label"]) for row in resolved} == {("a", True), ("b", False)}

    ids = _ids(second)
    services.adjudication_decide(prompt=second, decided_by=researcher, reason="d answers it",
                                 labels={ids["c"]: {"": 0.0}, ids["d"]: {"": 1.0}})
    assert selectors.adjudication_queue(project) == []
    labels = list(selectors.label_rows(project_id=project.pk))
    assert _sources_by_prompt(labels) == {"Question 0?": {"unanimous"}, "Question 1?": {"adjudicated"}}
    resolved = list(selectors.unpaired_rows(project_id=project.pk, aggregation="resolved"))
    assert {(row["completion"], row["label"], row["label_source"], row["annotator"]) for row in resolved} == {
        ("a", True, "unanimous", "ann0"), ("b", False, "unanimous", "ann0"),
        ("c", False, "adjudicated", "rita"), ("d", True, "adjudicated", "rita")}
    source = {"type": "project_pairs", "project_id": project.pk, "aggregation": "resolved"}
    assert data_source_rows("kto", source) == 4
    # under `all`, every annotator's thumbs stay (marked adjudicated)
    assert len(list(selectors.unpaired_rows(project_id=project.pk))) == 3 * 2 + 2 * 2


def test_a_ratings_decision_gives_the_binarized_pair_of_its_ratings(researcher):
    project, people = _labels_project("ratings", researcher)
    first, _ = project.prompts.order_by("id")
    _answer(first, people["ann0"], {"a": {"overall": 5}, "b": {"overall": 1}})
    _answer(first, people["ann1"], {"a": {"overall": 1}, "b": {"overall": 5}})
    assert [row["label_source"] for row in selectors.pair_rows(project_id=project.pk)] == []  # tied means: no pair
    assert list(selectors.pair_rows(project_id=project.pk, aggregation="resolved")) == []
    ids = _ids(first)
    with pytest.raises(ValidationError, match="not a whole number"):
        services.adjudication_decide(prompt=first, decided_by=researcher, reason="b",
                                     labels={ids["a"]: {"overall": 9}, ids["b"]: {"overall": 5}})
    services.adjudication_decide(prompt=first, decided_by=researcher, reason="b is better",
                                 labels={ids["a"]: {"overall": 2}, ids["b"]: {"overall": 4}})
    rows = list(selectors.pair_rows(project_id=project.pk, aggregation="resolved"))
    assert [(row["chosen"], row["rejected"], row["margin"], row["label_source"]) for row in rows] == [
        ("b", "a", 2.0, "adjudicated")]


def test_any_item_can_be_decided_from_its_own_page(disputes, researcher_client):
    prompt = _prompt(disputes, "Question 1?")  # a majority item, not in the queue
    item_page = researcher_client.get(f"/projects/{disputes.pk}/items/{prompt.pk}/").content.decode()
    assert f"/projects/{disputes.pk}/adjudication/?item={prompt.pk}" in item_page
    focus = researcher_client.get(f"/projects/{disputes.pk}/adjudication/?item={prompt.pk}").content.decode()
    assert f'id="item-{prompt.pk}"' in focus and "majority" in focus and 'id="queue-heading"' not in focus
    answered = researcher_client.post(f"/projects/{disputes.pk}/adjudication/{prompt.pk}/",
                                      {"answer": "own", "order": "R2 > R1 > R3", "reason": "y first", "focus": "1"})
    assert answered["Location"].endswith(f"?item={prompt.pk}")
    assert selectors.item_standings(project_id=disputes.pk)[prompt.pk].source == "adjudicated"
    focus = researcher_client.get(answered["Location"]).content.decode()
    assert f'id="decided-{prompt.pk}"' in focus and "R2 &gt; R1 &gt; R3" in focus


def test_the_project_form_sets_the_rule_and_refuses_what_the_database_would(researcher_client):
    form = {"name": "Rule", "mode": "ranking", "guidelines": "", "responses_per_item": 3, "annotators_per_item": 3,
            "lease_minutes": 30}
    researcher_client.post("/projects/new/", {**form, "adjudication_min_answers": 3, "adjudication_threshold": 0.5})
    project = Project.objects.get(name="Rule")
    assert (project.adjudication_min_answers, project.adjudication_threshold) == (3, 0.5)
    refused = researcher_client.post(f"/projects/{project.pk}/edit/", {**form, "adjudication_min_answers": 1,
                                                                         "adjudication_threshold": 1.5})
    assert "At least 2" in refused.content.decode() and "A share from 0 to 1, not 1.5" in refused.content.decode()
    researcher_client.post(f"/projects/{project.pk}/edit/", form)  # left out: the project's stay
    project.refresh_from_db()
    assert (project.adjudication_min_answers, project.adjudication_threshold) == (3, 0.5)
    detail = researcher_client.get(f"/projects/{project.pk}/").content.decode()
    assert "items with 3 answers or more whose agreement is below 0.50" in detail
