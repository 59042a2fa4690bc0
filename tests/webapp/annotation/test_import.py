"""Import: JSONL and CSV in every shape, all or nothing, idempotent, from the form and the command."""

import io
import json
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from webapp.annotation import services
from webapp.annotation.importing import ImportFileError, parse_import
from webapp.annotation.models import ImportJob, PreferencePair, Prompt, Response
from workers.importing import import_job_execute

pytestmark = pytest.mark.django_db


def _jsonl(*rows) -> bytes:
    return "\n".join(json.dumps(row) for row in rows).encode()


MIXED = _jsonl(
    {"id": "r1", "prompt": "2+2?", "responses": ["4", "5", "**four**"], "answer": 4},
    {"id": "p1", "prompt": "Say hi"},
    {"prompt": "Capital of France?", "chosen": "Paris", "rejected": "Lyon", "source": "hh"},
    {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"}]},
)


@pytest.fixture
def project(settings, tmp_path, researcher):
    settings.DATA_DIR = tmp_path
    return services.project_create(name="Import", responses_per_item=3, owner=researcher)


def test_every_shape_is_imported(project):
    summary = services.prompts_import(project=project, records=parse_import(MIXED, file_format="jsonl"))
    assert (summary.created, summary.responses, summary.pairs) == (4, 6, 1)
    ranked = Prompt.objects.get(external_id="r1")
    assert ranked.reference_answer == "4" and ranked.response_count == 3 and ranked.annotatable
    assert Prompt.objects.get(external_id="p1").response_count == 0
    pair = PreferencePair.objects.get()
    assert (pair.prompt.text, pair.chosen.text, pair.rejected.text) == ("Capital of France?", "Paris", "Lyon")
    assert pair.prompt.metadata == {"source": "hh"} and not pair.prompt.annotatable
    chat = Prompt.objects.get(text="user: Hello")
    assert chat.messages == [{"role": "user", "content": "Hello"}]
    assert list(chat.responses.values_list("text", flat=True)) == ["Hi there"]


def test_importing_twice_adds_nothing(project):
    records = parse_import(MIXED, file_format="jsonl")
    services.prompts_import(project=project, records=records)
    again = services.prompts_import(project=project, records=parse_import(MIXED, file_format="jsonl"))
    assert (again.created, again.already_present) == (0, 4)
    assert Prompt.objects.count() == 4 and Response.objects.count() == 6


def test_an_error_on_the_last_line_writes_nothing_and_names_that_line(project, researcher_client):
    bad = MIXED + b"\n" + _jsonl({"id": "x", "prompt": "ok", "responses": ["fine", 7]})
    with pytest.raises(ImportFileError) as caught:
        parse_import(bad, file_format="jsonl")
    assert (caught.value.line, caught.value.field) == (5, "responses[1]")

    upload = io.BytesIO(bad)
    upload.name = "prompts.jsonl"
    researcher_client.post(f"/projects/{project.pk}/import/", {"file": upload, "file_format": "auto"})
    import_job_execute(job_id=ImportJob.objects.get().pk)  # what the worker runs (test_import_jobs.py)
    response = researcher_client.get(f"/projects/{project.pk}/")
    assert "line 5, field &#x27;responses[1]&#x27;" in response.content.decode()
    assert Prompt.objects.count() == 0 and Response.objects.count() == 0


@pytest.mark.parametrize(
    ("row", "line_field"),
    [
        ({"responses": ["a", "b"]}, "prompt"),
        ({"prompt": "q", "chosen": "a"}, "rejected"),
        ({"prompt": "q", "metadata": [1]}, "metadata"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ],
)
def test_bad_rows_name_their_field(row, line_field):
    with pytest.raises(ImportFileError, match=re.escape(f"line 2, field '{line_field}'")):
        parse_import(_jsonl({"prompt": "fine"}, row), file_format="jsonl")


@pytest.mark.parametrize(
    ("row", "field_name"),
    [
        ({"prompt": "2+2?\x00"}, "prompt"),
        ({"prompt": "q", "responses": ["a", "b\x00"]}, "responses[1]"),
        ({"prompt": "q", "metadata": {"note": "\x00"}}, "metadata.note"),
    ],
)
def test_a_nul_character_is_refused_naming_its_field(row, field_name):
    # Postgres text and jsonb cannot store it: refused before anything is written
    with pytest.raises(ImportFileError, match=re.escape(f"line 2, field '{field_name}': contains a NUL character")):
        parse_import(_jsonl({"prompt": "fine"}, row), file_format="jsonl")
    with pytest.raises(ImportFileError, match=re.escape("line 3, field 'prompt': contains a NUL character")):
        parse_import(b"prompt,answer\nfine,1\nbad\x00,2\n", file_format="csv")


def test_sampled_responses_with_a_nul_character_are_stored_with_a_replacement_character(project):
    services.prompts_import(project=project, records=parse_import(_jsonl({"id": "q", "prompt": "Say hi"}), file_format="jsonl"))
    prompt = Prompt.objects.get(external_id="q")
    created = services.responses_add(prompt_id=prompt.pk, texts=["hi\x00", "hello"], source="model", source_detail={})
    assert [response.text for response in created] == ["hi\ufffd", "hello"]
    assert list(prompt.responses.order_by("pk").values_list("text", flat=True)) == ["hi\ufffd", "hello"]


def test_invalid_json_names_the_line():
    with pytest.raises(ImportFileError, match="line 2, field 'json'"):
        parse_import(b'{"prompt": "a"}\n{"prompt": ', file_format="jsonl")


def test_csv_with_numbered_response_columns_and_a_bad_json_cell(project):
    text = "id,prompt,response_1,response_2,answer\nq1,What is 3*3?,9,6,9\nq2,Hi?,Hello,Hey,\n"
    records = parse_import(text.encode(), file_format="csv")
    assert [r.responses for r in records] == [("9", "6"), ("Hello", "Hey")]
    with pytest.raises(ImportFileError, match="line 3, field 'responses'"):
        parse_import(b'prompt,responses\nA,"[""x"",""y""]"\nB,[oops\n', file_format="csv")


def test_the_command_imports_with_a_progress_bar_and_refuses_a_bad_file(project, tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_bytes(MIXED)
    out, err = io.StringIO(), io.StringIO()
    call_command("import_prompts", str(good), "--project", "Import", stdout=out, stderr=err)
    assert "4 prompts imported" in out.getvalue()
    assert "4/4" in err.getvalue()
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt,chosen,rejected\nq,a,a\n")
    with pytest.raises(CommandError, match="line 2, field 'rejected'"):
        call_command("import_prompts", str(bad), "--project", str(project.pk), stdout=out, stderr=err)


@pytest.mark.parametrize(
    ("text", "file_format", "message"),
    [
        ('{"prompt": "a"}\n{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "jsonl",
         "line 2, field 'json': JSON nested too deeply"),
        ('{"prompt": "ok"}\n{"prompt": "x", "responses": ["a", "\\ud800"]}\n', "jsonl",
         "line 2, field 'responses[1]': contains a lone UTF-16 surrogate"),
        ("id,prompt\n1,ok\n2," + "x" * (16 * 2**20 + 1) + "\n", "csv", "line 3, field 'row': not readable as CSV"),
    ],
    ids=["nested JSON", "lone surrogate", "CSV cell over 16 MiB"],
)
def test_unreadable_or_unstorable_rows_are_refused_naming_line_and_field(text, file_format, message):
    with pytest.raises(ImportFileError, match=re.escape(message)):
        parse_import(text.encode(), file_format=file_format)


def test_a_csv_cell_longer_than_pythons_default_limit_is_imported(project):
    long_prompt = "x" * 140_000  # csv's default limit is 131,072 characters
    records = parse_import(f"prompt\n{long_prompt}\n".encode(), file_format="csv")
    services.prompts_import(project=project, records=records)
    assert Prompt.objects.get().text == long_prompt
