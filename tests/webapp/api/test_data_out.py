"""API data: prompts with their responses in pages, responses added through the sampling jobs' service, rankings
as the rankings export's rows, preference pairs exactly as the page's JSONL export writes them."""

from __future__ import annotations

import json

import pytest

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import selectors, services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Prompt, Response

pytestmark = pytest.mark.django_db


def rank_all(project, annotator, *, reverse: bool = False) -> int:
    """Rank every item the queue gives `annotator`, responses in id order (reversed if asked), a tie in the
    middle of rankings of three or more; returns how many were ranked."""
    ranked = 0
    while (lease := services.assignment_lease_next(project=project, annotator=annotator)) is not None:
        ids = sorted(response.pk for response in selectors.responses_shown(prompt=lease.prompt, annotator=annotator))
        ids = ids[::-1] if reverse else ids
        tiers = [[ids[0]], ids[1:3], *[[response] for response in ids[3:]]] if len(ids) > 2 else [[i] for i in ids]
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=tiers)
        ranked += 1
    return ranked


def all_items(api, url: str, **params) -> list[dict]:
    items, offset = [], 0
    while offset is not None:
        page = api.get(url, {**params, "limit": 4, "offset": offset}).json()
        items += page["items"]
        offset = page["next"]
    assert len(items) == page["count"]
    return items


def page_export(researcher_client, project, strategy: str = "all") -> bytes:
    response = researcher_client.get(f"/projects/{project.pk}/export/pairs.jsonl/", {"strategy": strategy})
    assert response.status_code == 200
    return b"".join(response.streaming_content)


def test_prompts_with_their_responses_in_pages(api, researcher):
    project = make_project(items=9, responses=3, owner=researcher)
    Prompt.objects.filter(project=project, external_id="item-1").update(
        reference_answer="42", metadata={"topic": "maths"}, messages=[{"role": "user", "content": "Question 1?"}])
    items = all_items(api, f"/projects/{project.pk}/prompts")
    assert [item["external_id"] for item in items] == [f"item-{index}" for index in range(9)]
    second = items[1]
    prompt = Prompt.objects.get(project=project, external_id="item-1")
    assert second == {
        "id": prompt.pk, "external_id": "item-1", "prompt": "Question 1?",
        "messages": [{"role": "user", "content": "Question 1?"}], "reference": "42", "metadata": {"topic": "maths"},
        "responses": [{"id": response.pk, "text": response.text, "source": "imported", "round": None, "model": ""}
                      for response in prompt.responses.order_by("id")],
    }
    assert items[0]["messages"] is None and items[0]["reference"] is None
    assert api.get(f"/projects/{project.pk}/prompts", {"limit": 4, "offset": 8}).json()["next"] is None
    assert api.get("/projects/999999/prompts").status_code == 404


def test_responses_added_as_a_sampling_job_adds_them(api, researcher):
    project = make_project(items=0, owner=researcher)
    services.prompts_import(project=project, records=[ImportRecord(line=1, external_id="q", text="Q?")])
    prompt = Prompt.objects.get()
    response = api.post(f"/prompts/{prompt.pk}/responses",
                        {"texts": ["first", "second"], "detail": {"model": "org/m", "temperature": 0.7}})
    assert response.status_code == 201
    stored = list(Response.objects.filter(prompt=prompt).order_by("id"))
    assert response.json() == [{"id": row.pk, "text": row.text, "prompt": prompt.pk, "round": 1} for row in stored]
    assert [row.text for row in stored] == ["first", "second"]
    assert {row.source for row in stored} == {"api"} and stored[0].source_detail == {"model": "org/m",
                                                                                      "temperature": 0.7}
    prompt.refresh_from_db()
    assert prompt.response_count == 2

    assert api.post(f"/prompts/{prompt.pk}/responses", {"texts": ["c"], "source": "model"}).status_code == 201
    assert Response.objects.filter(prompt=prompt, source="model").count() == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"texts": []}, "texts"),
    ({}, "texts"),
    ({"texts": [3]}, "texts[0]"),
    ({"texts": ["a"], "source": "somewhere"}, "source"),
    ({"texts": ["a"], "detail": {"k": "nul\u0000"}}, "detail.k"),
    ({"texts": ["a"], "detail": {"list": [1, {"n\u0000": 1}]}}, "detail.list[1]"),
    # as the import refuses them (one rule): a NUL is not stored as U+FFFD, a lone surrogate is not a 500
    ({"texts": ["first", "second\u0000"]}, "texts[1]"),
    ({"texts": ["a\ud800"]}, "texts[0]"),
    ({"texts": ["a"], "detail": {"t": float("nan")}}, "detail.t"),
    (5, "body"),
])
def test_refused_responses_write_nothing(api, researcher, body, field):
    project = make_project(items=1, responses=2, owner=researcher)
    prompt = project.prompts.get()
    response = api.post(f"/prompts/{prompt.pk}/responses", body)
    assert response.status_code == 422 and response.json()["detail"].startswith(f"{field}: ")
    assert prompt.responses.count() == 2


def test_responses_to_an_unknown_prompt(api):
    response = api.post("/prompts/999999/responses", {"texts": ["a"]})
    assert response.status_code == 404 and not Response.objects.exists()


def test_rankings_are_the_exports_rows(api, researcher, researcher_client):
    first, second = make_annotators(2)
    project = make_project(items=5, responses=4, members=[first, second], overlap=2, owner=researcher)
    assert rank_all(project, first) == 5 and rank_all(project, second, reverse=True) == 5
    items = all_items(api, f"/projects/{project.pk}/rankings")
    assert len(items) == 10
    exported = researcher_client.get(f"/projects/{project.pk}/export/rankings.jsonl/")
    assert items == [json.loads(line) for line in b"".join(exported.streaming_content).splitlines()]


@pytest.fixture
def ranked(researcher):
    (annotator,) = make_annotators(1)
    project = make_project(items=6, responses=4, members=[annotator], owner=researcher)
    services.prompts_import(project=project, records=[
        ImportRecord(line=1, external_id="pair", text="Imported pair?", chosen="yes", rejected="no")])
    assert rank_all(project, annotator) == 6
    return project


def test_pairs_are_the_page_exports_rows(api, researcher_client, ranked):
    for strategy in ("all", "best_vs_rest", "adjacent"):
        exported = page_export(researcher_client, ranked, strategy)
        rows = [json.loads(line) for line in exported.splitlines()]
        assert len(rows) > 6
        assert all_items(api, f"/projects/{ranked.pk}/pairs", strategy=strategy) == rows, strategy
        assert api.get(f"/projects/{ranked.pk}/pairs", {"strategy": strategy}).json()["count"] == len(rows)

        streamed = api.get(f"/projects/{ranked.pk}/pairs", {"strategy": strategy, "stream": "jsonl", "limit": 1})
        assert streamed.status_code == 200 and streamed["Content-Type"].startswith("application/x-ndjson")
        assert b"".join(streamed.streaming_content) == exported, strategy
    assert {row["prompt"] for row in rows} >= {"Imported pair?", "Question 0?"}
    assert api.get(f"/projects/{ranked.pk}/pairs", {"format": "standard"}).json()["items"][0]["prompt"] == (
        "Imported pair?")


def test_conversational_pairs(api, researcher_client, ranked):
    services.prompts_import(project=ranked, records=[ImportRecord(
        line=1, external_id="chat", text="user: Hi", messages=[{"role": "user", "content": "Hi"}],
        chosen="Hello!", rejected="Go away.")])
    exported = page_export(researcher_client, ranked)
    rows = [json.loads(line) for line in exported.splitlines()]
    assert all(isinstance(row["prompt"], list) for row in rows)
    assert all_items(api, f"/projects/{ranked.pk}/pairs") == rows
    assert all_items(api, f"/projects/{ranked.pk}/pairs", format="conversational") == rows
    streamed = api.get(f"/projects/{ranked.pk}/pairs", {"stream": "jsonl"})
    assert b"".join(streamed.streaming_content) == exported

    refused = api.get(f"/projects/{ranked.pk}/pairs", {"format": "standard"})
    assert refused.status_code == 422 and refused.json()["detail"].startswith("format: ")
    # the unpaired (KTO) rows are read the same way
    unpaired = all_items(api, f"/projects/{ranked.pk}/unpaired")
    assert unpaired and all(isinstance(row["prompt"], list) for row in unpaired)
    refused = api.get(f"/projects/{ranked.pk}/unpaired", {"format": "standard"})
    assert refused.status_code == 422 and "its rows are conversational only" in refused.json()["detail"]
    assert api.get(f"/projects/{ranked.pk}/unpaired", {"aggregation": "most"}).status_code == 422


def test_a_text_project_asked_for_conversational_pairs(api, ranked):
    rows = all_items(api, f"/projects/{ranked.pk}/pairs", format="conversational")
    assert rows[0]["prompt"] == [{"role": "user", "content": "Imported pair?"}]
    assert rows[0]["chosen"] == [{"role": "assistant", "content": "yes"}]
    unpaired = all_items(api, f"/projects/{ranked.pk}/unpaired", format="conversational")
    imported = [row for row in unpaired if row["prompt"] == [{"role": "user", "content": "Imported pair?"}]]
    assert [(row["completion"][0]["content"], row["label"]) for row in imported] == [("yes", True), ("no", False)]


def test_pairs_refusals(api, ranked):
    assert api.get(f"/projects/{ranked.pk}/pairs", {"strategy": "best"}).status_code == 422
    assert api.get(f"/projects/{ranked.pk}/pairs", {"stream": "csv"}).status_code == 422
    assert api.get("/projects/999999/pairs").status_code == 404


def test_every_operation_that_streams_json_lines_declares_them_in_its_schema():
    """An operation taking stream=jsonl answers application/x-ndjson, so its schema says so beside the JSON page
    (the schema fuzzer found /unpaired's stream undeclared: a client generated from the schema would refuse it)."""
    from django.test import Client

    schema = Client().get("/api/v1/openapi.json").json()
    streaming = {
        (path, method): operation["responses"]["200"]["content"]
        for path, operations in schema["paths"].items() for method, operation in operations.items()
        if any(parameter["name"] == "stream" for parameter in operation.get("parameters", []))
    }
    assert {"/api/v1/projects/{project_id}/pairs", "/api/v1/projects/{project_id}/unpaired"} <= {path for path, _ in streaming}
    assert {key: sorted(content) for key, content in streaming.items() if "application/x-ndjson" not in content} == {}
