"""TRL's and transformers' metric names onto Preflab's (docs/architecture.md, metric names); unknown names pass unchanged."""

import pytest
from preflab_client import preflab_name


@pytest.mark.parametrize(("logged", "shown"), [
    # GRPO (TRL 1.16 GRPOTrainer)
    ("reward", "reward/mean"), ("reward_std", "reward/std"), ("rewards/answer_match/mean", "reward/answer_match"),
    ("rewards/answer_match/std", "reward/answer_match/std"), ("completions/mean_length", "completion/mean_length"),
    ("completions/clipped_ratio", "completion/clipped_ratio"), ("clip_ratio/low_mean", "clip_ratio/low"),
    ("clip_ratio/high_mean", "clip_ratio/high"), ("step_time", "time/step_s"), ("kl", "kl"), ("entropy", "entropy"),
    # DPO (TRL 1.16 DPOTrainer)
    ("rewards/chosen", "rewards/chosen"), ("rewards/rejected", "rewards/rejected"),
    ("rewards/accuracies", "rewards/accuracy"), ("rewards/margins", "rewards/margin"), ("logps/chosen", "logps/chosen"),
    # transformers
    ("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "lr"), ("epoch", "epoch"),
    ("eval_loss", "eval/loss"), ("eval_reward", "eval/reward/mean"), ("eval_rewards/accuracies", "eval/rewards/accuracy"),
    # unknown: unchanged
    ("frac_reward_zero_std", "frac_reward_zero_std"), ("my/custom", "my/custom"),
])
def test_logged_names_map_onto_preflabs(logged, shown):
    assert preflab_name(logged) == shown
