"""Issue 27: every numeric launch value out of its bounds is refused before anything is written or queued, through
the launch form (422, the page again with the error on that field) and the API (422 naming the field): the values that
stalled the only gpu worker (a batch of 2^63, grad_accum_steps 2^40, a data size of 2^63), those that failed only on
the worker (max_steps 10^30, seed -1 and 2^70), a batch larger than the data, and the sampling form's seed 2^70."""

from __future__ import annotations

import html
import re

import pytest

from tests.webapp.annotation.factories import make_project
from tests.webapp.api.run_api_helpers import api_client_of
from tests.webapp.experiments.helpers import ARITHMETIC, small_config
from webapp.annotation.models import SamplingJob
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db

FORM = {"name": "bounds", "data_source": "arithmetic", "level": "1", "size": "16", "batch_size": "4",
        "grad_accum_steps": "1", "max_length": "64", "max_prompt_length": "16", "lr_scheduler": "linear",
        "lora_target_modules": "all-linear", "max_steps": "3"}

# (the form's field, the value posted, the API's name of the field, the words of the refusal)
ISSUE_VALUES = [
    ("batch_size", 2**63, "config.batch_size", "must be <= 1048576, got 9223372036854775808"),
    ("grad_accum_steps", 2**40, "config.grad_accum_steps", "must be <= batch_size=4"),
    ("size", 2**63, "data_source.size", "must be at most 85 at level 1"),
    ("max_steps", 10**30, "config.max_steps", "must be <= 2147483647, got 1000000000000000000000000000000"),
    ("seed", -1, "config.seed", "must be >= 0, got -1"),
    ("seed", 2**70, "config.seed", "must be <= 9223372036854775807, got 1180591620717411303424"),
    # a batch larger than the data (16 problems): a step would take rows twice
    ("batch_size", 32, "config.batch_size", "32 is more than the data's 16 rows"),
]


def _field_block(page: str, name: str) -> str:
    """The launch page's <label> of field `name`: its input, help and errors (templates/experiments/_field.html)."""
    labels = re.findall(r'<label class="field[^"]*">.*?</label>', page, flags=re.DOTALL)
    (block,) = [label for label in labels if f'name="{name}"' in label]
    return html.unescape(block)


@pytest.mark.parametrize(("field", "value", "api_field", "words"), ISSUE_VALUES,
                         ids=[f"{field}={value}" for field, value, _, _ in ISSUE_VALUES])
def test_the_launch_form_refuses_it_on_its_field_with_a_422_and_writes_nothing(
    researcher_client, tiny_model, django_capture_on_commit_callbacks, field, value, api_field, words
):
    with django_capture_on_commit_callbacks() as published:
        response = researcher_client.post("/runs/new?kind=reward_model",
                                          {**FORM, "model": tiny_model.path, field: str(value)})
    assert response.status_code == 422
    errors = response.context["form"].errors
    assert list(errors) == [field] and words in errors[field][0], errors
    block = _field_block(response.content.decode(), field)
    assert 'class="field invalid"' in block and 'role="alert"' in block and words in block
    assert not Run.objects.exists() and published == []


@pytest.mark.parametrize(("field", "value", "api_field", "words"), ISSUE_VALUES,
                         ids=[f"{field}={value}" for field, value, _, _ in ISSUE_VALUES])
def test_the_api_refuses_it_with_a_422_naming_the_field_and_writes_nothing(
    researcher, tiny_model, django_capture_on_commit_callbacks, field, value, api_field, words
):
    config = small_config(tiny_model, max_steps=3)
    data_source = dict(ARITHMETIC, size=16)
    if field == "size":
        data_source["size"] = value
    else:
        config[field] = value
    with django_capture_on_commit_callbacks() as published:
        response = api_client_of(researcher).post("/runs", {"kind": "reward_model", "name": "bounds",
                                                            "config": config, "data_source": data_source})
    assert response.status_code == 422, response.content
    detail = response.json()["detail"]
    assert detail.startswith(f"{api_field}: ") and words in detail, detail
    assert not Run.objects.exists() and published == []


def test_non_finite_numbers_and_the_other_kinds_bounds_are_refused_by_the_api_naming_the_field(
    researcher, tiny_model, django_capture_on_commit_callbacks
):
    """JSON as Python reads it spells NaN and Infinity (the API's text rule refuses them wherever they stand, before
    the config's own finite checks, which the CLI meets); the online kinds have bounds of their own."""
    api = api_client_of(researcher)
    refusals = [
        ("reward_model", {"lr": float("nan")}, "config.lr", "is nan, which JSON cannot hold: give a finite number"),
        ("reward_model", {"epochs": float("inf"), "max_steps": None}, "config.epochs", "give a finite number"),
        ("grpo", {"group_size": 2**40}, "config.group_size", "must be <= 1024"),
        ("grpo", {"rewards": {"answer_match": float("inf")}}, "config.rewards.answer_match", "give a finite number"),
        ("grpo", {"num_nodes": 2**40}, "config.num_nodes", "must be <= 256"),
    ]
    with django_capture_on_commit_callbacks() as published:
        for kind, fields, api_field, words in refusals:
            config = {**small_config(tiny_model), "max_prompt_length": None, "max_new_tokens": 8, **fields}
            if kind == "reward_model":
                del config["max_new_tokens"]
            response = api.post("/runs", {"kind": kind, "config": config, "data_source": ARITHMETIC})
            detail = response.json()["detail"]
            assert response.status_code == 422 and detail.startswith(f"{api_field}: ") and words in detail, detail
    assert not Run.objects.exists() and published == []


def test_the_sampling_form_refuses_a_seed_of_2_to_the_70_on_its_field_and_queues_nothing(
    researcher_client, researcher, tiny_model, django_capture_on_commit_callbacks
):
    project = make_project(owner=researcher)
    settings = {"model_path": tiny_model.path, "responses_per_prompt": 2, "max_new_tokens": 8, "temperature": 1,
                "top_p": 1}
    with django_capture_on_commit_callbacks() as published:
        response = researcher_client.post(f"/projects/{project.pk}/sample/", {**settings, "seed": str(2**70)},
                                          HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    errors = response.context["form"].errors  # the sampling form, as its template renders it
    assert list(errors) == ["seed"] and "less than or equal to 9223372036854775807" in errors["seed"][0], errors
    assert 'id="id_seed_error"' in response.content.decode()
    assert not SamplingJob.objects.exists() and published == []
    with django_capture_on_commit_callbacks(execute=False) as published:
        accepted = researcher_client.post(f"/projects/{project.pk}/sample/", {**settings, "seed": str(2**63 - 1)},
                                          HTTP_HX_REQUEST="true")
    assert accepted.status_code == 200 and SamplingJob.objects.get().generation_settings["seed"] == 2**63 - 1
    assert len(published) == 1


@pytest.mark.parametrize(("generation", "detail"), [
    ({"seed": 2**70}, "must be between 0 and 9223372036854775807, got 1180591620717411303424"),
    ({"seed": -1}, "must be between 0 and"),
    ({"temperature": float("inf")}, "must be between 0.0 and 5.0, got inf"),
    ({"max_new_tokens": 10**9}, "must be between 1 and 4096"),
    ({"responses_per_prompt": 2.5}, "must be a whole number, got 2.5"),
    ({"batch_size": 2**63}, "must be between 1 and 256"),
    ({"batch": 8}, "is not a generation setting"),
])
def test_the_sampling_service_checks_the_settings_whoever_calls_it(tiny_model, researcher, generation, detail):
    from django.core.exceptions import ValidationError

    from webapp.annotation import services

    good = {"responses_per_prompt": 2, "max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0, "seed": 0}
    with pytest.raises(ValidationError) as refused:
        services.sampling_job_create(project=make_project(owner=researcher), model_path=tiny_model.path,
                                     generation_settings={**good, **generation}, created_by=researcher)
    ((field, (message,)),) = refused.value.message_dict.items()
    assert field == next(iter(generation)) and detail in message
    assert not SamplingJob.objects.exists()
