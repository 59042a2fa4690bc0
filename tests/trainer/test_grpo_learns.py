"""Acceptance: from the shared SFT checkpoint of the tiny arithmetic model, GRPO with the exact-answer
reward and the dapo preset each raise held-out accuracy by at least 10 points.

Held-out accuracy is avg@32 on the level-1 test split (the DAPO paper's avg@k: exact-answer accuracy over
32 completions sampled per prompt at the training temperature); greedy accuracy is also checked not to fall.
The SFT checkpoint is already right on most held-out prompts when decoding greedily, so sampled accuracy is
where a policy-gradient method has room to show, as in the paper.
"""

import pytest
import torch

from trainer.algorithms.evaluation import (
    answer_accuracy,
    format_rate,
    generation_accuracy,
    sampled_completions,
)
from trainer.algorithms.grpo import train
from trainer.builtin_datasets import arithmetic
from trainer.config import GRPOConfig
from trainer.modeling.models import load_policy, load_tokenizer
from trainer.sink import MemorySink

MAX_NEW_TOKENS = 28
# DAPO keeps only informative groups and drops the KL anchor, so each of its steps moves the policy further:
# at GRPO's 8e-4 it overshoots (greedy accuracy falls); at 4e-4 it needs more steps to go as far.
LEARNING_RATES = {"grpo": 8e-4, "dapo": 4e-4}
STEPS = {"grpo": 300, "dapo": 400}
# Measured (seed 0, one thread): GRPO +21.7 points (seed 1: +18.8); dapo +25.6 (at 300 steps +14.4, +16.0 and
# +15.8 for seeds 0-2). The +10 asked leaves room for sampling noise (about 2 points per avg@32 estimate).
REQUIRED_GAIN = 0.10
# Strict answer_match gives 0 without an <answer> tag, so a policy that drops the format is not paid for it (in
# the demo, with the old last-number fallback, dapo shrank completions to `<think>8 + 9 = 17</think><`). Share
# of the sampled held-out completions with an answer tag, measured (seed 0): SFT start 0.952, after GRPO 0.996,
# after dapo 0.929 on one machine and 0.890 on another (an AMD EPYC: other kernels, another trajectory). The
# misses were noise at T=1 running into max_new_tokens, not a shortened format; with answer_fallback_last_number
# the README recipe's dapo run fell to 0.233. The bound sits between the two.
REQUIRED_FORMAT_RATE = 0.80
COMMON = {
    "warmup_steps": 5,
    "batch_size": 16,
    "group_size": 8,
    "max_new_tokens": MAX_NEW_TOKENS,
    "overlong_buffer": 6,
    "max_length": 64,
    "max_prompt_length": 32,
    "seed": 0,
}


def _held_out(checkpoint: str) -> tuple[float, float, float]:
    """(avg@32, greedy accuracy, format rate of the 32 sampled completions per prompt) on the test split."""
    model, tokenizer = load_policy(checkpoint, device=torch.device("cpu")), load_tokenizer(checkpoint)
    rows = arithmetic.sft_rows(1, "test")
    torch.manual_seed(1234)
    sampled = sampled_completions(model, tokenizer, rows, samples_per_prompt=32, temperature=1.0,
                                  max_new_tokens=MAX_NEW_TOKENS)
    average = answer_accuracy(sampled, [row["answer"] for row in rows for _ in range(32)])
    return average, generation_accuracy(model, tokenizer, rows, max_new_tokens=MAX_NEW_TOKENS), format_rate(sampled)


@pytest.fixture(scope="module")
def start(sft_run) -> tuple[str, float, float, float]:
    checkpoint = sft_run[0]
    return (checkpoint, *_held_out(checkpoint))


# DAPO learning takes 1.5 minutes: its parts (dynamic sampling, clip-higher, overlong shaping) are tested on their own
@pytest.mark.parametrize("preset", ["grpo", pytest.param("dapo", marks=pytest.mark.slow)])
def test_rl_raises_held_out_accuracy(start, preset, tmp_path):
    checkpoint, average_before, greedy_before, format_before = start
    fields = {
        "model": checkpoint,
        "output_dir": str(tmp_path),
        "lr": LEARNING_RATES[preset],
        "max_steps": STEPS[preset],
        **COMMON,
    }
    config = GRPOConfig.dapo(**fields) if preset == "dapo" else GRPOConfig(**fields)
    sink = MemorySink()
    result = train(config, arithmetic.sft_rows(1, "train"), sink)

    average_after, greedy_after, format_after = _held_out(result.checkpoint)
    last = sink.metrics[max(sink.metrics)]
    print(f"{preset}: held-out avg@32 {average_before:.3f} -> {average_after:.3f}, "
          f"greedy {greedy_before:.3f} -> {greedy_after:.3f}, format rate of the sampled completions "
          f"{format_before:.3f} -> {format_after:.3f} (last step's completion/format_rate "
          f"{last['completion/format_rate']:.3f})")
    assert format_after >= REQUIRED_FORMAT_RATE
    assert average_after >= average_before + REQUIRED_GAIN
    assert greedy_after >= greedy_before - 1 / 15  # 15 held-out prompts: at most one may flip
    rewards = [sink.metrics[step]["reward/mean"] for step in sorted(sink.metrics)]
    assert sum(rewards[-20:]) / 20 > sum(rewards[:20]) / 20
