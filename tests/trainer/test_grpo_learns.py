"""Acceptance: from the shared SFT checkpoint of the tiny arithmetic model, GRPO with the exact-answer
reward, and the dapo preset, raise held-out accuracy by at least 10 points.

Held-out accuracy is avg@32 on the level-1 test split (the DAPO paper's avg@k: exact-answer accuracy over
32 completions sampled per prompt at the training temperature); greedy accuracy is also checked not to fall.
The SFT checkpoint is already right on most held-out prompts when decoding greedily, so sampled accuracy is
where a policy-gradient method has room to show, as in the paper.
"""

import pytest
import torch

from trainer.config import GRPOConfig
from trainer.evaluation import generation_accuracy
from trainer.grpo import sampled_accuracy, train
from trainer.models import load_policy, load_tokenizer
from trainer.sink import MemorySink
from trainer.tasks import arithmetic

MAX_NEW_TOKENS = 28
COMMON = {
    "lr": 8e-4,
    "warmup_steps": 5,
    "max_steps": 200,
    "batch_size": 16,
    "group_size": 8,
    "max_new_tokens": MAX_NEW_TOKENS,
    "overlong_buffer": 6,
    "max_length": 64,
    "max_prompt_length": 32,
    "seed": 0,
}


def _held_out(checkpoint: str) -> tuple[float, float]:
    model, tokenizer = load_policy(checkpoint, device=torch.device("cpu")), load_tokenizer(checkpoint)
    rows = arithmetic.sft_rows(1, "test")
    torch.manual_seed(1234)
    average = sampled_accuracy(model, tokenizer, rows, samples_per_prompt=32, temperature=1.0,
                               max_new_tokens=MAX_NEW_TOKENS)
    return average, generation_accuracy(model, tokenizer, rows, max_new_tokens=MAX_NEW_TOKENS)


@pytest.fixture(scope="module")
def start(sft_run) -> tuple[str, float, float]:
    checkpoint = sft_run[0]
    return (checkpoint, *_held_out(checkpoint))


@pytest.mark.parametrize("preset", ["grpo", "dapo"])
def test_rl_raises_held_out_accuracy_by_ten_points(start, preset, tmp_path):
    checkpoint, average_before, greedy_before = start
    fields = {"model": checkpoint, "output_dir": str(tmp_path), **COMMON}
    config = GRPOConfig.dapo(**fields) if preset == "dapo" else GRPOConfig(**fields)
    sink = MemorySink()
    result = train(config, arithmetic.sft_rows(1, "train"), sink)

    average_after, greedy_after = _held_out(result.checkpoint)
    print(f"{preset}: held-out avg@32 {average_before:.3f} -> {average_after:.3f}, "
          f"greedy {greedy_before:.3f} -> {greedy_after:.3f}")
    assert average_after >= average_before + 0.10
    assert greedy_after >= greedy_before
    rewards = [sink.metrics[step]["reward/mean"] for step in sorted(sink.metrics)]
    assert sum(rewards[-20:]) / 20 > sum(rewards[:20]) / 20
