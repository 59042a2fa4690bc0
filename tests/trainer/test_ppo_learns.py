"""Acceptance: PPO with a critic on the arithmetic task; mean reward rises and the critic's explained
variance becomes positive. Also the critic is checkpointed beside the policy."""

import math
from pathlib import Path

from trainer.algorithms.ppo import CRITIC_DIR, train
from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink

PPO_METRICS = {
    "loss", "reward/mean", "reward/std", "reward/answer_match", "kl", "entropy", "clip_ratio/low",
    "clip_ratio/high", "approx_kl", "value/loss", "value/explained_variance", "advantage/mean",
    "completion/mean_length", "completion/clipped_ratio", "completion/format_rate", "grad_norm", "lr", "throughput/tokens_per_s",
    "time/step_s", "time/generation_s", "time/scoring_s", "time/backward_s",
}


def _mean(values):
    return sum(values) / len(values)


def test_ppo_raises_reward_and_the_critic_explains_returns(sft_run, tmp_path):
    config = config_from_dict("ppo", {
        "model": sft_run[0], "output_dir": str(tmp_path), "lr": 3e-4, "critic_lr": 1e-3, "warmup_steps": 3,
        "max_steps": 60, "batch_size": 64, "ppo_epochs": 2, "num_mini_batches": 2, "max_new_tokens": 24,
        "max_length": 64, "max_prompt_length": 32, "sample_every": 30, "samples_per_log": 2,
    })
    sink = MemorySink()
    result = train(config, arithmetic.sft_rows(1, "train"), sink, eval_data=arithmetic.sft_rows(1, "test"))

    steps = sorted(sink.metrics)
    assert all(sink.metrics[step].keys() >= PPO_METRICS for step in steps)
    assert all(math.isfinite(v) for step in steps for v in sink.metrics[step].values())
    rewards = [sink.metrics[step]["reward/mean"] for step in steps]
    explained = [sink.metrics[step]["value/explained_variance"] for step in steps]
    print(f"reward {_mean(rewards[:15]):.3f} -> {_mean(rewards[-15:]):.3f}; "
          f"explained variance {explained[0]:.3f} -> {_mean(explained[-15:]):.3f}")
    assert _mean(rewards[-15:]) > _mean(rewards[:15])
    assert explained[0] < 0 < _mean(explained[-15:])
    assert "eval/accuracy" in sink.metrics[steps[-1]]
    assert (Path(result.checkpoint) / CRITIC_DIR / "config.json").exists()
    assert [s["step"] for s in sink.samples] == [30, 30, 60, 60]
