"""The one list of run kinds: what each trains on, which config it takes, where its loop lives.

Adding a kind: its config class (trainer/config.py), its module in trainer/algorithms/ with `train(config, data,
sink, *, eval_data=None)`, one entry in KINDS below, and the migration `manage.py makemigrations
experiments` then writes for the web's Run.kind choices, which are built from KINDS.

No torch at import: the web process reads this list to build its forms; the train function is imported
only when a run starts. A config is read by its kind here (`config_from_dict`, the presets):
trainer/config.py holds the classes and their checks and knows no kind.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal

from trainer.config import (
    DAPO,
    BaseConfig,
    ConfigError,
    DPOConfig,
    GRPOConfig,
    KTOConfig,
    PPOConfig,
    Preset,
    RewardModelConfig,
    SFTConfig,
)

RowShape = Literal["pairs", "completions", "prompts", "unpaired"]
# What a run's checkpoints are: a causal LM (a policy) or a sequence classifier (a reward model).
Produces = Literal["causal_lm", "classifier"]
ROW_FIELDS: dict[RowShape, tuple[str, ...]] = {
    "pairs": ("prompt", "chosen", "rejected"),
    "completions": ("prompt", "completion"),
    "prompts": ("prompt",),
    "unpaired": ("prompt", "completion", "label"),
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
        """The fields every training row must have: text (or messages), and an unpaired row's true / false label."""
        return ROW_FIELDS[self.rows]

    def train_function(self) -> Callable[..., Any]:
        return import_module(self.train_module).train


KINDS: dict[str, RunKind] = {
    kind.name: kind
    for kind in (
        RunKind("reward_model", "reward model", RewardModelConfig, "trainer.algorithms.reward_model", "pairs",
                ("eval/accuracy", "rewards/accuracy", "loss"), produces="classifier"),
        RunKind("sft", "SFT", SFTConfig, "trainer.algorithms.sft", "completions", ("eval/accuracy", "loss")),
        RunKind("dpo", "DPO", DPOConfig, "trainer.algorithms.dpo", "pairs", ("eval/accuracy", "rewards/accuracy", "loss")),
        RunKind("kto", "KTO", KTOConfig, "trainer.algorithms.kto", "unpaired", ("eval/accuracy", "rewards/margin", "loss")),
        RunKind("grpo", "GRPO", GRPOConfig, "trainer.algorithms.grpo", "prompts", ("reward/mean", "loss")),
        RunKind("ppo", "PPO", PPOConfig, "trainer.algorithms.ppo", "prompts", ("reward/mean", "loss")),
    )
}


CONFIG_CLASSES: dict[str, type[BaseConfig]] = {name: kind.config_class for name, kind in KINDS.items()}

# The named starting points a kind offers (the launch form's presets, a run file's `preset` key).
PRESETS: dict[str, dict[str, Preset]] = {"grpo": {"dapo": DAPO}}


class UnknownRunKind(ConfigError):
    def __init__(self, name: object) -> None:
        super().__init__("kind", f"unknown run kind {name!r}; choose one of {', '.join(KINDS)}")


def run_kind(name: object) -> RunKind:
    """The registered kind called `name`; UnknownRunKind (a ConfigError on the field "kind") otherwise."""
    if not isinstance(name, str) or name not in KINDS:
        raise UnknownRunKind(name)
    return KINDS[name]


def config_from_dict(kind: str, data: dict[str, Any]) -> BaseConfig:
    """Build and validate the config of run kind `kind`; unknown keys and wrong types are ConfigErrors.

    A `preset` key names a starting point (PRESETS) that the other keys are set on top of."""
    cls = run_kind(kind).config_class
    if "preset" in data:
        data = with_preset(kind, str(data["preset"]), {key: value for key, value in data.items() if key != "preset"})
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(key, f"unknown field {key!r} for {kind}{hint}")
    for f in dataclasses.fields(cls):
        if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f.name, "is required")
    config = cls(**data)
    config.validate()
    return config


def config_kind(config: BaseConfig) -> str:
    for kind, cls in CONFIG_CLASSES.items():
        if type(config) is cls:
            return kind
    raise ConfigError("kind", f"{type(config).__name__} is not a registered run config")


def with_preset(kind: str, name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` on top of preset `name` of run kind `kind`; an unknown preset is a ConfigError naming the choices."""
    presets = PRESETS.get(kind, {})
    if name not in presets:
        choices = f"choose one of {', '.join(presets)}" if presets else f"{kind} has no presets"
        raise ConfigError("preset", f"unknown preset {name!r} for {kind}; {choices}")
    return presets[name].under(run_kind(kind).config_class, fields)
