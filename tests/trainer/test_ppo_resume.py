"""PPO stopped and resumed from its checkpoint (policy, critic, both optimizer groups, RNG) matches an
uninterrupted run."""

import pytest

from trainer.algorithms.ppo import train
from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink

TIMING = ("time/step_s", "throughput/tokens_per_s", "time/generation_s", "time/scoring_s", "time/backward_s")
STEPS, STOP_AT = 4, 2


def _run(model, output_dir, sink, **overrides):
    config = config_from_dict("ppo", {
        "model": model, "output_dir": str(output_dir), "lr": 1e-3, "max_steps": STEPS, "batch_size": 4,
        "ppo_epochs": 2, "num_mini_batches": 2, "max_new_tokens": 6, "max_length": 40, "max_prompt_length": 24,
        "entropy_coef": 0.01, **overrides,
    })
    return train(config, arithmetic.sft_rows(1, "train", 16), sink)


def test_stopped_and_resumed_ppo_matches_uninterrupted_run(tiny_model, tmp_path):
    uninterrupted = MemorySink()
    _run(tiny_model, tmp_path / "whole", uninterrupted)
    stopped = _run(tiny_model, tmp_path / "split", MemorySink(stop_at_step=STOP_AT))
    assert stopped.stopped and stopped.step == STOP_AT
    resumed = MemorySink()
    _run(tiny_model, tmp_path / "split", resumed, resume_from=stopped.checkpoint)
    for step in range(STOP_AT + 1, STEPS + 1):
        expected, actual = uninterrupted.metrics[step], resumed.metrics[step]
        for name in expected.keys() - set(TIMING):
            assert actual[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), (step, name)
