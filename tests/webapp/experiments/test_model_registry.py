import pytest
from django.core.exceptions import ValidationError

from webapp.experiments.models import ModelRef
from webapp.experiments.services import model_register

pytestmark = pytest.mark.django_db


def test_a_directory_under_a_model_root_is_registered_once(tiny_model, tiny_model_dir):
    assert tiny_model.source == ModelRef.Source.LOCAL
    assert model_register(path=str(tiny_model_dir)) == tiny_model


def test_a_path_outside_the_model_roots_is_refused(settings, tmp_path):
    settings.MODEL_ROOTS = [tmp_path / "models"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    with pytest.raises(ValidationError, match="outside the allowed model roots"):
        model_register(path=str(outside))
    with pytest.raises(ValidationError, match="outside the allowed model roots"):
        model_register(path=str(tmp_path / "models" / ".." / "elsewhere"))


def test_a_directory_without_a_model_is_refused(settings, tmp_path):
    settings.MODEL_ROOTS = [tmp_path]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValidationError, match="config.json is missing"):
        model_register(path=str(tmp_path / "empty"))


def test_a_hub_id_is_registered_as_such():
    assert model_register(path="org/some-model").source == ModelRef.Source.HUB


def test_models_page_lists_and_refuses_outside_paths(researcher_client, tiny_model):
    page = researcher_client.get("/models/").content.decode()
    assert "tiny arithmetic" in page
    response = researcher_client.post("/models/", {"path": "/etc"})
    assert "outside the allowed model roots" in response.content.decode()
