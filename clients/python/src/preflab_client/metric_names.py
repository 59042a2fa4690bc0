"""transformers' and TRL's metric names onto Preflab's (the dashboards' names), so that a run logged from a TRL
trainer lands on the same charts as Preflab's own runs. Names Preflab has no word for pass through unchanged.

What TRL 1.16 logs (its trainers' `_metrics`): GRPO `reward`, `reward_std`, `rewards/<function>/mean|std`,
`completions/mean_length`, `completions/clipped_ratio`, ..., `kl`, `entropy`, `clip_ratio/low_mean`,
`clip_ratio/high_mean`, `clip_ratio/region_mean`, `step_time`, `num_tokens`; DPO `rewards/chosen`,
`rewards/rejected`, `rewards/accuracies`, `rewards/margins`, `logps/*`, `logits/*`; transformers adds `loss`,
`grad_norm`, `learning_rate`, `epoch`, and `eval_`-prefixed names for evaluations.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

RENAMED = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "learning_rate": "lr",
    "completions/mean_length": "completion/mean_length",
    "completions/clipped_ratio": "completion/clipped_ratio",
    "clip_ratio/low_mean": "clip_ratio/low",
    "clip_ratio/high_mean": "clip_ratio/high",
    "rewards/accuracies": "rewards/accuracy",
    "rewards/margins": "rewards/margin",
    "step_time": "time/step_s",
}
_REWARD_FUNCTION = re.compile(r"^rewards/(?P<function>.+)/(?P<statistic>mean|std)$")
EVAL_PREFIX = "eval_"


def preflab_name(name: str) -> str:
    """e.g. "reward" → "reward/mean", "rewards/answer_match/mean" → "reward/answer_match",
    "eval_loss" → "eval/loss"; unknown names unchanged."""
    if name.startswith(EVAL_PREFIX):
        return "eval/" + preflab_name(name[len(EVAL_PREFIX):])
    if name in RENAMED:
        return RENAMED[name]
    match = _REWARD_FUNCTION.match(name)
    if match:
        suffix = "" if match["statistic"] == "mean" else "/std"
        return f"reward/{match['function']}{suffix}"
    return name


def preflab_metrics(logs: Mapping[str, Any]) -> dict[str, Any]:
    return {preflab_name(name): value for name, value in logs.items()}
