"""The trainer's keep_last through the database sink: an old checkpoint's row and directory go, unless another
run uses it as a model, then both stay (its optimizer state is still stripped)."""

import shutil
from pathlib import Path

import pytest
import torch

from tests.webapp.experiments.helpers import ARITHMETIC, small_config
from trainer.kinds import config_from_dict
from trainer.loop import STATE_FILE, retain_checkpoints
from webapp.experiments import services
from webapp.experiments.models import ModelRef
from workers.training import DatabaseSink

pytestmark = pytest.mark.django_db(transaction=True)


def test_keep_last_deletes_old_checkpoints_but_never_one_another_run_uses(
    settings, tmp_path, tiny_model, tiny_model_dir, researcher, monkeypatch
):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")
    settings.RUNS_DIR = tmp_path / "runs"
    run = services.run_create(kind="sft", config=small_config(tiny_model), data_source=ARITHMETIC,
                              created_by=researcher, name="writer")
    sink = DatabaseSink(run.pk)
    directories = {}
    try:
        for step in (1, 2, 3):
            directory = Path(run.config["output_dir"]) / "checkpoints" / f"step-{step}"
            directory.mkdir(parents=True)
            shutil.copy(tiny_model_dir / "config.json", directory / "config.json")
            torch.save({"step": step, "optimizer": {"state": torch.zeros(1000)}}, directory / STATE_FILE)
            sink.checkpoint(step, str(directory))
            directories[step] = directory
            if step == 1:  # another run starts from step 1 before the writer goes on
                services.run_create(kind="dpo", config={**small_config(tiny_model), "model": str(directory)},
                                    data_source=ARITHMETIC, created_by=researcher, name="reader")
        config = config_from_dict("sft", {**run.config, "keep_last": 1})
        retain_checkpoints(config, sink, directories[3])
    finally:
        sink.close()
    assert sorted(ModelRef.objects.filter(run=run).values_list("step", flat=True)) == [1, 3]
    assert directories[1].is_dir() and not directories[2].exists() and directories[3].is_dir()
    assert "optimizer" not in torch.load(directories[1] / STATE_FILE, weights_only=True)
    assert "optimizer" in torch.load(directories[3] / STATE_FILE, weights_only=True)
