"""API model registry: registering a model names it as the registry's one resolver accepts; the list in pages."""

from __future__ import annotations

import json

import pytest

from webapp.experiments.models import ModelRef, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def model_dir(settings, tmp_path):
    settings.MODEL_ROOTS = [tmp_path / "models"]
    directory = tmp_path / "models" / "tiny-llama"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return directory


def test_register_a_local_model_and_a_hub_id(api, model_dir):
    response = api.post("/models", {"path": str(model_dir), "name": "tiny"})
    assert response.status_code == 201
    model = ModelRef.objects.get()
    assert (model.name, model.path, model.source, model.architecture) == ("tiny", str(model_dir), "local", "causal_lm")
    assert response.json() == {"id": model.pk, "name": "tiny", "path": str(model_dir), "source": "local",
                               "architecture": "causal_lm", "run_id": None, "step": None}

    again = api.post("/models", {"path": str(model_dir)})
    assert again.status_code == 201 and again.json()["id"] == model.pk and ModelRef.objects.count() == 1

    hub = api.post("/models", {"path": "org/some-model"}).json()
    assert (hub["source"], hub["name"], hub["architecture"]) == ("hub", "org/some-model", "unknown")
    assert ModelRef.objects.count() == 2


@pytest.mark.parametrize(("path", "field", "words"), [
    ("/etc", "path", "outside the allowed model roots"),
    ("", "path", "no model given"),
    ("not a model", "path", "not a known model"),
])
def test_refusals_name_the_field_and_write_nothing(api, model_dir, path, field, words):
    response = api.post("/models", {"path": path})
    assert response.status_code == 422
    assert response.json()["detail"].startswith(f"{field}: ") and words in response.json()["detail"]
    assert not ModelRef.objects.exists()


def test_a_taken_name_is_refused(api, model_dir):
    assert api.post("/models", {"path": "org/a", "name": "same"}).status_code == 201
    response = api.post("/models", {"path": str(model_dir), "name": "same"})
    assert response.status_code == 422 and response.json()["detail"].startswith("name: ")
    assert ModelRef.objects.count() == 1


def test_models_in_pages_with_their_runs(api, researcher):
    run = Run.objects.create(name="r", kind="sft", config={}, data_source={}, status=Run.Status.SUCCEEDED,
                             created_by=researcher)
    for index in range(3):
        ModelRef.objects.create(name=f"base {index}", path=f"org/m{index}", source=ModelRef.Source.HUB)
    checkpoint = ModelRef.objects.create(name="run r step 8", path="/runs/1/step-8", source=ModelRef.Source.CHECKPOINT,
                                         run=run, step=8)
    first = api.get("/models", {"limit": 3}).json()
    assert first["count"] == 4 and first["next"] == 3
    newest = first["items"][0]
    assert newest == {"id": checkpoint.pk, "name": "run r step 8", "path": "/runs/1/step-8", "source": "checkpoint",
                      "architecture": "unknown", "run_id": run.pk, "step": 8}
    rest = api.get("/models", {"limit": 3, "offset": 3}).json()
    assert rest["next"] is None and [item["name"] for item in rest["items"]] == ["base 0"]
