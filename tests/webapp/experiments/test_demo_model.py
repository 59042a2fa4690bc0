import io

import pytest

from webapp.experiments.demo import DEMO_MODEL_DIRECTORY, seed_demo_data
from webapp.experiments.models import ModelRef

pytestmark = pytest.mark.django_db


def test_demo_builds_the_tiny_model_in_a_subprocess_once_and_registers_it(settings, tmp_path):
    settings.MODEL_ROOTS = [tmp_path]
    seed_demo_data(io.StringIO())
    seed_demo_data(io.StringIO())  # idempotent: built once, registered once
    model = ModelRef.objects.get()
    assert model.path == str(tmp_path / DEMO_MODEL_DIRECTORY)
    assert (tmp_path / DEMO_MODEL_DIRECTORY / "config.json").is_file()
    assert (tmp_path / DEMO_MODEL_DIRECTORY / "tokenizer.json").is_file()
