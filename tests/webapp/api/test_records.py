"""API record import: JSON or NDJSON, checked exactly as the page's import checks a file (a refusal names the
record's index and field), all or nothing, idempotent by external id, within the upload limit."""

from __future__ import annotations

import json

import pytest

from tests.webapp.annotation.factories import make_project
from webapp.annotation.importing import ImportFileError, parse_import
from webapp.annotation.models import PreferencePair, Prompt, Response

pytestmark = pytest.mark.django_db


def records(count: int, start: int = 0) -> list[dict]:
    return [{"id": f"r{index}", "prompt": f"Question {index}?", "responses": [f"a{index}", f"b{index}"],
             "answer": str(index), "metadata": {"n": index}} for index in range(start, start + count)]


def ndjson(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


@pytest.fixture
def project(researcher):
    return make_project(items=0, name="Imports", owner=researcher)


def rows_of(project) -> tuple[int, int, int]:
    return (Prompt.objects.filter(project=project).count(), Response.objects.filter(prompt__project=project).count(),
            PreferencePair.objects.filter(project=project).count())


def test_a_thousand_records_as_json_then_again(api, project):
    url = f"/projects/{project.pk}/records"
    response = api.post(url, {"records": records(1000)})
    assert response.status_code == 200 and response.json() == {"created": 1000, "skipped": 0}
    assert rows_of(project) == (1000, 2000, 0)
    prompt = Prompt.objects.get(project=project, external_id="r7")
    assert (prompt.text, prompt.reference_answer, prompt.metadata, prompt.response_count) == (
        "Question 7?", "7", {"n": 7}, 2)
    assert list(prompt.responses.order_by("id").values_list("text", "source")) == [("a7", "imported"),
                                                                                  ("b7", "imported")]

    assert api.post(url, {"records": records(1000)}).json() == {"created": 0, "skipped": 1000}
    assert rows_of(project) == (1000, 2000, 0)


def test_a_thousand_records_as_ndjson_then_again_with_more(api, project):
    url = f"/projects/{project.pk}/records"
    response = api.post_bytes(url, ndjson(records(1000)), "application/x-ndjson")
    assert response.status_code == 200 and response.json() == {"created": 1000, "skipped": 0}
    assert rows_of(project) == (1000, 2000, 0)

    response = api.post_bytes(url, ndjson(records(1010)), "application/x-ndjson")
    assert response.json() == {"created": 10, "skipped": 1000}
    assert rows_of(project) == (1010, 2020, 0)


def test_every_format_of_the_page_is_accepted(api, project):
    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    rows = [
        {"prompt": "Pick one", "chosen": "good", "rejected": "bad"},
        {"messages": conversation},
        {"chosen": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
         "rejected": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]},
        {"prompt": [{"role": "user", "content": "Sampled later"}], "external_id": 17},
    ]
    assert api.post(f"/projects/{project.pk}/records", {"records": rows}).json() == {"created": 4, "skipped": 0}
    page_records = parse_import(ndjson(rows), file_format="jsonl")
    stored = {prompt.external_id: prompt for prompt in Prompt.objects.filter(project=project)}
    assert set(stored) == {record.external_id for record in page_records}
    for record in page_records:
        prompt = stored[record.external_id]
        assert (prompt.text, prompt.messages) == (record.text, record.messages)
        answers = (record.chosen, record.rejected) if record.is_pair else record.responses
        assert tuple(prompt.responses.order_by("id").values_list("text", flat=True)) == answers
    assert PreferencePair.objects.filter(project=project).count() == 2


BAD_ROWS = [
    {"responses": ["a", "b"]},
    {"prompt": "   "},
    {"prompt": "x", "responses": "a"},
    {"prompt": "x", "responses": ["a", ""]},
    {"prompt": "x", "chosen": "a"},
    {"prompt": "x", "chosen": "a", "rejected": "a"},
    {"prompt": "x", "metadata": 3},
    {"prompt": "x\u0000"},
    {"prompt": "x", "completion": "y", "label": "yes"},
    {"messages": [{"role": "robot", "content": "x"}]},
    {"prompt": "x", "id": ""},
    {"prompt": "x", "metadata": {"deep": float("nan")}},
]


@pytest.mark.parametrize("bad", BAD_ROWS, ids=[json.dumps(row)[:40] for row in BAD_ROWS])
def test_the_api_refuses_what_the_page_refuses_naming_index_and_field(api, project, bad):
    rows = [*records(2), bad, *records(2, start=2)]
    with pytest.raises(ImportFileError) as page:
        parse_import(ndjson(rows), file_format="jsonl")
    expected = f'record 2, field "{page.value.field}": {page.value.problem}'
    url = f"/projects/{project.pk}/records"

    as_json = api.post(url, {"records": rows})
    assert as_json.status_code == 422 and as_json.json()["detail"].startswith(expected)
    as_ndjson = api.post_bytes(url, ndjson(rows), "application/x-ndjson")
    assert as_ndjson.status_code == 422 and as_ndjson.json()["detail"].startswith(expected)
    assert "(line 3)" in as_ndjson.json()["detail"]
    assert rows_of(project) == (0, 0, 0)


def test_a_bad_record_late_in_a_large_body_leaves_nothing(api, project):
    rows = records(1200)
    rows[1100] = {"id": "late", "prompt": 42}
    response = api.post_bytes(f"/projects/{project.pk}/records", ndjson(rows), "application/x-ndjson")
    assert response.status_code == 422
    assert response.json()["detail"].startswith('record 1100, field "prompt": must be a string, got int')
    assert rows_of(project) == (0, 0, 0)


def test_an_id_given_twice_names_both_records(api, project):
    rows = records(6)
    rows[5]["id"] = "r2"
    for response in (api.post(f"/projects/{project.pk}/records", {"records": rows}),
                     api.post_bytes(f"/projects/{project.pk}/records", ndjson(rows), "application/x-ndjson")):
        assert response.status_code == 422
        assert response.json()["detail"].startswith('record 5, field "id": \'r2\' already appears in record 2')
    assert rows_of(project) == (0, 0, 0)


def test_ndjson_blank_lines_are_skipped_and_lines_told_apart_from_indexes(api, project):
    body = b'{"prompt": "one"}\n\n{"prompt": "two"}\r\n   \nnot json\n'
    response = api.post_bytes(f"/projects/{project.pk}/records", body, "application/x-ndjson")
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail.startswith('record 2, field "json": not valid JSON') and "(line 5)" in detail
    assert rows_of(project) == (0, 0, 0)


def test_records_that_are_not_objects_are_named(api, project):
    response = api.post(f"/projects/{project.pk}/records", {"records": [{"prompt": "ok"}, "just text"]})
    assert response.status_code == 422
    assert response.json()["detail"].startswith('record 1, field "record": expected a JSON object, got str')
    assert rows_of(project) == (0, 0, 0)


@pytest.mark.parametrize(("body", "content_type", "status"), [
    (b"\n\n", "application/x-ndjson", 422),
    (b'{"records": []}', "application/json", 422),
    (b'{"rows": []}', "application/json", 422),
    (b"[1, 2]", "application/json", 422),
    (b"{not json", "application/json", 400),
    (b'{"prompt": "x"}', "text/plain", 415),
])
def test_bodies_without_records(api, project, body, content_type, status):
    response = api.post_bytes(f"/projects/{project.pk}/records", body, content_type)
    assert response.status_code == status and response.json()["detail"]
    assert rows_of(project) == (0, 0, 0)


def test_bodies_over_the_upload_limit_are_refused(api, project, settings):
    body = ndjson(records(200))
    settings.PREFLAB_UPLOAD_MAX_BYTES = len(body) - 1
    for content_type in ("application/x-ndjson", "application/json"):
        data = body if content_type != "application/json" else json.dumps({"records": records(200)}).encode()
        response = api.post_bytes(f"/projects/{project.pk}/records", data, content_type)
        assert response.status_code == 413 and "at most" in response.json()["detail"], content_type
    assert rows_of(project) == (0, 0, 0)
    settings.PREFLAB_UPLOAD_MAX_BYTES = len(body)
    assert api.post_bytes(f"/projects/{project.pk}/records", body, "application/x-ndjson").status_code == 200


def test_an_unknown_project(api):
    response = api.post("/projects/999999/records", {"records": records(1)})
    assert response.status_code == 404 and response.json() == {"detail": "project 999999 does not exist"}
    assert not Prompt.objects.exists()


def test_trl_unpaired_records_of_one_prompt_are_one_item_with_its_thumbs(api, project):
    from webapp.annotation.models import ResponseLabel

    rows = [{"prompt": "2+2?", "completion": "4", "label": True}, {"prompt": "Hi", "completion": "Hello", "label": True},
            {"prompt": "2+2?", "completion": "5", "label": False}]
    url = f"/projects/{project.pk}/records"
    for response in (api.post(url, {"records": rows}), api.post_bytes(url, ndjson(rows), "application/x-ndjson")):
        assert response.status_code == 200, response.content
    assert Prompt.objects.filter(project=project, text="2+2?").get().response_count == 2
    assert sorted(ResponseLabel.objects.filter(project=project).values_list("response__text", "value")) == [
        ("4", 1.0), ("5", 0.0), ("Hello", 1.0)]  # the second body was present already: nothing added
