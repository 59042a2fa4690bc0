"""One resolver names every model: registration, the launch form's model fields and sampling accept a registered
model or a run's checkpoint by name or path, a directory under the model roots or a hub id, and nothing else."""

import json
import shutil
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.experiments.helpers import ARITHMETIC, small_config
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import SamplingJob
from webapp.experiments import services
from webapp.experiments.models import ModelRef, Run

pytestmark = pytest.mark.django_db
SAMPLING = {"responses_per_prompt": 2, "max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0, "seed": 0}


@pytest.fixture
def queued(monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")


@pytest.fixture
def runs_dir(settings, tmp_path) -> Path:
    settings.RUNS_DIR = tmp_path / "runs"
    return settings.RUNS_DIR


def _checkpoint(run: Run, step: int, tiny_model_dir: Path) -> ModelRef:
    """What a run's sink registers once the trainer wrote `step`: a save_pretrained directory under RUNS_DIR."""
    directory = Path(run.config["output_dir"]) / "checkpoints" / f"step-{step}"
    directory.mkdir(parents=True)
    shutil.copy(tiny_model_dir / "config.json", directory / "config.json")
    return services.model_register_checkpoint(run_id=run.pk, step=step, path=str(directory))


def _run(tiny_model, researcher, kind: str = "sft", **overrides) -> Run:
    config = {**small_config(tiny_model), **overrides}
    return services.run_create(kind=kind, config=config, data_source=ARITHMETIC, created_by=researcher, name=kind)


def test_a_runs_checkpoint_is_sampled_trained_and_registered_by_name_or_path(
    tiny_model, tiny_model_dir, researcher, runs_dir, queued
):
    checkpoint = _checkpoint(_run(tiny_model, researcher), 8, tiny_model_dir)
    project = annotation_services.project_create(name="loop", responses_per_item=2)
    annotation_services.prompts_import(project=project, records=[ImportRecord(line=1, external_id="q", text="Q?")])

    for given in (checkpoint.name, checkpoint.path, f"  {checkpoint.name} "):
        job = annotation_services.sampling_job_create(project=project, model_path=given, generation_settings=SAMPLING,
                                                      created_by=researcher)
        assert SamplingJob.objects.get(pk=job.pk).model_path == checkpoint.path  # the job keeps the resolved path
    assert services.model_register(path=checkpoint.path) == checkpoint
    assert services.model_register(path=checkpoint.name) == checkpoint
    follow_up = _run(tiny_model, researcher, kind="dpo", model=checkpoint.name, reference_model=checkpoint.path)
    assert follow_up.config["model"] == follow_up.config["reference_model"] == checkpoint.path
    assert services.model_resolve(tiny_model.name).path == tiny_model.path


@pytest.mark.parametrize("make_path", [
    lambda tmp, root: str(tmp / "elsewhere"),
    lambda tmp, root: str(root / ".." / "elsewhere"),
    lambda tmp, root: str(root / "legit" / ".." / ".." / "elsewhere"),
], ids=["outside", "dotdot-escape", "dotdot-through-a-model"])
def test_paths_outside_the_roots_are_refused_everywhere(settings, tmp_path, researcher, queued, make_path):
    root = tmp_path / "models"
    (root / "legit").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "config.json").write_text("{}")
    settings.MODEL_ROOTS = [root]
    given = make_path(tmp_path, root)
    with pytest.raises(ValidationError, match="outside the allowed model roots"):
        services.model_register(path=given)
    project = annotation_services.project_create(name="p", responses_per_item=2)
    with pytest.raises(ValidationError, match=r"elsewhere is outside the allowed model roots"):
        annotation_services.sampling_job_create(project=project, model_path=given, generation_settings=SAMPLING,
                                                created_by=researcher)
    assert not ModelRef.objects.exists() and not SamplingJob.objects.exists()


def test_a_directory_under_the_runs_that_is_no_registered_checkpoint_is_refused(tiny_model_dir, runs_dir):
    stray = runs_dir / "9" / "checkpoints" / "step-1"
    stray.mkdir(parents=True)
    shutil.copy(tiny_model_dir / "config.json", stray / "config.json")
    with pytest.raises(ValidationError, match="is not a checkpoint in the registry"):
        services.model_resolve(str(stray))


@pytest.mark.parametrize("given", ["not a model!", "org/..", "org/.", "../org/name", "just-a-name"])
def test_anything_else_is_refused_saying_what_was_given_and_what_is_accepted(given):
    with pytest.raises(ValidationError) as error:
        services.model_resolve(given)
    message = error.value.messages[0]
    assert "registered model's name" in message and "hub id (org/name)" in message
    assert given in message or str(Path(given).resolve()) in message


def test_one_hub_id_pattern_no_bare_names(researcher, queued):
    assert services.model_resolve("org/model-name").source == ModelRef.Source.HUB
    project = annotation_services.project_create(name="p", responses_per_item=2)
    with pytest.raises(ValidationError, match="'gpt2' is not a known model"):
        annotation_services.sampling_job_create(project=project, model_path="gpt2", generation_settings=SAMPLING,
                                                created_by=researcher)


def test_what_a_model_is_comes_from_config_json_or_the_runs_kind(
    settings, tmp_path, tiny_model, tiny_model_dir, researcher, runs_dir, queued
):
    assert tiny_model.architecture == ModelRef.Architecture.CAUSAL_LM
    classifier_dir = tmp_path / "models" / "scorer"
    classifier_dir.mkdir(parents=True)
    (classifier_dir / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"]}))
    settings.MODEL_ROOTS = [*settings.MODEL_ROOTS, tmp_path / "models"]
    assert services.model_register(path=str(classifier_dir)).architecture == ModelRef.Architecture.CLASSIFIER
    assert services.model_register(path="org/x").architecture == ModelRef.Architecture.UNKNOWN
    rm_checkpoint = _checkpoint(_run(tiny_model, researcher, kind="reward_model"), 4, tiny_model_dir)
    assert rm_checkpoint.architecture == ModelRef.Architecture.CLASSIFIER
    # a reward model is no policy: not for a DPO run, not for sampling
    with pytest.raises(ValidationError, match="is a sequence classifier; model takes a causal LM"):
        _run(tiny_model, researcher, kind="dpo", model=rm_checkpoint.name)
    project = annotation_services.project_create(name="p", responses_per_item=2)
    with pytest.raises(ValidationError, match="sampling needs a causal LM"):
        annotation_services.sampling_job_create(project=project, model_path=rm_checkpoint.name,
                                                generation_settings=SAMPLING, created_by=researcher)


def test_the_models_page_registers_a_checkpoint_and_refuses_an_escape(
    tiny_model, tiny_model_dir, researcher, researcher_client, runs_dir, queued, settings
):
    checkpoint = _checkpoint(_run(tiny_model, researcher), 8, tiny_model_dir)
    response = researcher_client.post("/models/", {"path": checkpoint.path}, follow=True)
    page = response.content.decode()
    assert f"Model {checkpoint.name} registered." in page and 'role="alert"' not in page
    assert ModelRef.objects.filter(path=checkpoint.path).count() == 1
    escape = str(Path(settings.MODEL_ROOTS[-1]) / ".." / "..")
    page = researcher_client.post("/models/", {"path": escape}).content.decode()
    assert "outside the allowed model roots" in page
    assert ModelRef.objects.count() == 2  # the tiny model and the checkpoint
