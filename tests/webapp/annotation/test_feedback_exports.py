"""Thumbs, ratings and rankings as training data through the exports (page and API), the selectors the runs read,
and the project page's agreement: the rows webapp.annotation.feedback's rules give on the fixtures of
feedback_fixtures.py."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.webapp.annotation.factories import DISPUTED_RANKINGS, make_disputed_project, make_project
from tests.webapp.annotation.feedback_fixtures import (
    RATING_PAIRS_RANDOM,
    RATING_PAIRS_WORST,
    THUMBS,
    make_ratings_project,
    make_thumbs_project,
)
from tests.webapp.api.run_api_helpers import api_client_of
from webapp.annotation import selectors, services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Prompt, Response, ResponseLabel, Round

pytestmark = pytest.mark.django_db


def _body(response) -> str:
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content).decode()


def _jsonl(response) -> list[dict]:
    return [json.loads(line) for line in _body(response).splitlines()]


def _pairs(rows) -> list[tuple]:
    return [(row["prompt"], row["chosen"], row["rejected"], row["margin"]) for row in rows]


@pytest.fixture
def ratings(researcher):
    return make_ratings_project(owner=researcher)


@pytest.fixture
def thumbs(researcher):
    return make_thumbs_project(owner=researcher)


def test_a_ratings_projects_pairs_are_its_binarized_pairs_in_the_page_export(researcher_client, ratings):
    url = f"/projects/{ratings.pk}/export/pairs.jsonl/"
    rows = _jsonl(researcher_client.get(url))
    assert _pairs(rows) == RATING_PAIRS_RANDOM[0]
    assert {(row["weight"], row["ranking_id"], row["annotator"]) for row in rows} == {(1.0, None, None)}
    assert _pairs(_jsonl(researcher_client.get(url, {"binarization": "random", "seed": 2}))) == RATING_PAIRS_RANDOM[2]
    assert _pairs(_jsonl(researcher_client.get(url, {"binarization": "worst", "seed": 2}))) == RATING_PAIRS_WORST
    with_csv = list(csv.DictReader(io.StringIO(_body(researcher_client.get(
        f"/projects/{ratings.pk}/export/pairs.csv/", {"binarization": "worst"})))))
    assert [(row["chosen"], row["rejected"], float(row["margin"])) for row in with_csv] == [
        (chosen, rejected, margin) for _, chosen, rejected, margin in RATING_PAIRS_WORST]


def test_bad_binarization_options_are_refused_naming_the_field(researcher_client, ratings):
    url = f"/projects/{ratings.pk}/export/pairs.jsonl/"
    response = researcher_client.get(url, {"binarization": "best"})
    assert response.status_code == 400 and response.content.decode().startswith("binarization:")
    response = researcher_client.get(url, {"seed": "-1"})
    assert response.status_code == 400 and response.content.decode().startswith("seed:")


def test_the_training_selectors_and_counts_read_the_binarized_pairs(ratings):
    assert selectors.pair_count(project_id=ratings.pk) == 2
    assert selectors.pair_count(project_id=ratings.pk, aggregation="majority", binarization="worst") == 2
    pairs = selectors.preference_pairs_for_training(project_id=ratings.pk, binarization="worst")
    assert [(pair["chosen"], pair["rejected"], pair["margin"], pair["weight"]) for pair in pairs] == [
        ("a", "d", 3.25, 1.0), ("h", "g", 2.0, 1.0)]


def test_one_annotators_pairs_binarize_their_ratings_alone(ratings):
    # ann1 alone: a 4.5, b 4.0, c 3.0, d 1.0 on item 0; only ann1 rated item 2
    rows = list(selectors.pair_rows(project_id=ratings.pk, aggregation="annotator:ann1", binarization="worst"))
    assert _pairs(rows) == [("Question 0?", "a", "d", 3.5), ("Question 2?", "h", "g", 2.0)]
    assert {row["annotator"] for row in rows} == {"ann1"}
    assert selectors.pair_count(project_id=ratings.pk, aggregation="annotator:ann0") == 1


def test_the_api_pairs_of_a_ratings_project_take_the_same_options(researcher, ratings):
    api = api_client_of(researcher)
    page = api.get(f"/projects/{ratings.pk}/pairs", binarization="worst").json()
    assert page["count"] == 2 and _pairs(page["items"]) == RATING_PAIRS_WORST
    assert _pairs(api.get(f"/projects/{ratings.pk}/pairs", seed=2).json()["items"]) == RATING_PAIRS_RANDOM[2]
    assert api.get(f"/projects/{ratings.pk}/pairs", binarization="best").status_code == 422


def test_thumbs_export_one_unpaired_row_a_thumb(researcher_client, thumbs):
    rows = _jsonl(researcher_client.get(f"/projects/{thumbs.pk}/export/unpaired.jsonl/"))
    expected = [(annotator, text, bool(value)) for annotator, given in THUMBS["Question 0?"].items()
                for text, value in given.items()]
    assert [(row["annotator"], row["completion"], row["label"]) for row in rows] == expected
    ids = dict(Response.objects.filter(prompt__project=thumbs).values_list("text", "pk"))
    assert all(row["prompt"] == "Question 0?" and row["source"] == "thumbs" and row["response_id"] == ids[
        row["completion"]] for row in rows)
    assert set(rows[0]) == {"prompt", "completion", "label", "annotator", "response_id", "source", "round", "model",
                            "label_source"}
    assert (rows[0]["round"], rows[0]["model"]) == (None, "")


@pytest.mark.parametrize(("aggregation", "expected"), [
    ("majority", [("a", True), ("b", False), ("c", False)]),
    ("drop_conflicts", [("a", True), ("c", False)]),
    ("annotator:ann1", [("a", True), ("b", True), ("c", False)]),
])
def test_thumbs_aggregated_across_annotators(researcher_client, thumbs, aggregation, expected):
    response = researcher_client.get(f"/projects/{thumbs.pk}/export/unpaired.jsonl/", {"aggregation": aggregation})
    assert [(row["completion"], row["label"]) for row in _jsonl(response)] == expected


def test_unpaired_csv_and_the_raw_labels(researcher_client, thumbs):
    rows = list(csv.DictReader(io.StringIO(_body(researcher_client.get(
        f"/projects/{thumbs.pk}/export/unpaired.csv/", {"aggregation": "majority"})))))
    assert [(row["completion"], row["label"], row["source"]) for row in rows] == [
        ("a", "True", "thumbs"), ("b", "False", "thumbs"), ("c", "False", "thumbs")]
    labels = _jsonl(researcher_client.get(f"/projects/{thumbs.pk}/export/labels.jsonl/"))
    assert [(row["annotator"], row["response"], row["aspect"], row["value"]) for row in labels] == [
        (annotator, text, "", value) for annotator, given in THUMBS["Question 0?"].items()
        for text, value in given.items()]
    assert labels[0]["prompt_id"] == "item-0" and labels[0]["ranking_id"] is not None


def test_ratings_give_kto_rows_from_their_pairs_and_raw_labels_per_aspect(researcher_client, ratings):
    rows = _jsonl(researcher_client.get(f"/projects/{ratings.pk}/export/unpaired.jsonl/", {"binarization": "worst"}))
    assert [(row["prompt"], row["completion"], row["label"], row["source"]) for row in rows] == [
        ("Question 0?", "a", True, "ratings"), ("Question 0?", "d", False, "ratings"),
        ("Question 2?", "h", True, "ratings"), ("Question 2?", "g", False, "ratings")]
    labels = _jsonl(researcher_client.get(f"/projects/{ratings.pk}/export/labels.jsonl/"))
    assert len(labels) == 2 * (2 * 4 + 2 + 3)  # two aspects per rated response: item 0 by two annotators
    assert {row["aspect"] for row in labels} == {"helpfulness", "honesty"}


def test_rankings_give_kto_rows_best_tier_up_worst_tier_down(researcher):
    project = make_disputed_project(owner=researcher)
    rows = list(selectors.unpaired_rows(project_id=project.pk))
    expected = []
    for annotator, answers in DISPUTED_RANKINGS.items():
        for tiers in answers.values():
            if tiers is not None:
                expected += [(annotator, text, True) for text in tiers[0]]
                expected += [(annotator, text, False) for text in tiers[-1]]
    assert sorted((row["annotator"], row["completion"], row["label"]) for row in rows) == sorted(expected)
    assert len(rows) == 11 and {row["source"] for row in rows} == {"ranking"}
    # majority: a up 2-0, b up 1-0, c down 3-0, d 1-1 (dropped), e up 1-0, f down 2-0
    majority = selectors.unpaired_rows(project_id=project.pk, aggregation="majority")
    assert sorted((row["completion"], row["label"]) for row in majority) == [
        ("a", True), ("b", True), ("c", False), ("e", True), ("f", False)]
    assert selectors.unpaired_count(project_id=project.pk, aggregation="majority") == 5


def test_all_bad_puts_every_response_down_and_imported_pairs_give_their_two_rows(researcher, annotator):
    project = make_project(items=1, texts=[["x", "y"]], members=[annotator], owner=researcher, name="Pairwise",
                           mode="pairwise")
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[], all_bad=True)
    services.prompts_import(project=project, records=[ImportRecord(line=1, external_id="p", text="Pick?",
                                                                   chosen="good", rejected="bad")])
    rows = selectors.unpaired_rows(project_id=project.pk)
    assert [(row["completion"], row["label"], row["source"], row["annotator"]) for row in rows] == [
        ("x", False, "pairwise", annotator.username), ("y", False, "pairwise", annotator.username),
        ("good", True, "pairs", None), ("bad", False, "pairs", None)]


def test_a_conversation_exports_conversational_unpaired_rows(researcher_client, thumbs):
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Question 0?"}]
    Prompt.objects.filter(project=thumbs).update(messages=turns)
    rows = _jsonl(researcher_client.get(f"/projects/{thumbs.pk}/export/unpaired.jsonl/"))
    assert rows[0]["prompt"] == turns and rows[0]["completion"] == [{"role": "assistant", "content": "a"}]


def test_the_api_unpaired_rows_are_the_page_exports(researcher, researcher_client, thumbs):
    api = api_client_of(researcher)
    page = api.get(f"/projects/{thumbs.pk}/unpaired", aggregation="majority").json()
    exported = _jsonl(researcher_client.get(f"/projects/{thumbs.pk}/export/unpaired.jsonl/",
                                            {"aggregation": "majority"}))
    assert page["count"] == 3 and page["items"] == exported
    streamed = api.get(f"/projects/{thumbs.pk}/unpaired", stream="jsonl")
    assert len(b"".join(streamed.streaming_content).splitlines()) == 6
    conversational = api.get(f"/projects/{thumbs.pk}/unpaired", format="conversational").json()["items"]
    assert conversational[0]["completion"] == [{"role": "assistant", "content": "a"}]
    assert api.get(f"/projects/{thumbs.pk}/unpaired", aggregation="most").status_code == 422


def test_the_project_page_shows_alpha_for_thumbs_with_its_item_count_and_the_exports(researcher_client, thumbs):
    page = researcher_client.get(f"/projects/{thumbs.pk}/progress/").content.decode()
    # the thumbs of feedback_fixtures: alpha nominal 1/3 (test_feedback_rules computes it by hand), over 1 item
    assert 'id="label-alpha" data-metric="nominal">0.333<' in page
    assert 'id="label-agreement-items">1<' in page
    detail = researcher_client.get(f"/projects/{thumbs.pk}/").content.decode()
    for kind in ("unpaired.jsonl", "unpaired.csv", "labels.jsonl"):
        assert f"/projects/{thumbs.pk}/export/{kind}/" in detail


def test_the_project_page_shows_alpha_interval_for_ratings(researcher_client, ratings):
    page = researcher_client.get(f"/projects/{ratings.pk}/progress/").content.decode()
    assert 'data-metric="interval"' in page and 'id="label-agreement-items">1<' in page
    agreement = selectors.label_agreement(ratings)
    # item 0's eight (response, aspect) units rated by two annotators; the others rated once (not pairable)
    assert agreement.metric == "interval" and round(agreement.alpha, 3) == 0.851 and agreement.items == 1
    assert f'data-metric="interval">{agreement.alpha:.3f}<' in page


def test_unpaired_rows_name_the_round_and_model_of_their_response(researcher, annotator):
    project = services.project_create(name="Rounds of thumbs", mode="thumbs", responses_per_item=2, owner=researcher)
    services.prompts_import(project=project, records=[ImportRecord(line=1, external_id="p0", text="Question?")])
    round_ = services.round_create(project=project, source=Round.Source.SAMPLED, model="base", responses_per_prompt=2)
    prompt = project.prompts.get()
    services.round_responses_add(round_id=round_.pk, prompt_id=prompt.pk, texts=["r0", "r1"],
                                 source=Response.Source.MODEL, source_detail={"model": "base"})
    response = prompt.responses.get(text="r1")
    ResponseLabel.objects.create(project=project, prompt=prompt, response=response, external_annotator="judge",
                                 value=0.0)
    (row,) = selectors.unpaired_rows(project_id=project.pk)
    assert {key: row[key] for key in ("completion", "label", "annotator", "round", "model", "source")} == {
        "completion": "r1", "label": False, "annotator": "judge", "round": 1, "model": "base", "source": "thumbs"}


def test_the_export_card_offers_the_binarization_to_a_ratings_project_only(researcher_client, researcher, ratings):
    ranked = make_project(owner=researcher, name="Ranked")
    ratings_page = researcher_client.get(f"/projects/{ratings.pk}/").content.decode()
    ranked_page = researcher_client.get(f"/projects/{ranked.pk}/").content.decode()
    assert 'id="export_binarization"' in ratings_page and 'id="export_seed"' in ratings_page
    assert "export_binarization" not in ranked_page and 'id="export_aggregation"' in ranked_page
    # the sampling form's seed and the export's never share an id
    assert ratings_page.count('id="id_seed"') <= 1 and ratings_page.count('id="export_seed"') == 1


def test_the_data_card_counts_labels_and_the_training_rows_they_make(researcher_client, ratings):
    page = researcher_client.get(f"/projects/{ratings.pk}/data/").content.decode()
    given = ResponseLabel.objects.filter(project=ratings, ranking__isnull=False).count()
    assert f'id="labels-given">{given}<' in page and "Ratings given" in page
    assert f'id="binarized-pairs">{selectors.pair_count(project_id=ratings.pk)} ' in page
    assert f'id="unpaired-rows">{selectors.unpaired_count(project_id=ratings.pk)}<' in page
    assert "ranking-pairs" not in page
    progress = researcher_client.get(f"/projects/{ratings.pk}/progress/").content.decode()
    assert "<dt>Answers</dt>" in progress and "<dt>Rankings</dt>" not in progress
