"""The one list of run kinds: what each trains on, which config it takes, where its loop lives.

Adding a kind: its config class (trainer/config.py), its module with `train(config, data, sink, *,
eval_data=None)`, one entry in KINDS below, and the migration `manage.py makemigrations
experiments` then writes for the web's Run.kind choices, which are built from KINDS.

No torch at import: the web process reads this list to build its forms; the train function is imported
only when a run starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal

from trainer.config import (
    BaseConfig,
    ConfigError,
    DPOConfig,
    GRPOConfig,
    PPOConfig,
    RewardModelConfig,
    SFTConfig,
)

RowShape = Literal["pairs", "completions", "prompts"]
# What a run's checkpoints are: a causal LM (a policy) or a sequence classifier (a reward model).
Produces = Literal["causal_lm", "classifier"]
ROW_FIELDS: dict[RowShape, tuple[str, ...]] = {
    "pairs": ("prompt", "chosen", "rejected"),
    "completions": ("prompt", "completion"),
    "prompts": ("prompt",),
}


@dataclass(frozen=True)
class RunKind:
    name: str
    label: str
    config_class: type[BaseConfig]
    train_module: str
    rows: RowShape
    # the number a run is summarised by in the run list: the first of these the run has logged
    key_metrics: tuple[str, ...]
    produces: Produces = "causal_lm"

    @property
    def online(self) -> bool:
        """Online kinds sample their own completions from prompts; offline kinds read them from the rows."""
        return self.rows == "prompts"

    @property
    def row_fields(self) -> tuple[str, ...]:
        """The text fields every training row must have."""
        return ROW_FIELDS[self.rows]

    def train_function(self) -> Callable[..., Any]:
        return import_module(self.train_module).train


KINDS: dict[str, RunKind] = {
    kind.name: kind
    for kind in (
        RunKind("reward_model", "reward model", RewardModelConfig, "trainer.reward_model", "pairs",
                ("eval/accuracy", "rewards/accuracy", "loss"), produces="classifier"),
        RunKind("sft", "SFT", SFTConfig, "trainer.sft", "completions", ("eval/accuracy", "loss")),
        RunKind("dpo", "DPO", DPOConfig, "trainer.dpo", "pairs", ("eval/accuracy", "rewards/accuracy", "loss")),
        RunKind("grpo", "GRPO", GRPOConfig, "trainer.grpo", "prompts", ("reward/mean", "loss")),
        RunKind("ppo", "PPO", PPOConfig, "trainer.ppo", "prompts", ("reward/mean", "loss")),
    )
}


class UnknownRunKind(ConfigError):
    def __init__(self, name: object) -> None:
        super().__init__("kind", f"unknown run kind {name!r}; choose one of {', '.join(KINDS)}")


def run_kind(name: object) -> RunKind:
    """The registered kind called `name`; UnknownRunKind (a ConfigError on the field "kind") otherwise."""
    if not isinstance(name, str) or name not in KINDS:
        raise UnknownRunKind(name)
    return KINDS[name]
