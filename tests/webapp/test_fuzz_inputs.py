"""Fuzzing what people send (hypothesis): import files (JSONL and CSV: random bytes, random text with NULs and lone
surrogates, wrong types for every field, deep nesting, huge numbers and fields) and the form and query parameters
of issue 16 (a pairwise submit's response numbers, `fork`, the run list's filters, a model's name and path, a
rationale, and the other number parameters of the run pages).

What must hold: never a 500 (Django's test client raises the view's exception); an import either succeeds or
fails naming its line and field; a 400 names the parameter; nothing is written on a refusal."""

import csv
import io
import json
import os
from urllib.parse import quote, quote_from_bytes

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.webapp.annotation.factories import make_project
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportFileError, parse_import
from webapp.annotation.models import ImportJob, Project, Prompt, Ranking
from webapp.experiments.models import ModelRef, Run
from webapp.text_bounds import PROMPT_MAX_CHARS
from workers.importing import import_job_execute

pytestmark = pytest.mark.django_db

# PREFLAB_FUZZ_EXAMPLES=5000 searches longer. Failing examples are not kept between runs (hypothesis's own caches go
# to .hypothesis/, which git ignores).
FUZZ = settings(max_examples=int(os.environ.get("PREFLAB_FUZZ_EXAMPLES", "150")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
KNOWN_FIELDS = ["id", "external_id", "prompt", "messages", "responses", "chosen", "rejected", "answer",
                "reference_answer", "metadata", "role", "content", "text", "label", "completion"]
# Values that broke something once, or that parsers treat specially.
NASTY = ["", " ", "\x00", "a\x00b", "²", "١٢٣", "9" * 5000, "9" * 19, "-1", "0", "1.5", "nan", "inf", "1e999",
         "x" * 201, "x" * 10_001, "<script>alert(1)</script>", "../../etc/passwd", "/" + "a" * 5000, "\u2028", "\x85",
         "\ufeff", "%00", "user", "assistant", "/" + "a" * 300, "a" * 300, "org/" + "a" * 300, "models/" + "a" * 300]
nasty_text = st.one_of(st.text(max_size=60), st.sampled_from(NASTY),
                       st.text(alphabet="0123456789²١٣ -.e", min_size=1, max_size=25))
any_text = st.one_of(nasty_text, st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010)))
# json.dumps cannot write an integer of 5,000 digits (int's own limit): this stands for one, see _dumps
HUGE_INT = "HUGE-INTEGER"
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text,
                         st.just(HUGE_INT), st.just(float("nan")), st.just(float("inf")))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(KNOWN_FIELDS), any_text), inner, max_size=4)),
    max_leaves=12)
message = st.fixed_dictionaries({}, optional={"role": st.one_of(st.sampled_from(["user", "assistant", "system", "robot"]),
                                                                json_values),
                                              "content": json_values})
row_values = {
    "prompt": st.one_of(nasty_text, st.lists(message, max_size=3), json_values),
    "messages": st.one_of(st.lists(message, max_size=4), json_values),
    "responses": st.one_of(st.lists(st.one_of(nasty_text, st.lists(message, max_size=2), json_values), max_size=4),
                           json_values),
    "chosen": st.one_of(nasty_text, st.lists(message, max_size=3), json_values),
    "rejected": st.one_of(nasty_text, st.lists(message, max_size=3), json_values),
    "id": json_values, "answer": json_values, "metadata": json_values, "label": json_values,
    "completion": json_values,
}
rows = st.lists(st.one_of(
    st.fixed_dictionaries({}, optional=row_values),
    st.fixed_dictionaries({"prompt": st.text(min_size=1, max_size=20)},
                          optional={name: value for name, value in row_values.items() if name != "prompt"}),
    json_values,
), min_size=1, max_size=6)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _dumps(value: object, ensure_ascii: bool = True) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii).replace(f'"{HUGE_INT}"', "9" * 5000)


@st.composite
def jsonl_files(draw) -> bytes:
    lines = []
    for row in draw(rows):
        text = _dumps(row, ensure_ascii=draw(st.booleans()))
        # a lone surrogate in raw UTF-8 is invalid UTF-8, as a file from a broken encoder would hold it
        lines.append(text.encode("utf-8", "surrogatepass"))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), f'{{"prompt": "deep", "metadata": {_deep(draw(st.integers(60, 3000)))}}}'.encode())
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.binary(max_size=40)))
    return draw(st.sampled_from([b"\n", b"\r\n"])).join(lines)


@st.composite
def csv_files(draw) -> bytes:
    header = draw(st.lists(st.one_of(st.sampled_from([*KNOWN_FIELDS, "response_1", "response_2", "response_²",
                                                      "response_" + "9" * 5000]), nasty_text),
                           min_size=1, max_size=5))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    cell = st.one_of(nasty_text, json_values.map(_dumps), st.just(_deep(3000)))
    for _ in range(draw(st.integers(0, 4))):
        writer.writerow(draw(st.lists(cell, min_size=0, max_size=len(header) + 1)))
    return out.getvalue().encode("utf-8", "surrogatepass")


files = st.one_of(
    st.tuples(st.just("jsonl"), jsonl_files()),
    st.tuples(st.just("csv"), csv_files()),
    st.tuples(st.sampled_from(["jsonl", "csv"]), st.binary(max_size=300)),
)


def _names_line_and_field(error: ImportFileError) -> bool:
    return bool(error.field) and str(error).startswith(f"line {error.line}, field '{error.field}': ")


@FUZZ
@given(file=files)
def test_parsing_any_file_gives_records_or_a_refusal_naming_line_and_field(file):
    file_format, data = file
    try:
        parse_import(data, file_format=file_format)
    except ImportFileError as error:
        assert _names_line_and_field(error), str(error)


@pytest.fixture
def import_project(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return annotation_services.project_create(name="Fuzzed imports", responses_per_item=2)


@FUZZ
@given(file=files)
def test_an_import_job_on_any_file_succeeds_or_fails_naming_line_and_field_and_writes_nothing(
    file, import_project, researcher
):
    file_format, data = file
    with transaction.atomic():
        job = annotation_services.import_job_create(
            project=import_project, upload=SimpleUploadedFile(f"fuzz.{file_format}", data), file_format=file_format,
            created_by=researcher)
        import_job_execute(job_id=job.pk)
        job.refresh_from_db()
        if job.status == ImportJob.Status.FAILED:
            assert job.error_line is not None and job.error_field, f"not a refusal of the file: {job.error}"
            assert job.error.startswith(f"line {job.error_line}, field '{job.error_field}': "), job.error
            assert not Prompt.objects.filter(project=import_project).exists()
        else:
            assert job.status == ImportJob.Status.SUCCEEDED
            assert Prompt.objects.filter(project=import_project).count() == job.created_count
        transaction.set_rollback(True)


# Forms and query parameters ---------------------------------------------------------------------------------


@pytest.fixture
def pairwise(annotator):
    return make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.PAIRWISE)


optional_text = st.one_of(st.none(), nasty_text)
# stands for the id of the item's first or second response, so that the other fields reach the database too
SHOWN = ("first shown", "second shown")
# (one_of draws each of its strategies about as often: the useful values get a strategy of their own)
response_number = st.one_of(st.sampled_from(SHOWN), st.none(), nasty_text)
choices = st.one_of(st.sampled_from(["a", "b", "tie", "both_bad"]), st.none(), nasty_text)
rationales = st.one_of(st.none(), nasty_text, st.text(max_size=20).map(lambda text: text + "\x00"))


@FUZZ
@given(response_a=response_number, response_b=response_number, choice=choices, rationale=rationales,
       seconds=optional_text)
@example(response_a=SHOWN[0], response_b=SHOWN[1], choice="a", rationale="pasted \x00 binary", seconds=None)
def test_a_pairwise_submit_with_any_fields_is_taken_or_refused_naming_the_field(
    annotator_client, annotator, pairwise, response_a, response_b, choice, rationale, seconds
):
    with transaction.atomic():
        assignment = annotation_services.assignment_lease_next(project=pairwise, annotator=annotator)
        shown = list(assignment.prompt.responses.order_by("pk").values_list("pk", flat=True))
        ids = {SHOWN[0]: str(shown[0]), SHOWN[1]: str(shown[1])}
        response_a, response_b = ids.get(response_a, response_a), ids.get(response_b, response_b)
        fields = {name: value for name, value in (("response_a", response_a), ("response_b", response_b),
                                                  ("choice", choice), ("rationale", rationale), ("seconds", seconds))
                  if value is not None}
        page = annotator_client.post(reverse("annotation:annotate_submit", args=[assignment.pk]), fields,
                                     HTTP_HX_REQUEST="true")
        assert page.status_code == 200
        if not Ranking.objects.exists():
            text = page.content.decode()
            assert any(name in text for name in ("response_a", "response_b", "choose A, B", "rationale",
                                                 "names responses not shown", "rank every response")), text[:500]
        elif choice == "both_bad":  # every shown response, whatever numbers came with it
            assert Ranking.objects.get().tiers == [shown]
        else:
            assert sorted((int(response_a), int(response_b))) == shown
        transaction.set_rollback(True)


@pytest.fixture
def run(researcher):
    return Run.objects.create(name="fuzzed", kind="sft", config={},
                              data_source={"type": "arithmetic", "level": 1, "size": 8}, created_by=researcher)


def _query(**values: str | bytes) -> str:
    return "&".join(f"{name}={quote_from_bytes(value) if isinstance(value, bytes) else quote(value)}"
                    for name, value in values.items())


query_value = st.one_of(nasty_text, st.binary(max_size=20))


@FUZZ
@given(path=st.sampled_from(["/runs/new?fork", "/runs/?status", "/runs/?query", "/runs/?kind", "/runs/rows?query",
                             "/runs/compare?runs", "/runs/{run}/samples?step", "/runs/{run}/metrics?after",
                             "/runs/{run}/metrics?x_min", "/runs/{run}/metrics?metric", "/runs/{run}/?resume",
                             "/runs/new?kind=grpo&preset", "/models/?q"]),
       value=query_value)
def test_a_query_parameter_with_any_value_never_fails_and_a_400_names_it(researcher_client, run, path, value):
    address, name = path.format(run=run.pk).split("?")
    prefix, _, name = name.rpartition("&")
    response = researcher_client.get(f"{address}?{prefix + '&' if prefix else ''}{_query(**{name: value})}")
    assert response.status_code in (200, 400, 404), response.status_code
    if response.status_code == 400:
        assert name in response.content.decode()


@FUZZ
@given(path=st.one_of(nasty_text, st.just("")), name=st.one_of(nasty_text, st.just("")))
def test_registering_a_model_under_any_name_and_path_is_refused_naming_the_field(researcher_client, path, name):
    with transaction.atomic():
        response = researcher_client.post(reverse("experiments:models"), {"path": path, "name": name})
        if response.status_code != 302:
            assert response.status_code == 200
            assert not ModelRef.objects.exists()
            text = response.content.decode()
            assert "the path" in text or "the name" in text or "path" in text, text[:300]
        transaction.set_rollback(True)


@FUZZ
@given(checkpoint=nasty_text)
def test_resuming_from_any_checkpoint_value_is_refused_without_a_500(researcher_client, run, checkpoint):
    response = researcher_client.post(reverse("experiments:run_resume", args=[run.pk]), {"checkpoint": checkpoint})
    assert response.status_code == 302


# What the fuzzing found, and the huge cases it cannot afford, as a table -------------------------------------


@pytest.mark.parametrize(
    ("data", "file_format", "message"),
    [
        (b'{"prompt": "' + b"x" * (64 * 2**20) + b'"}\n', "jsonl",
         "line 1, field 'file': the line is longer than 67,108,864 bytes"),
        (b'{"prompt": "ok"}\n{"prompt": "a", "metadata": {"m": ' + _deep(70).encode() + b"}}\n", "jsonl",
         "line 2, field 'metadata.m[0][0][0]"),
        (b'{"prompt": "a", "score": NaN}\n', "jsonl", "line 1, field 'score': is nan, which JSON cannot hold"),
        (b'{"prompt": "a", "metadata": {"n": 1e999}}\n', "jsonl", "line 1, field 'metadata.n': is inf"),
        (b'{"prompt": "a", "n": ' + b"9" * 5000 + b"}\n", "jsonl", "line 1, field 'json': not readable as JSON"),
        (b'{"messages": [{"role": ["user"], "content": "hi"}]}\n', "jsonl",
         "line 1, field 'messages[0].role': unknown role ['user']"),
        (('{"prompt": "a", "' + "k" * 300 + '": "\\u0000"}\n').encode(), "jsonl",
         "line 1, field '" + "k" * 40 + "… (300 characters)': contains a NUL"),
        (b"prompt,response_\xc2\xb2\nq,a\n", "csv", ""),
        (b"prompt,\nq,\x00\n", "csv", "line 2, field '(a key or column with no name)': contains a NUL"),
        (b"prompt\rq1\rq2\r", "csv", "line 1, field 'row': a line ends in a bare carriage return"),
        (b"[\n" + b'{"prompt": "a"}\n' + b"]\n", "jsonl", "line 1, field 'json': this is a JSON array"),
    ],
    ids=["line over 64 MiB", "nested 70 deep", "NaN", "1e999", "5,000-digit integer", "a list as role",
         "long key with a NUL", "response_² column", "unnamed CSV column with a NUL", "bare CR line ends",
         "JSON array"],
)
def test_odd_and_huge_rows_are_refused_naming_line_and_field_or_imported(data, file_format, message):
    if not message:
        assert parse_import(data, file_format=file_format)
        return
    with pytest.raises(ImportFileError) as refused:
        parse_import(data, file_format=file_format)
    assert str(refused.value).startswith(message), str(refused.value)[:300]


def test_text_json_may_hold_raw_in_a_string_is_imported(import_project, researcher):
    # json.dumps(ensure_ascii=False) writes U+2028, U+2029 and U+0085 raw; str.splitlines took them for line ends
    text = "one\u2028two\u2029three\x85four"
    data = json.dumps({"prompt": text, "responses": ["a\u2028b", "c"]}, ensure_ascii=False).encode()
    job = annotation_services.import_job_create(project=import_project, upload=SimpleUploadedFile("raw.jsonl", data),
                                                file_format="jsonl", created_by=researcher)
    import_job_execute(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.SUCCEEDED, job.error
    assert Prompt.objects.get().text == text


def _imported_job(project, researcher, row: dict) -> ImportJob:
    data = json.dumps(row).encode()
    job = annotation_services.import_job_create(project=project, upload=SimpleUploadedFile("big.jsonl", data),
                                                file_format="jsonl", created_by=researcher)
    import_job_execute(job_id=job.pk)
    job.refresh_from_db()
    return job


def test_a_prompt_as_long_as_its_bound_is_imported_whole_and_a_longer_one_refused(import_project, researcher):
    prompt = ("word " * (PROMPT_MAX_CHARS // 5 + 1))[:PROMPT_MAX_CHARS]
    job = _imported_job(import_project, researcher, {"prompt": prompt + "s", "responses": ["a", "b"]})
    assert job.status == ImportJob.Status.FAILED and not Prompt.objects.exists()
    assert (job.error_line, job.error_field) == (1, "prompt")
    assert f"is {PROMPT_MAX_CHARS + 1:,} characters long; at most {PROMPT_MAX_CHARS:,} are allowed" in job.error

    job = _imported_job(import_project, researcher, {"prompt": prompt, "responses": ["a", "b"]})
    assert job.status == ImportJob.Status.SUCCEEDED, job.error
    assert len(Prompt.objects.get().text) == PROMPT_MAX_CHARS
