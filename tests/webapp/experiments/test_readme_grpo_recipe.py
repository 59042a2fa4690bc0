"""The README's GRPO recipe launches as written: its numbers are read from README.md and posted through the
launch form, every other field as the form offers it (issue 13)."""

import re
from pathlib import Path

import pytest
from django import forms

from tests.webapp.experiments.helpers import as_the_browser_posts
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db

README = Path(__file__).resolve().parents[3] / "README.md"
RECIPE_START = "A GRPO run that visibly learns on the demo:"


@pytest.fixture(autouse=True)
def no_queue(monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")


def readme_recipe() -> dict[str, str]:
    """{form field: value} of the recipe's sentence, e.g. "max new tokens 28" -> {"max_new_tokens": "28"}."""
    text = " ".join(README.read_text().split())
    sentence = text[text.index(RECIPE_START):].split(". ")[0]
    pairs = re.findall(r"(lr|[a-z]+(?: [a-z]+)*) `?(\d[\d.e-]*)`?(?=,|$)", sentence.split(" as the model, ")[1])
    return {label.replace(" ", "_"): value for label, value in pairs}


def _flat_choices(field: forms.ChoiceField) -> list[tuple[str, str]]:
    flat = []
    for value, label in field.choices:
        flat.extend(label if isinstance(label, list | tuple) else [(value, label)])
    return flat


def test_the_readme_recipe_names_the_values_this_test_posts():
    assert readme_recipe() == {"lr": "8e-4", "max_steps": "300", "batch_size": "16", "max_new_tokens": "28",
                               "max_length": "64"}


def test_the_readme_grpo_recipe_launches_as_written(researcher_client, tiny_model):
    form = researcher_client.get("/runs/new?kind=grpo").context["form"]
    (model_choice,) = [value for value, label in _flat_choices(form.fields["model"]) if label.startswith(tiny_model.name)]
    recipe = readme_recipe()
    response = researcher_client.post("/runs/new?kind=grpo",
                                      {**as_the_browser_posts(form), "model": model_choice, **recipe})
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get()
    assert response["Location"] == f"/runs/{run.pk}/"
    for name, value in recipe.items():
        assert run.config[name] == pytest.approx(float(value)), name
    # the limits the recipe leaves empty follow its numbers
    assert (run.config["max_prompt_length"], run.config["overlong_buffer"]) == (64 - 28, 28 // 4)
