"""A run's project data source on thumbs and ratings: a ratings project gives the kinds that train on pairs its
binarized pairs, a kind that trains on unpaired rows (KTO) gets the project's unpaired rows from any mode, and a
project that gives no rows for the kind is refused at launch."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.annotation.factories import make_project
from tests.webapp.annotation.feedback_fixtures import (
    RATING_PAIRS_WORST,
    make_ratings_project,
    make_thumbs_project,
)
from tests.webapp.experiments.helpers import small_config
from trainer.kinds import KINDS
from webapp.experiments import services
from webapp.experiments.data_sources import data_source_check, data_source_rows, training_rows
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def unpaired_kind() -> str:
    """The KTO kind (trainer/kinds.py), which trains on unpaired rows."""
    assert KINDS["kto"].rows == "unpaired"
    return "kto"


def _source(project, **options) -> dict:
    return {"type": "project_pairs", "project_id": project.pk, **options}


def test_a_ratings_project_gives_pair_kinds_its_binarized_pairs(researcher):
    project = make_ratings_project(owner=researcher)
    source = _source(project, binarization="worst")
    data_source_check("dpo", source)
    assert data_source_rows("reward_model", source) == data_source_rows("dpo", _source(project)) == 2
    rows, held_out = training_rows("reward_model", source)
    assert held_out is None
    assert [(row["prompt"], row["chosen"], row["rejected"], row["margin"]) for row in rows] == RATING_PAIRS_WORST
    sft_rows, _ = training_rows("sft", source)
    assert sft_rows == [{"prompt": "Question 0?", "completion": "a"}, {"prompt": "Question 2?", "completion": "h"}]


def test_a_project_gives_an_unpaired_kind_its_kto_rows(researcher, unpaired_kind):
    project = make_thumbs_project(owner=researcher)
    data_source_check(unpaired_kind, _source(project))
    assert data_source_rows(unpaired_kind, _source(project)) == 6
    assert data_source_rows(unpaired_kind, _source(project, aggregation="majority")) == 3
    rows, _ = training_rows(unpaired_kind, _source(project, aggregation="majority"))
    assert rows == [{"prompt": "Question 0?", "completion": "a", "label": True},
                    {"prompt": "Question 0?", "completion": "b", "label": False},
                    {"prompt": "Question 0?", "completion": "c", "label": False}]


def test_bad_binarization_options_are_refused_on_their_field():
    with pytest.raises(ValidationError) as refused:
        data_source_check("dpo", _source(type("P", (), {"pk": 1}), binarization="best"))
    assert list(refused.value.message_dict) == ["binarization"]
    with pytest.raises(ValidationError) as refused:
        data_source_check("dpo", _source(type("P", (), {"pk": 1}), binarization_seed=-1))
    assert list(refused.value.message_dict) == ["binarization_seed"]


def test_a_project_without_rows_for_the_kind_is_refused_at_launch(researcher, tiny_model, unpaired_kind):
    project = make_project(items=1, texts=[["x", "y"]], owner=researcher, name="Unanswered")
    assert data_source_rows(unpaired_kind, _source(project)) == 0
    with pytest.raises(ValidationError) as refused:
        services.run_create(kind="reward_model", config=small_config(tiny_model), data_source=_source(project),
                            created_by=researcher)
    assert refused.value.message_dict == {"project": ["the project has no preference pairs to train on yet"]}
    with pytest.raises(ValidationError) as refused:
        services.run_create(kind=unpaired_kind, config=small_config(tiny_model), data_source=_source(project),
                            created_by=researcher)
    assert refused.value.message_dict == {"project": [
        "the project has no thumbs, rankings or ratings (KTO's unpaired rows) to train on yet"]}


def test_a_reward_model_launches_on_a_ratings_projects_pairs(researcher, tiny_model):
    project = make_ratings_project(owner=researcher)
    run = services.run_create(kind="reward_model", config=small_config(tiny_model, batch_size=2),
                              data_source=_source(project, binarization="worst", binarization_seed=3), created_by=researcher)
    assert run.data_rows == 2


def test_the_launch_form_stores_a_binarization_other_than_the_default(researcher_client, researcher, tiny_model):
    project = make_ratings_project(owner=researcher)
    form = {"name": "rm on ratings", "data_source": "project_pairs", "project": str(project.pk),
            "aggregation": "all", "binarization": "worst", "binarization_seed": "0", "model": tiny_model.path,
            "batch_size": "2", "grad_accum_steps": "1", "max_length": "64", "max_prompt_length": "16",
            "lr_scheduler": "linear", "lora_target_modules": "all-linear", "max_steps": "2"}
    response = researcher_client.post("/runs/new?kind=reward_model", form)
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    run = Run.objects.get(name="rm on ratings")
    assert run.data_source == {"type": "project_pairs", "project_id": project.pk, "aggregation": "all",
                               "binarization": "worst"}
    assert run.data_rows == 2
    page = researcher_client.get(f"/runs/{run.pk}/").content.decode()
    assert "ratings binarized: worst (seed 0)" in page
    refused = researcher_client.post("/runs/new?kind=reward_model", {**form, "binarization_seed": "-1"})
    assert refused.status_code == 422 and list(refused.context["form"].errors) == ["binarization_seed"]


def test_the_launch_forms_project_menu_counts_each_modes_feedback(researcher):
    from webapp.experiments.forms import _projects

    thumbs, ranking = make_thumbs_project(owner=researcher), make_project(owner=researcher, name="Ranked")
    held = {project_id: feedback for project_id, _, feedback, _ in _projects(researcher)}
    assert held[thumbs.pk] == f"{thumbs.labels.values('response').distinct().count()} responses with thumbs"
    assert thumbs.labels.exists() and held[ranking.pk] == "0 pairs"


def test_a_kto_run_on_a_projects_prompts_is_told_what_it_trains_on(researcher):
    project = make_project(owner=researcher)
    with pytest.raises(ValidationError, match="kto needs a project's thumbs, rankings or ratings"):
        data_source_check("kto", {"type": "project_prompts", "project_id": project.pk})
