import math

import pytest

from trainer.algorithms.sft import train
from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.loop import TrainingDiverged
from trainer.sink import MemorySink


def test_nan_loss_stops_the_run_naming_metric_and_step_and_is_logged(tiny_model, tmp_path):
    config = config_from_dict(
        "sft",
        {"model": tiny_model, "output_dir": str(tmp_path), "max_steps": 5, "batch_size": 4, "log_every": 10,
         "debug_nan_at_step": 3},
    )
    sink = MemorySink()
    with pytest.raises(TrainingDiverged, match=r"^loss is NaN at step 3$"):
        train(config, arithmetic.sft_rows(1, "train", 20), sink)
    assert list(sink.metrics) == [3]
    assert math.isnan(sink.metrics[3]["loss"])
