import pytest

from tests.webapp.experiments.helpers import register_tiny_model, tiny_model_roots


@pytest.fixture
def tiny_model(settings, tiny_model_dir):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    return register_tiny_model(tiny_model_dir)
