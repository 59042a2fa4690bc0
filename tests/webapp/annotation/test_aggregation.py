"""Aggregation of disputed pairs (issue 29): all, majority, drop_conflicts, annotator:<username>, in the page's
export, the API's, the management command's and a run's training data, on a fixture with known disputes."""

import json

import pytest
from django.core.management import CommandError, call_command

from tests.webapp.annotation.factories import DISPUTED_PAIR_COUNTS, make_disputed_project
from tests.webapp.api.conftest import ApiClient
from webapp.accounts.services import api_token_create
from webapp.annotation import selectors
from webapp.annotation.aggregation import AggregationError, aggregate_pairs
from webapp.experiments.data_sources import data_source_rows, training_rows

pytestmark = pytest.mark.django_db

MODES = list(DISPUTED_PAIR_COUNTS)


@pytest.fixture
def disputed(researcher):
    return make_disputed_project(owner=researcher)


def _directions(rows) -> set[tuple[str, str, str]]:
    return {(row["prompt"], row["chosen"], row["rejected"]) for row in rows}


def test_the_fixture_holds_the_documented_disputes(disputed):
    rows = list(selectors.pair_rows(project_id=disputed.pk))
    assert len(rows) == 14
    # the case: one annotator's a > b beside another's b > a, both exported today
    assert {("Question 0?", "a", "b"), ("Question 0?", "b", "a")} <= _directions(rows)


@pytest.mark.parametrize("mode", MODES)
def test_each_aggregation_gives_its_documented_count_in_every_reader(disputed, mode):
    expected = DISPUTED_PAIR_COUNTS[mode]
    assert len(list(selectors.pair_rows(project_id=disputed.pk, aggregation=mode))) == expected
    assert selectors.pair_count(project_id=disputed.pk, aggregation=mode) == expected
    assert len(selectors.preference_pairs_for_training(project_id=disputed.pk, aggregation=mode)) == expected
    source = {"type": "project_pairs", "project_id": disputed.pk, "aggregation": mode}
    assert data_source_rows("dpo", source) == expected
    assert len(training_rows("dpo", source)[0]) == expected
    assert len(training_rows("sft", source)[0]) == expected


def test_majority_keeps_the_direction_most_chose_and_drops_ties(disputed):
    rows = list(selectors.pair_rows(project_id=disputed.pk, aggregation="majority"))
    assert _directions(rows) == {
        ("Question 0?", "a", "b"), ("Question 0?", "a", "c"), ("Question 0?", "b", "c"),  # a > b: 2 votes to 1
        ("Question 1?", "d", "f"), ("Question 1?", "e", "f"),  # d vs e: 1 vote each, dropped
    }
    # the kept row is the earliest of its direction: ann0's, unchanged
    assert {row["annotator"] for row in rows} == {"ann0"}


def test_drop_conflicts_keeps_only_pairs_everyone_agrees_on(disputed):
    rows = list(selectors.pair_rows(project_id=disputed.pk, aggregation="drop_conflicts"))
    assert _directions(rows) == {("Question 0?", "a", "c"), ("Question 0?", "b", "c"), ("Question 1?", "d", "f"),
                                 ("Question 1?", "e", "f")}


def test_one_annotators_pairs(disputed):
    rows = list(selectors.pair_rows(project_id=disputed.pk, aggregation="annotator:ann1"))
    assert {row["annotator"] for row in rows} == {"ann1"}
    assert ("Question 0?", "b", "a") in _directions(rows)


def test_aggregation_composes_with_the_strategy(disputed):
    # best vs rest: Q0 a>b a>c (ann0 and ann2), b>a b>c (ann1); Q1 d>e d>f (ann0), e>d e>f (ann1)
    best = list(selectors.pair_rows(project_id=disputed.pk, strategy="best_vs_rest"))
    assert len(best) == 10
    majority = selectors.pair_rows(project_id=disputed.pk, strategy="best_vs_rest", aggregation="majority")
    assert _directions(majority) == {("Question 0?", "a", "b"), ("Question 0?", "a", "c"),
                                     ("Question 0?", "b", "c"), ("Question 1?", "d", "f"), ("Question 1?", "e", "f")}


def test_an_unknown_aggregation_is_refused_before_any_row_is_read():
    for mode in ("most", "annotator:", "annotator: ann0", "majority\n", "", None):
        with pytest.raises(AggregationError, match="aggregation"):
            aggregate_pairs(iter(()), mode)


@pytest.mark.parametrize("mode", MODES)
def test_the_page_export_gives_the_documented_counts(researcher_client, disputed, mode):
    for kind, header in (("pairs.jsonl", 0), ("pairs.csv", 1)):
        response = researcher_client.get(f"/projects/{disputed.pk}/export/{kind}/",
                                         {"strategy": "all", "aggregation": mode})
        assert response.status_code == 200
        lines = b"".join(response.streaming_content).decode().splitlines()
        assert len(lines) - header == DISPUTED_PAIR_COUNTS[mode], (kind, mode)


def test_the_export_form_offers_the_aggregations_and_a_bad_one_is_a_400(researcher_client, disputed):
    page = researcher_client.get(f"/projects/{disputed.pk}/").content.decode()
    for value in ("majority", "drop_conflicts", "annotator:ann0", "annotator:ann2"):
        assert f'value="{value}"' in page
    refused = researcher_client.get(f"/projects/{disputed.pk}/export/pairs.jsonl/", {"aggregation": "most"})
    assert refused.status_code == 400 and "unknown aggregation 'most'" in refused.content.decode()


@pytest.mark.parametrize("mode", MODES)
def test_the_api_export_gives_the_documented_counts(client, researcher, disputed, mode):
    api = ApiClient(client, api_token_create(user=researcher, name="tests")[1])
    page = api.get(f"/projects/{disputed.pk}/pairs", {"aggregation": mode, "limit": 100}).json()
    assert page["count"] == len(page["items"]) == DISPUTED_PAIR_COUNTS[mode]
    streamed = api.get(f"/projects/{disputed.pk}/pairs", {"aggregation": mode, "stream": "jsonl"})
    assert len(b"".join(streamed.streaming_content).splitlines()) == DISPUTED_PAIR_COUNTS[mode]


def test_the_api_refuses_an_unknown_aggregation(client, researcher, disputed):
    api = ApiClient(client, api_token_create(user=researcher, name="tests")[1])
    refused = api.get(f"/projects/{disputed.pk}/pairs", {"aggregation": "most"})
    assert refused.status_code == 422, refused.content
    assert "aggregation" in refused.json()["detail"]


@pytest.mark.parametrize("mode", ["all", "majority", "drop_conflicts", "annotator:ann0"])
def test_the_management_command_gives_the_documented_counts(disputed, tmp_path, mode):
    output = tmp_path / "pairs.jsonl"
    call_command("export_preferences", project=str(disputed.pk), aggregation=mode, output=output)
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(rows) == DISPUTED_PAIR_COUNTS[mode]
    with pytest.raises(CommandError, match="--aggregation: unknown aggregation 'most'"):
        call_command("export_preferences", project=str(disputed.pk), aggregation="most", output=output)
