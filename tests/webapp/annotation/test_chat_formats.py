"""Chat formats on the web side: TRL's formats in (import), conversations kept structured in storage, in the
training rows built from a project, in the TRL export, and shown as turns with roles on the annotation page."""

import csv
import io
import json

import pytest
from django.core.management import call_command

from tests.webapp.annotation.factories import make_annotators
from webapp.annotation import services
from webapp.annotation.importing import ImportFileError, parse_import
from webapp.annotation.models import PreferencePair, Prompt
from webapp.annotation.selectors import responses_shown
from webapp.experiments.data_sources import training_rows

pytestmark = pytest.mark.django_db

SYSTEM = {"role": "system", "content": "You answer in one word."}
ASK = {"role": "user", "content": "What colour is the sky?"}
CONVERSATION = [SYSTEM, ASK]


def _jsonl(*rows) -> bytes:
    return "\n".join(json.dumps(row) for row in rows).encode()


def _import(project, *rows) -> None:
    services.prompts_import(project=project, records=parse_import(_jsonl(*rows), file_format="jsonl"))


@pytest.fixture
def chat_project(researcher):
    """One conversation with two responses ranked (blue > green), and one imported conversational pair; the
    researcher's project."""
    (annotator,) = make_annotators(1)
    project = services.project_create(name="Chat", responses_per_item=2, members=[annotator], owner=researcher)
    _import(project,
            {"id": "ranked", "prompt": CONVERSATION, "responses": ["Blue.", "Green."]},
            {"id": "pair", "prompt": [{"role": "user", "content": "2+2?"}],
             "chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]})
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    by_text = {response.text: response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator)}
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                            tiers=[[by_text["Blue."]], [by_text["Green."]]])
    return project


def _assistant(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


# Import -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row,where", [
    ({"prompt": "2+2?", "completion": "5", "label": "false"}, "label"),
    ({"prompt": "2+2?", "completion": "5", "label": None}, "label"),
    ({"prompt": "2+2?", "label": False}, "completion"),
    ({"completion": "4", "label": True}, "prompt"),
])
def test_malformed_trl_unpaired_rows_are_refused_naming_the_field(row, where):
    with pytest.raises(ImportFileError) as caught:
        parse_import(_jsonl({"prompt": "fine"}, row), file_format="jsonl")
    assert (caught.value.line, caught.value.field) == (2, where)


def test_trl_unpaired_rows_import_as_a_response_with_a_thumb():
    (record,) = parse_import(_jsonl({"prompt": [ASK], "completion": _assistant("Blue."), "label": False},
                                    {"prompt": [ASK], "completion": _assistant("Red."), "label": True}),
                             file_format="jsonl")
    assert (record.messages, record.responses) == ([ASK], ("Blue.", "Red."))
    assert [(label.response, label.aspect, label.value) for label in record.labels] == [(0, "", 0.0), (1, "", 1.0)]


def test_a_label_that_is_only_a_category_stays_metadata():
    (record,) = parse_import(_jsonl({"prompt": "2+2?", "label": "arithmetic"}), file_format="jsonl")
    assert record.metadata == {"label": "arithmetic"}


def test_an_implicit_prompt_pair_imports_as_the_shared_turns_and_two_answers():
    project = services.project_create(name="Implicit", responses_per_item=2)
    _import(project, {"id": "hh", "chosen": [*CONVERSATION, *_assistant("Blue.")],
                      "rejected": [*CONVERSATION, *_assistant("Green.")]})
    pair = PreferencePair.objects.select_related("prompt", "chosen", "rejected").get()
    assert pair.prompt.messages == CONVERSATION
    assert (pair.chosen.text, pair.rejected.text) == ("Blue.", "Green.")
    assert pair.prompt.metadata == {} and not pair.prompt.annotatable


@pytest.mark.parametrize(("rejected", "field_name", "problem"), [
    ([{"role": "user", "content": "Other question"}, *_assistant("Green.")], "chosen", "share no prefix"),
    ([*CONVERSATION, *_assistant("Green."), {"role": "user", "content": "More?"}], "rejected", "got role 'user'"),
    ([*CONVERSATION, *_assistant("Green."), *_assistant("Or blue.")], "rejected", "exactly one assistant message"),
    (CONVERSATION, "chosen", "assistant messages"),
])
def test_an_implicit_prompt_pair_that_does_not_split_is_refused(rejected, field_name, problem):
    row = {"chosen": [*CONVERSATION, *_assistant("Blue.")], "rejected": rejected}
    with pytest.raises(ImportFileError, match=problem) as caught:
        parse_import(_jsonl(row), file_format="jsonl")
    assert caught.value.field == field_name


def test_a_conversational_prompt_is_stored_as_its_messages():
    project = services.project_create(name="Structured", responses_per_item=2)
    _import(project, {"id": "c", "prompt": CONVERSATION})
    prompt = Prompt.objects.get(external_id="c")
    assert prompt.messages == CONVERSATION
    assert prompt.text == "system: You answer in one word.\n\nuser: What colour is the sky?"  # for search and lists


# Training rows built from a project ---------------------------------------------------------------------------


def test_a_chat_projects_pairs_train_as_trl_conversational_rows(chat_project):
    source = {"type": "project_pairs", "project_id": chat_project.pk}
    rows, held_out = training_rows("dpo", source)
    assert held_out is None
    by_prompt = {json.dumps(row["prompt"]): row for row in rows}
    ranked = by_prompt[json.dumps(CONVERSATION)]
    assert (ranked["chosen"], ranked["rejected"]) == (_assistant("Blue."), _assistant("Green."))
    imported = by_prompt[json.dumps([{"role": "user", "content": "2+2?"}])]
    assert (imported["chosen"], imported["rejected"]) == (_assistant("4"), _assistant("5"))
    assert training_rows("reward_model", source)[0] == rows
    completions, _ = training_rows("sft", source)
    assert {"prompt": CONVERSATION, "completion": _assistant("Blue.")} in completions


def test_a_chat_projects_prompts_stay_conversations_for_online_runs(chat_project):
    rows, _ = training_rows("grpo", {"type": "project_prompts", "project_id": chat_project.pk})
    assert [row["prompt"] for row in rows] == [CONVERSATION, [{"role": "user", "content": "2+2?"}]]


def test_text_prompts_stay_text_in_training_rows():
    project = services.project_create(name="Text", responses_per_item=2)
    _import(project, {"prompt": "Capital of France?", "chosen": "Paris", "rejected": "Lyon"})
    rows, _ = training_rows("dpo", {"type": "project_pairs", "project_id": project.pk})
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in rows] == [("Capital of France?", "Paris", "Lyon")]
    prompts, _ = training_rows("grpo", {"type": "project_prompts", "project_id": project.pk})
    assert prompts[0]["prompt"] == "Capital of France?"


# Export -------------------------------------------------------------------------------------------------------


def _body(response) -> str:
    return b"".join(response.streaming_content).decode()


def test_the_jsonl_export_of_a_chat_project_is_trl_conversational(researcher_client, chat_project):
    from trl.data_utils import is_conversational

    lines = _body(researcher_client.get(f"/projects/{chat_project.pk}/export/pairs.jsonl/")).splitlines()
    rows = [json.loads(line) for line in lines]
    assert {(json.dumps(r["prompt"]), r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in rows} == {
        (json.dumps(CONVERSATION), "Blue.", "Green."), (json.dumps([{"role": "user", "content": "2+2?"}]), "4", "5")}
    for row in rows:
        assert is_conversational(row)
        assert [m["role"] for m in row["chosen"]] == ["assistant"] and [m["role"] for m in row["rejected"]] == ["assistant"]


def test_a_project_mixing_text_and_chat_exports_every_row_conversationally(researcher_client, chat_project, tmp_path):
    from datasets import load_from_disk

    _import(chat_project, {"prompt": "Capital of France?", "chosen": "Paris", "rejected": "Lyon"})
    rows = [json.loads(line) for line in
            _body(researcher_client.get(f"/projects/{chat_project.pk}/export/pairs.jsonl/")).splitlines()]
    text_row = next(row for row in rows if row["prompt"][0]["content"] == "Capital of France?")
    assert text_row["prompt"] == [{"role": "user", "content": "Capital of France?"}]
    assert (text_row["chosen"], text_row["rejected"]) == (_assistant("Paris"), _assistant("Lyon"))

    call_command("export_preferences", "--project", chat_project.name, "--format", "dataset", "--output",
                 str(tmp_path / "ds"), stdout=io.StringIO())
    dataset = load_from_disk(str(tmp_path / "ds"))
    assert len(dataset) == 3
    assert sorted(json.dumps(row["prompt"]) for row in dataset) == sorted(json.dumps(row["prompt"]) for row in rows)
    assert all(row["chosen"][0]["role"] == "assistant" for row in dataset)


def test_the_export_command_writes_conversational_jsonl(chat_project, tmp_path):
    output = tmp_path / "pairs.jsonl"
    call_command("export_preferences", "--project", chat_project.name, "--format", "jsonl", "--output", str(output),
                 stdout=io.StringIO())
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(rows) == 2 and all(isinstance(row["prompt"], list) for row in rows)


def test_a_csv_cell_holds_a_conversation_as_json_and_an_answer_as_text(researcher_client, chat_project):
    rows = list(csv.DictReader(io.StringIO(_body(researcher_client.get(f"/projects/{chat_project.pk}/export/pairs.csv/")))))
    ranked = next(row for row in rows if row["chosen"] == "Blue.")
    assert json.loads(ranked["prompt"]) == CONVERSATION and ranked["rejected"] == "Green."


def test_the_raw_rankings_export_keeps_the_conversation(researcher_client, chat_project):
    (row,) = [json.loads(line) for line in
              _body(researcher_client.get(f"/projects/{chat_project.pk}/export/rankings.jsonl/")).splitlines()]
    assert row["prompt"] == CONVERSATION


# The annotation page -------------------------------------------------------------------------------------------


def test_the_annotation_page_shows_a_conversation_as_turns_with_roles(client, chat_project):
    annotator = make_annotators(1, prefix="second")[0]
    chat_project.members.add(annotator)
    _import(chat_project, {"id": "fresh", "prompt": CONVERSATION, "responses": ["Azure.", "Grey."]})
    client.force_login(annotator)
    page = client.get(f"/annotate/{chat_project.pk}/").content.decode()
    assert '<li class="turn turn-system" data-role="system"><div class="turn-role">system</div>' in page
    assert '<li class="turn turn-user" data-role="user"><div class="turn-role">user</div>' in page
    assert "You answer in one word." in page and "What colour is the sky?" in page
    assert "system: You answer" not in page  # not the flattened text
    assert page.count('<span class="turn-role" data-role="assistant">assistant</span>') == 2


def test_a_text_prompt_is_shown_without_turns(client):
    (annotator,) = make_annotators(1)
    project = services.project_create(name="Plain", responses_per_item=2, members=[annotator])
    _import(project, {"prompt": "Say hi", "responses": ["hi", "hello"]})
    client.force_login(annotator)
    page = client.get(f"/annotate/{project.pk}/").content.decode()
    assert "Say hi" in page and 'class="turns"' not in page and "data-role" not in page


def test_the_item_page_shows_the_conversations_turns(researcher_client, chat_project):
    prompt = Prompt.objects.get(project=chat_project, external_id="ranked")
    page = researcher_client.get(f"/projects/{chat_project.pk}/items/{prompt.pk}/").content.decode()
    assert 'data-role="system"' in page and 'data-role="user"' in page and "What colour is the sky?" in page


def test_the_datasets_zip_of_a_chat_project_loads_as_trl_conversational_rows(researcher_client, chat_project, tmp_path):
    import zipfile

    from datasets import load_from_disk
    from trl.data_utils import is_conversational

    response = researcher_client.get(f"/projects/{chat_project.pk}/export/dataset.zip/")
    archive = tmp_path / "pairs.zip"
    archive.write_bytes(b"".join(response.streaming_content))
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(tmp_path / "unzipped")
    (directory,) = (tmp_path / "unzipped").iterdir()
    dataset = load_from_disk(str(directory))
    assert len(dataset) == 2 and all(is_conversational(row) for row in dataset)
    assert {row["chosen"][0]["content"] for row in dataset} == {"Blue.", "4"}
