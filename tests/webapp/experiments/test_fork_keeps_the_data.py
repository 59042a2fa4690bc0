"""A fork starts from every field of its parent, the data source included: a project's pairs or prompts with their
project, the built-in task with its level and size, an uploaded file kept from the parent (issue 29). Launched with
only the learning rate changed, it trains on the parent's data."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.webapp.experiments.helpers import as_the_browser_posts, small_config
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportRecord
from webapp.experiments import services
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db

PAIRS_JSONL = b"".join(b'{"prompt": "q%d", "chosen": "good", "rejected": "bad"}\n' % index for index in range(4))


@pytest.fixture(autouse=True)
def no_queue(monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")


def _pairs_project(owner):
    project = annotation_services.project_create(name="Pairs", owner=owner)
    annotation_services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"p{index}", text=f"Question {index}?", chosen="good", rejected="bad")
        for index in range(4)
    ])
    return project


def _prompts_project(owner):
    project = annotation_services.project_create(name="Prompts", owner=owner)
    annotation_services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"q{index}", text=f"{index} + 1 =", reference_answer=str(index + 1))
        for index in range(4)
    ])
    return project


def _fork_with_a_new_lr(client, parent: Run, lr: str = "0.0005") -> tuple[Run, dict]:
    shown = client.get(f"/runs/new?fork={parent.pk}")
    assert shown.status_code == 200
    form = shown.context["form"]
    response = client.post(f"/runs/new?fork={parent.pk}", {**as_the_browser_posts(form), "lr": lr})
    assert response.status_code == 302, response.context["form"].errors
    return Run.objects.exclude(pk=parent.pk).get(), form.initial


def test_a_fork_of_a_run_on_project_pairs_trains_on_the_same_pairs(researcher_client, researcher, tiny_model):
    project = _pairs_project(researcher)
    parent = services.run_create(kind="reward_model", config=small_config(tiny_model),
                                 data_source={"type": "project_pairs", "project_id": project.pk},
                                 created_by=researcher, name="on pairs")
    page = researcher_client.get(f"/runs/new?fork={parent.pk}").content.decode()
    assert '<option value="project_pairs" selected>' in page
    assert f'<option value="{project.pk}" selected>' in page
    fork, initial = _fork_with_a_new_lr(researcher_client, parent)
    assert (initial["data_source"], initial["project"]) == ("project_pairs", project.pk)
    # a parent launched without an aggregation trained on every pair: its fork says so by name
    assert parent.data_source == {"type": "project_pairs", "project_id": project.pk}
    assert fork.data_source == {**parent.data_source, "aggregation": "all"}
    assert fork.parent_id == parent.pk and fork.config["lr"] == 0.0005 and fork.name == "on pairs (fork)"


def test_a_fork_of_a_grpo_run_on_project_prompts_keeps_the_prompts_and_rewards(researcher_client, researcher,
                                                                                tiny_model):
    project = _prompts_project(researcher)
    parent = services.run_create(
        kind="grpo", config={"model": tiny_model.path, "batch_size": 2, "group_size": 2, "max_length": 64,
                             "max_new_tokens": 16, "max_steps": 2, "rewards": {"answer_match": 1.0, "format_tags": 0.5}},
        data_source={"type": "project_prompts", "project_id": project.pk}, created_by=researcher, name="on prompts")
    fork, _ = _fork_with_a_new_lr(researcher_client, parent)
    assert fork.data_source == {"type": "project_prompts", "project_id": project.pk}
    assert fork.config["rewards"] == {"answer_match": 1.0, "format_tags": 0.5}


def test_a_fork_of_an_arithmetic_run_keeps_its_level_and_size(researcher_client, researcher, tiny_model):
    parent = services.run_create(kind="sft", config=small_config(tiny_model),
                                 data_source={"type": "arithmetic", "level": 2, "size": 40}, created_by=researcher)
    fork, _ = _fork_with_a_new_lr(researcher_client, parent)
    assert fork.data_source == {"type": "arithmetic", "level": 2, "size": 40}


def test_a_fork_of_a_run_on_an_upload_trains_on_the_kept_file_unless_another_is_chosen(
    researcher_client, researcher, tiny_model
):
    parent = services.run_create_from_upload(file=SimpleUploadedFile("pairs.jsonl", PAIRS_JSONL),
                                             kind="reward_model", config=small_config(tiny_model),
                                             created_by=researcher, name="on a file")
    page = researcher_client.get(f"/runs/new?fork={parent.pk}").content.decode()
    assert '<option value="upload" selected>' in page and "Kept from the parent run: pairs.jsonl, 4 rows." in page
    fork, _ = _fork_with_a_new_lr(researcher_client, parent)
    assert fork.data_source == parent.data_source and fork.data_source["rows"] == 4

    form = researcher_client.get(f"/runs/new?fork={parent.pk}").context["form"]
    other = b'{"prompt": "x", "chosen": "y", "rejected": "z"}\n' * 5
    response = researcher_client.post(f"/runs/new?fork={parent.pk}", {
        **as_the_browser_posts(form), "upload": SimpleUploadedFile("other.jsonl", other)})
    assert response.status_code == 302
    newest = Run.objects.order_by("-pk").first()
    assert (newest.data_source["name"], newest.data_source["rows"]) == ("other.jsonl", 5)
    assert newest.data_source["path"] != parent.data_source["path"]


def test_a_kept_file_is_refused_for_a_kind_that_needs_other_rows(researcher_client, researcher, tiny_model):
    parent = services.run_create_from_upload(file=SimpleUploadedFile("pairs.jsonl", PAIRS_JSONL),
                                             kind="reward_model", config=small_config(tiny_model),
                                             created_by=researcher)
    form = researcher_client.get(f"/runs/new?fork={parent.pk}&kind=sft").context["form"]
    response = researcher_client.post(f"/runs/new?fork={parent.pk}&kind=sft",
                                      {**as_the_browser_posts(form), "model": tiny_model.path})
    assert response.status_code == 422
    (message,) = response.context["form"].errors["upload"]
    assert message.startswith(f"run #{parent.pk}'s file pairs.jsonl holds reward_model rows; a sft run needs")
    assert Run.objects.count() == 1


def test_a_fork_keeps_its_parents_aggregation_of_disputed_pairs(researcher_client, researcher, tiny_model):
    project = _pairs_project(researcher)
    source = {"type": "project_pairs", "project_id": project.pk, "aggregation": "majority"}
    parent = services.run_create(kind="dpo", config=small_config(tiny_model), data_source=source,
                                 created_by=researcher, name="by majority")
    fork, initial = _fork_with_a_new_lr(researcher_client, parent)
    assert initial["aggregation"] == "majority"
    assert fork.data_source == parent.data_source == source
