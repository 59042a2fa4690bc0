"""The launch form's model fields offer models by what they are: causal LMs as policy and reference, sequence
classifiers as reward model and critic, hub ids of unknown kind for both; each run's newest checkpoint first;
nothing chosen for the user."""

import json

import pytest

from tests.webapp.experiments.helpers import ARITHMETIC, small_config
from webapp.annotation.forms import SamplingForm
from webapp.experiments import services
from webapp.experiments.forms import LaunchForm
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def registry(settings, tmp_path, tiny_model, researcher, monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")
    scorer = tmp_path / "roots" / "scorer"
    scorer.mkdir(parents=True)
    (scorer / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"]}))
    settings.MODEL_ROOTS = [*settings.MODEL_ROOTS, tmp_path / "roots"]
    models = {"tiny": tiny_model, "scorer": services.model_register(path=str(scorer), name="scorer"),
              "hub": services.model_register(path="org/unknown-kind")}
    for kind, steps in (("sft", (2, 4)), ("reward_model", (3,)), ("dpo", (5,))):
        run = services.run_create(kind=kind, config={**small_config(tiny_model)}, data_source=ARITHMETIC,
                                  created_by=researcher, name=kind)
        for step in steps:
            models[f"{kind}-{step}"] = services.model_register_checkpoint(
                run_id=run.pk, step=step, path=str(tmp_path / kind / f"step-{step}"))
    return models


def _offered(form: LaunchForm, field: str) -> list[str]:
    """The paths offered, in order, the blank first ('' stands for it)."""
    paths = []
    for value, label in form.fields[field].choices:
        paths.extend([path for path, _ in label] if isinstance(label, list | tuple) else [value])
    return paths


def test_policy_and_reference_fields_offer_causal_lms_newest_checkpoint_first(registry, researcher):
    form = LaunchForm(kind="dpo", user=researcher)
    paths = [registry[name].path for name in ("hub", "tiny", "dpo-5", "sft-4", "sft-2")]
    assert _offered(form, "model") == ["", *paths]
    assert _offered(form, "reference_model") == ["", *paths]
    assert form.fields["model"].choices[0] == ("", "— choose a model —")
    assert "(hub id, kind unknown)" in dict(form.fields["model"].choices[1][1])[registry["hub"].path]


def test_reward_model_and_critic_fields_offer_classifiers_only(registry, researcher):
    expected = ["", *(registry[name].path for name in ("hub", "scorer", "reward_model-3"))]
    assert _offered(LaunchForm(kind="grpo", user=researcher), "reward_model") == expected
    assert _offered(LaunchForm(kind="ppo", user=researcher), "critic_model") == expected
    assert LaunchForm(kind="grpo", user=researcher).fields["reward_model"].choices[0] == ("", "— none —")


def test_sampling_suggests_causal_lms_only(registry, researcher):
    names = [model.name for model in SamplingForm(user=researcher).known_models()]
    assert names == [registry[name].name for name in ("hub", "tiny", "dpo-5", "sft-4", "sft-2")]


def test_nothing_is_preselected_and_a_blank_model_is_refused_with_a_message(registry, researcher_client):
    page = researcher_client.get("/runs/new?kind=dpo").content.decode()
    model_select = page[page.index('name="model"'):page.index("</select>", page.index('name="model"'))]
    assert model_select.count(" selected") == 1 and 'value="" selected' in model_select
    runs = Run.objects.count()
    response = researcher_client.post("/runs/new?kind=dpo", {"data_source": "arithmetic", "level": "1", "size": "8"})
    assert "choose a model: this run needs one to start from" in response.content.decode()
    assert Run.objects.count() == runs
