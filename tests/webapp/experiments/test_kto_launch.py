"""A KTO run is launched from the launch form like any kind (the form is built from KINDS): on an uploaded unpaired
JSONL file (TRL's format) or on the arithmetic task's thumbs; a file without true / false labels is refused naming
its line and field."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.webapp.experiments.helpers import as_the_browser_posts
from trainer.builtin_datasets import arithmetic
from trainer.sink import MemorySink
from webapp.experiments.data_sources import training_rows
from webapp.experiments.models import Run
from workers.training import run_train

pytestmark = pytest.mark.django_db

USER = {"role": "user", "content": "Calculate 2 + 2"}
THUMBS = [
    {"prompt": "Calculate 2 + 2\n", "completion": "<answer>4</answer>", "label": True},
    {"prompt": "Calculate 2 + 3\n", "completion": "<answer>6</answer>", "label": False},
    {"prompt": [USER], "completion": [{"role": "assistant", "content": "4"}], "label": True},
]


@pytest.fixture(autouse=True)
def no_queue(monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")


def _jsonl(rows, name="thumbs.jsonl"):
    return SimpleUploadedFile(name, "\n".join(json.dumps(row) for row in rows).encode())


def _shown_form(client):
    shown = client.get("/runs/new?kind=kto")
    assert shown.status_code == 200
    page = shown.content.decode()
    assert 'name="desirable_weight"' in page and 'name="undesirable_weight"' in page
    assert "precompute_ref_logps" not in page  # KTO's reference stays for the whole run
    return {**as_the_browser_posts(shown.context["form"]), "max_steps": "3", "batch_size": "2"}


def test_a_kto_run_is_launched_on_an_uploaded_unpaired_file(researcher_client, tiny_model):
    posted = {**_shown_form(researcher_client), "model": tiny_model.path, "data_source": "upload",
              "upload": _jsonl(THUMBS)}
    response = researcher_client.post("/runs/new?kind=kto", posted)
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get()
    assert run.kind == "kto" and run.get_kind_display() == "KTO"
    assert (run.config["beta"], run.config["desirable_weight"], run.config["undesirable_weight"]) == (0.1, 1.0, 1.0)
    assert run.data_source["type"] == "upload" and run.data_source["rows"] == 3
    rows, _ = training_rows(run.kind, run.data_source)
    assert [row["label"] for row in rows] == [True, False, True]


def test_a_kto_run_is_launched_on_the_arithmetic_task(researcher_client, tiny_model):
    posted = {**_shown_form(researcher_client), "model": tiny_model.path, "data_source": "arithmetic", "level": "1",
              "size": "8",
              "max_length": "64", "max_prompt_length": "24", "eval_max_new_tokens": "8"}
    response = researcher_client.post("/runs/new?kind=kto", posted)
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get()
    assert run.data_source == {"type": "arithmetic", "level": 1, "size": 8}
    rows, held_out = training_rows(run.kind, run.data_source)
    assert rows == arithmetic.thumbs_rows(1, "train", 8)
    assert [row["label"] for row in rows] == [True, False] * 8
    assert held_out and all("answer" in row for row in held_out)
    # what the gpu worker does with the run: its kind's train function on its rows
    sink = MemorySink()
    result = run_train(run, sink)
    assert result.step == 3 and "kl" in sink.metrics[3] and "eval/accuracy" in sink.metrics[3]


@pytest.mark.parametrize(("bad_row", "message"), [
    ({"prompt": "Calculate 1 + 1\n", "completion": "2", "label": "yes"},
     "thumbs.jsonl, line 2: field &#x27;label&#x27; must be true (desirable, a thumbs up) or false (undesirable), "
     "got &#x27;yes&#x27;"),
    ({"prompt": "Calculate 1 + 1\n", "completion": "2"}, "thumbs.jsonl, line 2: missing field &#x27;label&#x27;"),
    ({"prompt": "Calculate 1 + 1\n", "chosen": "2", "rejected": "3"},
     "thumbs.jsonl, line 2: missing text field &#x27;completion&#x27;"),
])
def test_a_file_whose_rows_are_not_thumbs_is_refused_naming_line_and_field(researcher_client, tiny_model, bad_row,
                                                                           message):
    posted = {**_shown_form(researcher_client), "model": tiny_model.path, "data_source": "upload",
              "upload": _jsonl([THUMBS[0], bad_row])}
    response = researcher_client.post("/runs/new?kind=kto", posted)
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not Run.objects.exists()


def test_a_kto_run_on_a_thumbs_project_trains_on_its_thumbs(researcher_client, researcher, tiny_model):
    from tests.webapp.annotation.feedback_fixtures import make_thumbs_project
    from webapp.annotation.selectors import unpaired_for_training

    project = make_thumbs_project(owner=researcher)
    posted = {**_shown_form(researcher_client), "model": tiny_model.path, "data_source": "project_pairs",
              "project": str(project.pk), "aggregation": "majority"}
    response = researcher_client.post("/runs/new?kind=kto", posted)
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get()
    assert run.data_source["project_id"] == project.pk and run.data_rows == 3
    rows, _ = training_rows(run.kind, run.data_source)
    assert rows == unpaired_for_training(project_id=project.pk, aggregation="majority")
    assert [row["label"] for row in rows] == [True, False, False]
    sink = MemorySink()
    result = run_train(run, sink)
    assert result.step == 3 and "kl" in sink.metrics[3]
