"""Hugging Face datasets in and out, offline: Parquet files and zipped `datasets` directories in TRL's formats
(preference, conversational, unpaired) and Argilla's exported column schema. Round trips (export -> import into a
new project -> export again) give the same rows; bad files are refused naming the row and the field, with nothing
written."""

import csv
import io
import json
import shutil
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.urls import reverse

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import selectors, services
from webapp.annotation.exporting import (
    DatasetCard,
    csv_lines,
    dataset_zip,
    jsonl_lines,
    unpaired_rows_features,
    write_parquet,
)
from webapp.annotation.importing import ImportFileError, iter_import, parse_import
from webapp.annotation.models import (
    ImportJob,
    PreferencePair,
    Project,
    Prompt,
    Response,
    ResponseLabel,
    Suggestion,
)
from webapp.annotation.selectors import responses_shown
from workers.importing import import_job_execute

pytestmark = pytest.mark.django_db

PAIR_COLUMNS = ("prompt", "chosen", "rejected", "weight", "margin")
ASK = {"role": "system", "content": "Answer briefly."}


def _body(response) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return response.content


def _export(client, project: Project, kind: str) -> bytes:
    response = client.get(reverse("annotation:project_export", args=[project.pk, kind]))
    assert response.status_code == 200, response
    return _body(response)


def _rows(kind: str, data: bytes, tmp_path: Path) -> list[dict]:
    """An exported file's rows as Python values."""
    if kind.endswith(".jsonl"):
        return [json.loads(line) for line in data.decode().splitlines()]
    if kind.endswith(".csv"):
        return list(csv.DictReader(io.StringIO(data.decode())))
    if kind.endswith(".parquet"):
        return pq.read_table(io.BytesIO(data)).to_pylist()
    from datasets import load_from_disk

    target = tmp_path / f"unzipped-{len(list(tmp_path.iterdir()))}"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(target)
    (directory,) = target.iterdir()
    return load_from_disk(str(directory)).to_list()


def _import(project: Project, data: bytes, file_format: str) -> services.ImportSummary:
    return services.prompts_import(project=project, records=iter_import(io.BytesIO(data), file_format=file_format))


def _fresh(name: str, researcher) -> Project:
    return services.project_create(name=name, responses_per_item=3, owner=researcher,
                                   guidelines="Prefer the **correct** answer.")


def _ranked(researcher, *, conversational: bool = False) -> Project:
    """Two items of three responses, each ranked (no ties) by one annotator; with chat prompts when
    `conversational`."""
    (annotator,) = make_annotators(1)
    project = make_project(items=2, texts=[["4", "5", "22"], ["Rome", "Milan", "Turin"]], members=[annotator],
                           owner=researcher, name="Ranked", guidelines="Prefer **correct** answers.")
    if conversational:
        for prompt in Prompt.objects.filter(project=project):
            prompt.messages = [ASK, {"role": "user", "content": prompt.text}]
            prompt.save()
    for _ in range(2):
        lease = services.assignment_lease_next(project=project, annotator=annotator)
        by_text = {r.text: r.pk for r in responses_shown(prompt=lease.prompt, annotator=annotator)}
        order = sorted(by_text, key=lambda text: ["4", "Rome", "5", "Milan", "22", "Turin"].index(text))
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[by_text[t]] for t in order])
    return project


def _pairs(rows: list[dict]) -> list[tuple]:
    return [tuple(json.dumps(row[column]) if isinstance(row[column], list) else row[column]
                  for column in PAIR_COLUMNS) for row in rows]


# Pairs: JSONL, CSV, Parquet, datasets zip; standard and conversational ------------------------------------------


@pytest.mark.parametrize("conversational", [False, True], ids=["standard", "conversational"])
@pytest.mark.parametrize("kind,file_format", [("pairs.jsonl", "jsonl"), ("pairs.csv", "csv"),
                                              ("pairs.parquet", "parquet"), ("dataset.zip", "dataset")])
def test_pairs_round_trip(researcher_client, researcher, tmp_path, kind, file_format, conversational):
    project = _ranked(researcher, conversational=conversational)
    first = _export(researcher_client, project, kind)
    copy = _fresh("Copy", researcher)
    summary = _import(copy, first, file_format)
    assert (summary.created, summary.pairs) == (6, 6)
    assert not Prompt.objects.filter(project=copy, annotatable=True).exists()  # the preference exists already
    second = _export(researcher_client, copy, kind)
    before, after = _rows(kind, first, tmp_path), _rows(kind, second, tmp_path)
    assert len(before) == 6 and _pairs(after) == _pairs(before)
    if conversational and kind != "pairs.csv":
        assert before[0]["prompt"][0] == ASK and before[0]["chosen"] == [{"role": "assistant", "content": "4"}]
    assert sorted(float(row["margin"]) for row in after) == [1.0, 1.0, 1.0, 1.0, 2.0, 2.0]  # first vs last: 2 tiers
    # importing the same file again adds nothing
    assert _import(copy, first, file_format).created == 0


def test_a_parquet_export_is_typed_and_loads_as_a_dataset(researcher_client, researcher, tmp_path):
    from datasets import load_dataset

    from webapp.annotation.exporting import pair_features

    project = _ranked(researcher)
    path = tmp_path / "pairs.parquet"
    path.write_bytes(_export(researcher_client, project, "pairs.parquet"))
    dataset = load_dataset("parquet", data_files=str(path), split="train")
    assert dataset.features == pair_features() and len(dataset) == 6


def test_every_datasets_zip_carries_a_card_and_the_guidelines(researcher_client, researcher, tmp_path):
    import yaml

    project = _ranked(researcher)
    with zipfile.ZipFile(io.BytesIO(_export(researcher_client, project, "dataset.zip"))) as archive:
        names = archive.namelist()
        card = archive.read(next(name for name in names if name.endswith("/README.md"))).decode()
        guidelines = archive.read(next(name for name in names if name.endswith("/GUIDELINES.md"))).decode()
    assert guidelines == project.guidelines
    header = yaml.safe_load(card.split("---\n")[1])
    assert header["preflab"] == {"project": "Ranked", "mode": project.mode, "kind": "pairs", "rows": 6,
                                 "strategy": "all", "aggregation": "all"}
    assert [column["name"] for column in header["dataset_info"]["features"]][:3] == ["prompt", "chosen", "rejected"]
    assert header["dataset_info"]["splits"] == [{"name": "train", "num_examples": 6}]
    assert "Prefer **correct** answers." in card and "## How the rows were made" in card


# Unpaired (TRL's KTO format) -------------------------------------------------------------------------------------

UNPAIRED = [
    {"prompt": "2+2?", "completion": "4", "label": True, "annotator": "ann0"},
    {"prompt": "Capital of Italy?", "completion": "Milan", "label": False, "annotator": "ann0"},
    {"prompt": "2+2?", "completion": "5", "label": False, "annotator": "ann0"},
    {"prompt": "2+2?", "completion": "4", "label": False, "annotator": "ann1"},
]


def _unpaired_file(rows: list[dict], file_format: str, tmp_path: Path, *, conversational: bool = False) -> bytes:
    if file_format == "jsonl":
        return "".join(jsonl_lines(rows)).encode()
    if file_format == "csv":
        return "".join(csv_lines(rows, columns=("prompt", "completion", "label", "annotator"))).encode()
    rows, features = unpaired_rows_features(iter(rows), conversational=conversational)
    if file_format == "parquet":
        write_parquet(rows, tmp_path / "unpaired.parquet", features=features)
        return (tmp_path / "unpaired.parquet").read_bytes()
    card = DatasetCard(project="p", mode="thumbs", kind="unpaired", made="by hand", guidelines="Be kind.")
    return dataset_zip(rows, name="unpaired", features=features, card=card).read_bytes()


def _labels_as_rows(project: Project) -> list[dict]:
    """The imported thumbs as unpaired rows, to compare with the file's."""
    return [{"prompt": label.prompt.messages or label.prompt.text,
             "completion": label.response.text, "label": label.value == 1.0, "annotator": label.external_annotator}
            for label in ResponseLabel.objects.filter(project=project).select_related("prompt", "response")
            .order_by("id")]


@pytest.mark.parametrize("file_format", ["jsonl", "csv", "parquet", "dataset"])
def test_unpaired_rows_import_as_thumbs_sharing_one_item_per_prompt(researcher, tmp_path, file_format):
    project = _fresh("Thumbs", researcher)
    summary = _import(project, _unpaired_file(UNPAIRED, file_format, tmp_path), file_format)
    assert (summary.created, summary.responses, summary.labels) == (2, 3, 4)
    two = Prompt.objects.get(project=project, text="2+2?")
    assert [r.text for r in two.responses.order_by("id")] == ["4", "5"] and two.response_count == 2
    assert not two.annotatable
    label = ResponseLabel.objects.filter(project=project).first()
    assert (label.ranking, label.annotator, label.aspect, label.value) == (None, None, ResponseLabel.THUMB, 1.0)
    assert _labels_as_rows(project) == [UNPAIRED[0], UNPAIRED[2], UNPAIRED[3], UNPAIRED[1]]  # by item
    assert _import(project, _unpaired_file(UNPAIRED, file_format, tmp_path), file_format).labels == 0


def test_conversational_unpaired_rows_and_a_prompt_far_apart_in_the_file(researcher, tmp_path, settings):
    from webapp.annotation.services import imports

    settings_chunk = imports.IMPORT_CHUNK
    imports.IMPORT_CHUNK = 2  # rows of one prompt land in different batches of the write
    try:
        rows = [{"prompt": [ASK, {"role": "user", "content": "Hi"}], "completion": [{"role": "assistant",
                                                                                     "content": f"Hello {n}"}],
                 "label": n % 2 == 0} for n in range(5)]
        project = _fresh("Chat thumbs", researcher)
        summary = _import(project, _unpaired_file(rows, "parquet", tmp_path, conversational=True), "parquet")
    finally:
        imports.IMPORT_CHUNK = settings_chunk
    assert (summary.created, summary.responses, summary.labels) == (1, 5, 5)
    prompt = Prompt.objects.get(project=project)
    assert prompt.messages == [ASK, {"role": "user", "content": "Hi"}] and prompt.response_count == 5
    assert list(ResponseLabel.objects.order_by("id").values_list("value", flat=True)) == [1.0, 0.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize("kind,file_format", [("unpaired.jsonl", "jsonl"), ("unpaired.csv", "csv"),
                                              ("unpaired.parquet", "parquet"), ("unpaired-dataset.zip", "dataset")])
def test_unpaired_round_trip(researcher_client, researcher, tmp_path, kind, file_format):
    project = _fresh("Thumbs", researcher)
    _import(project, _unpaired_file(UNPAIRED, "jsonl", tmp_path), "jsonl")
    first = _export(researcher_client, project, kind)
    copy = _fresh("Copy", researcher)
    _import(copy, first, file_format)
    second = _export(researcher_client, copy, kind)
    before, after = _rows(kind, first, tmp_path), _rows(kind, second, tmp_path)

    def core(rows: list[dict]) -> list[str]:
        return sorted(json.dumps([row["prompt"], row["completion"], row["label"], row["annotator"]]) for row in rows)

    assert len(before) == 4 and core(after) == core(before)


# Argilla ---------------------------------------------------------------------------------------------------------


def _argilla_table() -> pa.Table:
    """Two records as Argilla 2.x's to_datasets()/to_hub write them: fields instruction, response-1, response-2; a
    ranking question `preference`, a rating `quality-1` on response 1, a label `correct_2` on response 2, a text
    question `notes`; suggestions with scores and agents; a metadata column `source`."""
    strings, ints = pa.list_(pa.string()), pa.list_(pa.int64())
    return pa.table({
        "id": ["rec-1", "rec-2"],
        "status": ["completed", "pending"],
        "_server_id": ["0b8f...", "1c9e..."],
        "instruction": ["Name a prime.", "Name a colour."],
        "response-1": ["7", "Blue"],
        "response-2": ["8", "Table"],
        "source": ["web", "book"],
        "preference.responses": pa.array([[["response-1", "response-2"], ["response-2", "response-1"]], None],
                                         pa.list_(strings)),
        "preference.responses.users": pa.array([["u-1", "u-2"], None], strings),
        "preference.responses.status": pa.array([["submitted", "draft"], None], strings),
        "quality-1.responses": pa.array([[5, 4], None], ints),
        "quality-1.responses.users": pa.array([["u-1", "u-2"], None], strings),
        "quality-1.responses.status": pa.array([["submitted", "submitted"], None], strings),
        "correct_2.responses": pa.array([["no"], None], strings),
        "correct_2.responses.users": pa.array([["u-1"], None], strings),
        "correct_2.responses.status": pa.array([["submitted"], None], strings),
        "notes.responses": pa.array([["too short"], None], strings),
        "notes.responses.users": pa.array([["u-2"], None], strings),
        "notes.responses.status": pa.array([["submitted"], None], strings),
        "preference.suggestion": pa.array([["response-1", "response-2"], ["response-1", "response-2"]], strings),
        "preference.suggestion.score": [0.7, 0.55],
        "preference.suggestion.agent": ["gpt-4o", "gpt-4o"],
        "quality-1.suggestion": pa.array([4, None], pa.int64()),
        "quality-1.suggestion.score": [0.9, None],
        "quality-1.suggestion.agent": ["judge-7b", None],
    })


def _parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def test_an_argilla_parquet_file_imports_with_its_responses_and_suggestions(researcher, researcher_client, settings,
                                                                           tmp_path):
    settings.DATA_DIR = tmp_path
    project = _fresh("From Argilla", researcher)
    upload = io.BytesIO(_parquet_bytes(_argilla_table()))
    upload.name = "argilla-records.parquet"
    researcher_client.post(reverse("annotation:project_import", args=[project.pk]), {"file": upload, "file_format": "auto"})
    job = ImportJob.objects.get()
    import_job_execute(job_id=job.pk)  # through the import job, as the page does
    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    assert job.outcome == ("Imported 2 prompts (4 responses, 1 preference pair, 3 labels, 3 suggestions) from "
                           "argilla-records.parquet; 0 were already in the project.")
    first, second = Prompt.objects.filter(project=project).order_by("id")
    assert (first.external_id, first.text, first.annotatable) == ("rec-1", "Name a prime.", False)
    assert first.metadata == {"status": "completed", "source": "web",
                              "argilla_responses": {"notes": [{"user": "u-2", "value": "too short"}]}}
    assert [r.text for r in first.responses.order_by("id")] == ["7", "8"]
    assert (second.annotatable, second.metadata) == (True, {"status": "pending", "source": "book"})
    # the draft ranking is left out: one pair, 7 over 8
    (pair,) = PreferencePair.objects.filter(project=project)
    assert (pair.chosen.text, pair.rejected.text, pair.ranking, pair.weight, pair.margin) == ("7", "8", None, 1.0, 1.0)
    labels = ResponseLabel.objects.filter(project=project).order_by("id")
    assert [(label.response.text, label.aspect, label.value, label.external_annotator, label.annotator)
            for label in labels] == [("8", "", 0.0, "u-1", None), ("7", "quality", 5.0, "u-1", None),
                                     ("7", "quality", 4.0, "u-2", None)]
    suggestions = Suggestion.objects.filter(project=project).order_by("prompt_id", "question")
    assert [(s.prompt.external_id, s.question, s.value, s.score, s.agent, s.response and s.response.text)
            for s in suggestions] == [
        ("rec-1", "preference", ["response-1", "response-2"], 0.7, "gpt-4o", None),
        ("rec-1", "quality-1", 4, 0.9, "judge-7b", "7"),
        ("rec-2", "preference", ["response-1", "response-2"], 0.55, "gpt-4o", None),
    ]


def test_argilla_round_trip_of_thumbs_ratings_pairs_and_suggestions(researcher_client, researcher, tmp_path):
    project = _fresh("Argilla source", researcher)
    _import(project, _parquet_bytes(_argilla_table()), "parquet")
    first = _export(researcher_client, project, "argilla.parquet")
    copy = _fresh("Argilla copy", researcher)
    _import(copy, first, "parquet")
    second = _export(researcher_client, copy, "argilla.parquet")
    before, after = _rows("argilla.parquet", first, tmp_path), _rows("argilla.parquet", second, tmp_path)
    assert after == before
    row = before[0]
    assert (row["id"], row["status"], row["prompt"], row["response_1"], row["response_2"]) == (
        "rec-1", "completed", "Name a prime.", "7", "8")
    assert row["ranking.responses"] == [["response_1", "response_2"]]
    assert (row["quality_1.responses"], row["quality_1.responses.users"]) == ([5, 4], ["u-1", "u-2"])
    assert (row["thumb_2.responses"], row["thumb_2.responses.users"]) == (["bad"], ["u-1"])
    assert (row["quality-1.suggestion"], row["quality-1.suggestion.score"]) == (4, 0.9)
    assert _pairs(list(selectors.pair_rows(project_id=copy.pk))) == _pairs(list(selectors.pair_rows(
        project_id=project.pk)))


def test_an_argilla_export_of_a_ranked_project_gives_back_its_pairs(researcher_client, researcher, tmp_path):
    project = _ranked(researcher)
    exported = _export(researcher_client, project, "argilla.parquet")
    (row, _) = _rows("argilla.parquet", exported, tmp_path)
    assert row["ranking.responses"] == [["response_1", "response_2", "response_3"]]
    assert row["ranking.responses.users"] == ["ann0"]
    copy = _fresh("Copy", researcher)
    _import(copy, exported, "parquet")
    assert sorted(_pairs(list(selectors.pair_rows(project_id=copy.pk)))) == sorted(_pairs(list(
        selectors.pair_rows(project_id=project.pk))))


# Bad files: refused naming the row and the field, nothing written ------------------------------------------------


def _job_of(client, project: Project, data: bytes, name: str) -> ImportJob:
    upload = io.BytesIO(data)
    upload.name = name
    client.post(reverse("annotation:project_import", args=[project.pk]), {"file": upload, "file_format": "auto"})
    job = ImportJob.objects.order_by("-pk").first()
    import_job_execute(job_id=job.pk)
    job.refresh_from_db()
    return job


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize("data,name,where,problem", [
    (_parquet_bytes(pa.table({"prompt": ["fine", "also"], "chosen": ["a", "b"], "rejected": [1, 2]})),
     "pairs.parquet", (1, "rejected"), "row 1, field 'rejected': must be a string, got int"),
    (_parquet_bytes(pa.table({"prompt": ["q", "q"], "completion": ["a", "b"], "label": [1, 0]})),
     "kto.parquet", (1, "label"), "row 1, field 'label': must be true or false, got 1"),
    (b'{"prompt": "q", "completion": "a", "label": true}\n{"prompt": "q", "completion": "b", "label": "no"}\n',
     "kto.jsonl", (2, "label"), "line 2, field 'label': must be true or false, got 'no'"),
    (_zip({"notes/readme.txt": b"hello"}), "dataset.zip", (0, "file"), "holds no datasets directory"),
    (_zip({"../evil/state.json": b"{}"}), "dataset.zip", (0, "file"), "unsafe path '../evil/state.json'"),
    (b"PAR1 not really", "broken.parquet", (0, "file"), "not readable as a Parquet file"),
])
def test_bad_files_are_refused_naming_the_row_and_field(researcher_client, researcher, data, name, where, problem,
                                                       settings, tmp_path):
    settings.DATA_DIR = tmp_path
    project = _fresh("Refusals", researcher)
    job = _job_of(researcher_client, project, data, name)
    assert job.status == "failed" and (job.error_line, job.error_field) == where
    assert problem in job.error
    assert not Prompt.objects.exists() and not ResponseLabel.objects.exists() and not Response.objects.exists()


def test_an_argilla_rating_that_names_no_response_is_refused():
    row = {"instruction": "q", "response-1": "a", "response-2": "b", "quality.responses": [3],
           "quality.responses.users": ["u"]}
    with pytest.raises(ImportFileError) as caught:
        parse_import(json.dumps(row).encode() + b"\n", file_format="jsonl")
    assert (caught.value.line, caught.value.field) == (1, "quality.responses")
    assert "end it with the response's number" in caught.value.problem


def test_the_project_page_links_every_export(researcher_client, researcher):
    project = _fresh("Links", researcher)
    page = researcher_client.get(reverse("annotation:project_detail", args=[project.pk])).content.decode()
    for kind in ("pairs.parquet", "unpaired.parquet", "unpaired-dataset.zip", "argilla.parquet", "dataset.zip"):
        assert reverse("annotation:project_export", args=[project.pk, kind]) in page
    assert "Parquet" in page and "datasets directory (zip)" in page  # the import form's formats



def test_argilla_records_saved_with_save_to_disk_import_from_a_zip(researcher, tmp_path):
    """Argilla's `to_datasets()` then `save_to_disk`, as a DatasetDict with a train split, zipped one folder deep."""
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset(_argilla_table())}).save_to_disk(str(tmp_path / "export" / "records"))
    archive = Path(shutil.make_archive(str(tmp_path / "records"), "zip", root_dir=tmp_path / "export"))
    project = _fresh("Zipped Argilla", researcher)
    summary = _import(project, archive.read_bytes(), "dataset")
    assert (summary.created, summary.responses, summary.pairs, summary.labels, summary.suggestions) == (2, 4, 1, 3, 3)


@pytest.mark.django_db(False)
def test_unpaired_writers_type_extra_columns_and_leave_nested_ones_out(tmp_path):
    from datasets import load_from_disk

    rows = [{"prompt": "q", "completion": "a", "label": True, "annotator": None, "seen": 3, "tiers": [[1]]},
            {"prompt": "q", "completion": "b", "label": False, "annotator": "ann1", "seen": 4, "tiers": [[2]]}]
    rows_out, features = unpaired_rows_features(iter(rows), conversational=False)
    assert list(features) == ["prompt", "completion", "label", "annotator", "seen"]
    write_parquet(rows_out, tmp_path / "u.parquet", features=features)
    expected = [{key: value for key, value in row.items() if key != "tiers"} for row in rows]
    assert pq.read_table(tmp_path / "u.parquet").to_pylist() == expected
    chat = [{**row, "prompt": [{"role": "user", "content": row["prompt"]}],
             "completion": [{"role": "assistant", "content": row["completion"]}]} for row in rows]
    rows_out, features = unpaired_rows_features(iter(chat), conversational=True)
    archive = dataset_zip(rows_out, name="u", features=features)
    with zipfile.ZipFile(archive) as opened:
        opened.extractall(tmp_path / "zip")
    shutil.rmtree(archive.parent)
    loaded = load_from_disk(str(tmp_path / "zip" / "u")).to_list()
    assert loaded[1]["prompt"] == [{"role": "user", "content": "q"}]
    assert loaded[1]["completion"] == [{"role": "assistant", "content": "b"}] and loaded[1]["seen"] == 4


def test_the_export_command_writes_parquet_and_argilla_records(researcher, tmp_path):
    from django.core.management import call_command

    project = _ranked(researcher)
    for file_format in ("parquet", "argilla"):
        call_command("export_preferences", "--project", project.name, "--format", file_format, "--output",
                     str(tmp_path / f"{file_format}.parquet"), stdout=io.StringIO())
    assert len(pq.read_table(tmp_path / "parquet.parquet")) == 6
    assert pq.read_table(tmp_path / "argilla.parquet").column("ranking.responses.users").to_pylist() == [
        ["ann0"], ["ann0"]]


def test_an_argilla_label_question_that_is_not_all_good_or_bad_stays_metadata():
    row = {"prompt": "q", "response": "a", "sentiment.responses": ["positive", "neutral"],
           "sentiment.responses.users": ["u1", "u2"], "ok.responses": ["yes", "no"], "ok.responses.users": ["u1", "u2"]}
    (record,) = parse_import(json.dumps(row).encode() + b"\n", file_format="jsonl")
    assert [(label.aspect, label.value, label.annotator) for label in record.labels] == [("", 1.0, "u1"),
                                                                                         ("", 0.0, "u2")]
    assert record.metadata == {"argilla_responses": {"sentiment": [{"user": "u1", "value": "positive"},
                                                                   {"user": "u2", "value": "neutral"}]}}


def test_parquet_dates_become_text_and_binary_cells_are_refused(researcher):
    import datetime

    table = pa.table({"prompt": ["q"], "responses": [["a", "b"]], "seen": [datetime.date(2026, 11, 29)]})
    (record,) = parse_import(_parquet_bytes(table), file_format="parquet")
    assert (record.responses, record.metadata) == (("a", "b"), {"seen": "2026-11-29"})
    with pytest.raises(ImportFileError, match=r"row 1, field 'image': holds binary data"):
        parse_import(_parquet_bytes(pa.table({"prompt": ["q"], "image": [b"\x89PNG"]})), file_format="parquet")
