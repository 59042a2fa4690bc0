import math

import pytest

from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.loop import DataOrder, lr_factor
from trainer.sink import MemorySink


def test_warmup_then_linear_and_cosine_decay():
    assert [lr_factor(s, warmup=2, total=6, kind="linear") for s in range(6)] == [0.0, 0.5, 1.0, 0.75, 0.5, 0.25]
    assert lr_factor(2, warmup=2, total=6, kind="cosine") == 1.0
    assert math.isclose(lr_factor(4, warmup=2, total=6, kind="cosine"), 0.5)
    assert lr_factor(5, warmup=0, total=6, kind="constant") == 1.0


def test_data_order_covers_every_example_each_epoch_and_resumes():
    order = DataOrder(10, seed=1)
    first_epoch = order.next_batch(4) + order.next_batch(4) + order.next_batch(2)
    assert sorted(first_epoch) == list(range(10))
    saved = order.state_dict()
    expected = order.next_batch(7)
    again = DataOrder(10, seed=1)
    again.load_state_dict(saved)
    assert again.next_batch(7) == expected
    assert DataOrder(10, seed=2).next_batch(10) != DataOrder(10, seed=1).next_batch(10)


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_gradient_accumulation_gives_the_same_step_as_one_big_batch(kind, tiny_model, tmp_path):
    import importlib

    rows = arithmetic.sft_rows(1, "train", 16) if kind == "sft" else arithmetic.preference_rows(1, "train", 16)
    losses = []
    for accumulation in (1, 4):
        config = config_from_dict(
            kind,
            {"model": tiny_model, "output_dir": str(tmp_path / str(accumulation)), "max_steps": 2, "batch_size": 8,
             "grad_accum_steps": accumulation, "lr": 1e-3},
        )
        sink = MemorySink()
        importlib.import_module(f"trainer.algorithms.{kind}").train(config, rows, sink)
        losses.append((sink.metrics[1]["loss"], sink.metrics[2]["loss"], sink.metrics[2]["grad_norm"]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_same_seed_same_numbers_other_seed_other_numbers(tiny_model, tmp_path):
    from trainer.algorithms.reward_model import train

    def final_loss(seed: int) -> float:
        config = config_from_dict(
            "reward_model",
            {"model": tiny_model, "output_dir": str(tmp_path / str(seed)), "max_steps": 3, "batch_size": 8, "seed": seed},
        )
        return train(config, arithmetic.preference_rows(1, "train", 30), MemorySink()).metrics["loss"]

    assert final_loss(0) == final_loss(0)
    assert final_loss(0) != final_loss(1)
