"""Every kind of text people and programs write has a bound (webapp.text_bounds, the README's "Text bounds"), checked
where it comes in and naming the field: the pages' forms (a form error), the API (422) and the import (the line and
field); text over it writes nothing, text at it is kept whole. Before, 25 MB of guidelines were accepted and every
annotate page then weighed 25 MB."""

import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from tests.webapp.annotation.factories import make_project
from webapp.accounts.services import api_token_create
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportFileError, parse_import
from webapp.annotation.models import Project, Prompt, Response
from webapp.experiments import services as experiment_services
from webapp.experiments.models import Run, Sample
from webapp.text_bounds import (
    CONFIG_TEXT_MAX_CHARS,
    EXTERNAL_CONFIG_MAX_CHARS,
    GUIDELINES_MAX_CHARS,
    NAME_MAX_CHARS,
    PROMPT_MAX_CHARS,
    RESPONSE_MAX_CHARS,
    RUN_ERROR_MAX_CHARS,
)

pytestmark = pytest.mark.django_db


def _too_long(max_chars: int) -> str:
    return f"is {max_chars + 1:,} characters long; at most {max_chars:,} are allowed"


@pytest.fixture
def api(client, researcher):
    from tests.webapp.api.conftest import ApiClient

    return ApiClient(client, api_token_create(user=researcher, name="bounds")[1])


# Guidelines: on every annotate page -----------------------------------------------------------------------------


def _project_form(name: str, guidelines: str) -> dict:
    return {"name": name, "mode": "ranking", "guidelines": guidelines, "responses_per_item": 2,
            "annotators_per_item": 1, "lease_minutes": 30}


def test_guidelines_over_their_bound_are_refused_by_the_forms_naming_the_field(researcher_client):
    page = researcher_client.post(reverse("annotation:project_create"),
                                  _project_form("Long", "x" * (GUIDELINES_MAX_CHARS + 1)))
    assert page.status_code == 200 and not Project.objects.exists()
    assert page.context["form"].errors["guidelines"] == [
        f"The guidelines {_too_long(GUIDELINES_MAX_CHARS)}: they are shown on every annotate page. Shorten them, "
        "or link to a longer document."]
    assert f"At most {GUIDELINES_MAX_CHARS:,} characters." in page.content.decode()

    researcher_client.post(reverse("annotation:project_create"), _project_form("Long", "x" * GUIDELINES_MAX_CHARS))
    project = Project.objects.get()
    assert len(project.guidelines) == GUIDELINES_MAX_CHARS
    page = researcher_client.post(reverse("annotation:project_edit", args=[project.pk]),
                                  _project_form("Long", "y" * (GUIDELINES_MAX_CHARS + 1)))
    assert "guidelines" in page.context["form"].errors
    project.refresh_from_db()
    assert project.guidelines == "x" * GUIDELINES_MAX_CHARS


def test_guidelines_over_their_bound_are_refused_by_the_api_and_the_service(api):
    answer = api.post("/projects", {"name": "Long", "guidelines": "x" * (GUIDELINES_MAX_CHARS + 1)})
    assert answer.status_code == 422, answer.content
    assert answer.json()["detail"].startswith(f"guidelines: String should have at most {GUIDELINES_MAX_CHARS}")
    with pytest.raises(ValidationError) as refused:
        annotation_services.project_create(name="Long", guidelines="x" * (GUIDELINES_MAX_CHARS + 1))
    assert list(refused.value.message_dict) == ["guidelines"]
    assert not Project.objects.exists()
    assert api.post("/projects", {"name": "Long", "guidelines": "x" * GUIDELINES_MAX_CHARS}).status_code == 201


# Prompts and responses: the import (page, API, command) and the API's responses ---------------------------------


@pytest.mark.parametrize(("row", "field", "max_chars"), [
    ({"prompt": "p" * (PROMPT_MAX_CHARS + 1)}, "prompt", PROMPT_MAX_CHARS),
    ({"prompt": [{"role": "user", "content": "p" * PROMPT_MAX_CHARS}]}, "prompt", PROMPT_MAX_CHARS),
    ({"messages": [{"role": "user", "content": "p" * PROMPT_MAX_CHARS}, {"role": "assistant", "content": "a"}]},
     "messages", PROMPT_MAX_CHARS),
    ({"prompt": "p", "responses": ["a", "r" * (RESPONSE_MAX_CHARS + 1)]}, "responses[1]", RESPONSE_MAX_CHARS),
    ({"prompt": "p", "chosen": "c" * (RESPONSE_MAX_CHARS + 1), "rejected": "r"}, "chosen", RESPONSE_MAX_CHARS),
    ({"prompt": "p", "responses": ["a", "b"], "answer": "4" * (RESPONSE_MAX_CHARS + 1)}, "answer",
     RESPONSE_MAX_CHARS),
], ids=["prompt", "conversational prompt", "messages", "response", "chosen", "reference answer"])
def test_the_import_refuses_a_text_over_its_bound_naming_line_and_field(row, field, max_chars):
    data = (json.dumps({"prompt": "first", "responses": ["a", "b"]}) + "\n" + json.dumps(row) + "\n").encode()
    with pytest.raises(ImportFileError) as refused:
        parse_import(data, file_format="jsonl")
    assert (refused.value.line, refused.value.field) == (2, field)
    # a conversation's text is its turns with their roles ("user: ..."), so it is a little longer than its content
    assert refused.value.problem.endswith(f"characters long; at most {max_chars:,} are allowed")


def test_the_api_refuses_records_and_responses_over_their_bounds(api, researcher):
    project = make_project(items=1, responses=2, owner=researcher)
    prompt = project.prompts.get()
    answer = api.post(f"/projects/{project.pk}/records",
                      {"records": [{"prompt": "p", "responses": ["a", "r" * (RESPONSE_MAX_CHARS + 1)]}]})
    assert answer.status_code == 422
    assert answer.json()["detail"] == (f'record 0, field "responses[1]": {_too_long(RESPONSE_MAX_CHARS)}; '
                                       "nothing was imported")
    answer = api.post(f"/prompts/{prompt.pk}/responses", {"texts": ["fine", "r" * (RESPONSE_MAX_CHARS + 1)]})
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith(f"texts[1]: String should have at most {RESPONSE_MAX_CHARS}")
    assert (Prompt.objects.count(), Response.objects.count()) == (1, 2)
    answer = api.post(f"/prompts/{prompt.pk}/responses", {"texts": ["r" * RESPONSE_MAX_CHARS]})
    # a prompt that holds responses gets the new one as a new item of its round, beside a copy (issue 29)
    assert answer.status_code == 201 and Response.objects.filter(copy_of=None).count() == 3


# External runs: metric and reward names, samples, config, the error it fails with ------------------------------


@pytest.fixture
def external(api) -> int:
    return api.post("/runs/external", {"name": "logged", "config": {"lr": 1e-5}}).json()["id"]


@pytest.mark.parametrize(("sample", "field", "max_chars"), [
    ({"prompt": "p" * (PROMPT_MAX_CHARS + 1), "completion": "c"}, "prompt", PROMPT_MAX_CHARS),
    ({"prompt": "p", "completion": "c" * (RESPONSE_MAX_CHARS + 1)}, "completion", RESPONSE_MAX_CHARS),
], ids=["prompt", "completion"])
def test_a_sample_text_over_its_bound_is_refused_naming_the_sample_and_field(api, external, sample, field, max_chars):
    fine = {"step": 1, "prompt": "p", "completion": "c"}
    answer = api.post(f"/runs/{external}/samples", {"batch_id": "b1", "samples": [fine, {"step": 1, **sample}]})
    assert answer.status_code == 422
    assert answer.json()["detail"] == f'sample 1, field "{field}": the text {_too_long(max_chars)}'
    assert not Sample.objects.exists()
    at_bound = {**sample, field: field[0] * max_chars}
    assert api.post(f"/runs/{external}/samples", {"batch_id": "b2", "samples": [{"step": 1, **at_bound}]}).json() == {
        "written": 1}


@pytest.mark.parametrize("where", ["metric", "reward"])
def test_metric_and_reward_names_over_their_bound_are_refused(api, external, where):
    name = "m" * (NAME_MAX_CHARS + 1)
    if where == "metric":
        answer = api.post(f"/runs/{external}/log", {"rows": [{"step": 1, "metrics": {name: 1.0}}]})
    else:
        answer = api.post(f"/runs/{external}/samples", {"batch_id": "b", "samples": [
            {"step": 1, "prompt": "p", "completion": "c", "rewards": {name: 1.0}}]})
    assert answer.status_code == 422 and _too_long(NAME_MAX_CHARS) in answer.json()["detail"]
    assert not Sample.objects.exists() and Run.objects.get().metric_names == []


def test_an_external_runs_config_over_its_bound_is_refused(api):
    config = {"notes": "n" * EXTERNAL_CONFIG_MAX_CHARS}
    answer = api.post("/runs/external", {"name": "too much", "config": config})
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("config: as JSON, the config is 100,013 characters long; at most "
                                              f"{EXTERNAL_CONFIG_MAX_CHARS:,} are allowed")
    assert not Run.objects.exists()


def test_a_failed_runs_long_error_is_kept_cut_to_its_bound_with_both_ends(api, external):
    error = "Traceback (most recent call last):\n" + "  frame\n" * (RUN_ERROR_MAX_CHARS // 4) + "ValueError: the end"
    answer = api.post(f"/runs/{external}/finish", {"status": "failed", "error": error})
    assert answer.status_code == 200, answer.content
    stored = Run.objects.get().error
    assert len(stored) == RUN_ERROR_MAX_CHARS
    assert stored.startswith("Traceback (most recent call last):\n") and stored.endswith("ValueError: the end")
    assert f"characters cut (at most {RUN_ERROR_MAX_CHARS:,} are kept)" in stored


# A run's config: the launch form's text fields and the API ------------------------------------------------------


def test_a_config_text_over_its_bound_is_refused_by_the_api_and_the_form(api, researcher_client):
    modules = ["q_proj", "m" * (CONFIG_TEXT_MAX_CHARS + 1)]
    answer = api.post("/runs", {"kind": "sft", "config": {"lora_target_modules": modules},
                                "data_source": {"type": "arithmetic", "level": 1, "size": 8}})
    assert answer.status_code == 422
    assert answer.json()["detail"] == f"config.lora_target_modules: a text of the config {_too_long(CONFIG_TEXT_MAX_CHARS)}"
    page = researcher_client.post("/runs/new?kind=sft", {"data_source": "arithmetic",
                                                         "lora_target_modules": "m" * (CONFIG_TEXT_MAX_CHARS + 1)})
    assert page.status_code == 422 and "lora_target_modules" in page.context["form"].errors
    assert not Run.objects.exists()


def test_the_run_services_refuse_the_same(researcher):
    with pytest.raises(ValidationError) as refused:
        experiment_services.run_launch(kind="sft", config={"lora_target_modules": "m" * (CONFIG_TEXT_MAX_CHARS + 1)},
                                       data_source={"type": "arithmetic", "level": 1, "size": 8}, created_by=researcher)
    assert list(refused.value.message_dict) == ["lora_target_modules"]
