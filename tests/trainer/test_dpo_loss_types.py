import math

import pytest

from trainer.algorithms.dpo import train
from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink


def _first_step(tiny_model, tmp_path, **fields) -> dict[str, float]:
    config = config_from_dict(
        "dpo", {"model": tiny_model, "output_dir": str(tmp_path), "max_steps": 1, "batch_size": 8, **fields}
    )
    sink = MemorySink()
    train(config, arithmetic.preference_rows(2, "train", 8), sink)
    return sink.metrics[1]


@pytest.mark.parametrize(
    ("fields", "expected_loss"),
    [
        ({"loss_type": "sigmoid"}, math.log(2)),
        ({"loss_type": "sigmoid", "label_smoothing": 0.2}, math.log(2)),
        ({"loss_type": "hinge"}, 1.0),
        ({"loss_type": "ipo", "beta": 0.5}, 1.0),
    ],
)
def test_first_step_loss_of_each_type_where_policy_equals_reference(fields, expected_loss, tiny_model, tmp_path):
    # at step 1 the policy is the reference, so D = 0: sigmoid log 2, hinge 1, ipo (1 / (2 beta))^2
    metrics = _first_step(tiny_model, tmp_path, **fields)
    assert metrics["loss"] == pytest.approx(expected_loss, abs=1e-5)
    assert metrics["rewards/margin"] == pytest.approx(0.0, abs=1e-5)


def test_ipo_uses_length_averaged_log_probs(tiny_model, tmp_path):
    summed = _first_step(tiny_model, tmp_path / "sigmoid", loss_type="sigmoid")["logps/chosen"]
    averaged = _first_step(tiny_model, tmp_path / "ipo", loss_type="ipo")["logps/chosen"]
    assert summed < averaged < 0
    assert averaged * 10 > summed  # completions are longer than 10 tokens
