import io

import pytest

from webapp.experiments.demo import DEMO_MODEL_DIRECTORY, DEMO_SFT_RUN_NAME, seed_demo_data
from webapp.experiments.models import ModelRef, Run

pytestmark = pytest.mark.django_db


def test_demo_builds_the_tiny_model_in_a_subprocess_once_registers_it_and_queues_one_sft_run(settings, tmp_path):
    settings.MODEL_ROOTS = [tmp_path]
    seed_demo_data(io.StringIO())
    seed_demo_data(io.StringIO())  # idempotent: built once, registered once, one run queued
    model = ModelRef.objects.get()
    assert model.path == str(tmp_path / DEMO_MODEL_DIRECTORY)
    assert (tmp_path / DEMO_MODEL_DIRECTORY / "config.json").is_file()
    assert (tmp_path / DEMO_MODEL_DIRECTORY / "tokenizer.json").is_file()
    run = Run.objects.get()
    assert (run.name, run.kind, run.status) == (DEMO_SFT_RUN_NAME, "sft", Run.Status.QUEUED)
    assert run.config["model"] == model.path and run.config["max_steps"] == 300
    assert run.data_source == {"type": "arithmetic", "level": 1, "size": 85}
