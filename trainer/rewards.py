"""Rewards for GRPO and PPO: a registry of rule-based functions, combined by weights with an optional scorer (a
reward model: trainer.algorithms.rollout.RewardModelScorer).

Importing this module must not import torch: the web process lists `REWARD_FUNCTIONS` names and help texts for
its launch form, and the configs check their reward weights against it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.formats.answers import answers_match, extract_answer


@dataclass(frozen=True)
class RewardInput:
    """One completion to score. Lengths are in tokens; max_length is the run's max_new_tokens. The prompt is
    text or a conversation (a list of messages). `answer_fallback_last_number` is the run's option of that name:
    answer_match then reads the last number of a completion that has no answer tag or \\boxed{}."""

    prompt: str | list[dict]
    completion: str
    answer: str | None
    length: int
    truncated: bool
    max_length: int
    overlong_buffer: int
    answer_fallback_last_number: bool = False


RewardFunction = Callable[[RewardInput], float]

_NO_TAG = r"(?:(?!</?(?:think|answer)>).)*"
_THINK_ANSWER = re.compile(rf"\s*<think>{_NO_TAG}</think>\s*<answer>{_NO_TAG}</answer>\s*", re.DOTALL)
_FORMAT_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def answer_match(sample: RewardInput) -> float:
    if sample.answer is None:
        raise ValueError("reward 'answer_match' needs an 'answer' in every data row; this prompt has none: "
                         f"{sample.prompt[:80]!r}")
    predicted = extract_answer(sample.completion, fallback_last_number=sample.answer_fallback_last_number)
    return 1.0 if answers_match(predicted, sample.answer) else 0.0


def format_tags(sample: RewardInput) -> float:
    # Partial credit per tag used exactly once lets a model that is almost right see a gradient.
    text = sample.completion
    score = sum(0.2 for tag in _FORMAT_TAGS if text.count(tag) == 1)
    if _THINK_ANSWER.fullmatch(text):
        score += 0.2
    return score


def length_penalty(sample: RewardInput) -> float:
    return -sample.length / sample.max_length


def soft_overlong_punishment(length: int, *, max_length: int, cache_length: int) -> float:
    """DAPO's R_length, the scalar form of trainer.algorithms.losses.soft_overlong_penalty: 0 up to
    max_length - cache_length, then falling linearly to -1 at max_length, -1 beyond."""
    expected = max_length - cache_length
    if length <= expected:
        return 0.0
    if length <= max_length:
        return (expected - length) / cache_length
    return -1.0


def soft_overlong(sample: RewardInput) -> float:
    return soft_overlong_punishment(sample.length, max_length=sample.max_length, cache_length=sample.overlong_buffer)


REWARD_FUNCTIONS: dict[str, tuple[RewardFunction, str]] = {
    "answer_match": (
        answer_match,
        "1 when the final answer (the last <answer>...</answer>, else the last \\boxed{...}) equals the row's "
        "answer numerically, else 0; 0 when the completion has neither (unless answer_fallback_last_number).",
    ),
    "format_tags": (
        format_tags,
        "Up to 1 for the <think>...</think><answer>...</answer> format: 0.2 per tag used exactly once, "
        "0.2 more when the whole completion has exactly that shape.",
    ),
    "length_penalty": (
        length_penalty,
        "-(completion tokens / max new tokens), in [-1, 0]: prefers shorter completions.",
    ),
    "soft_overlong": (
        soft_overlong,
        "DAPO soft overlong punishment: 0 up to max new tokens minus the overlong buffer, then linear down to "
        "-1 at max new tokens.",
    ),
}

# The row fields each reward reads, beyond the prompt and completion every reward has: a launch is refused when its
# data lacks them (webapp.experiments.data_sources.data_source_rewards_check), rather than failing at the first step.
REWARD_ROW_FIELDS: dict[str, tuple[str, ...]] = {"answer_match": ("answer",)}


def reward_row_fields(weights: Mapping[str, float]) -> dict[str, tuple[str, ...]]:
    """{reward: the row fields it needs} for the rewards named in `weights` that need any (a weight of 0 too: the
    Rewarder calls every function it is given)."""
    return {name: REWARD_ROW_FIELDS[name] for name in weights if REWARD_ROW_FIELDS.get(name)}


def row_has_field(row: Mapping[str, Any], field: str) -> bool:
    """A row holds `field` when its value is there and not empty (an empty answer is no answer)."""
    value = row.get(field)
    return value is not None and str(value).strip() != ""


REWARD_MODEL = "reward_model"  # the name a learned scorer's values are logged under: reward/reward_model


def check_reward_weights(weights: Mapping[str, float], *, field: str = "rewards") -> None:
    """Raise ValueError naming the field when a weight refers to no registered function or is not a number."""
    for name, weight in weights.items():
        if name not in REWARD_FUNCTIONS:
            known = ", ".join(sorted(REWARD_FUNCTIONS))
            raise ValueError(f"{field}: unknown reward function {name!r}; known: {known}")
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise ValueError(f"{field}.{name}: weight must be a number, got {weight!r}")
        if not math.isfinite(weight):
            raise ValueError(f"{field}.{name}: weight must be a finite number, got {weight!r}")


@dataclass
class RewardBreakdown:
    total: list[float]
    per_function: dict[str, list[float]]  # unweighted values, logged as reward/<name>


class Rewarder:
    """Weighted sum of the named rule-based functions and, optionally, a reward model."""

    def __init__(
        self,
        weights: Mapping[str, float],
        *,
        scorer: Callable[[Sequence[str], Sequence[str]], list[float]] | None = None,
        scorer_weight: float = 1.0,
    ) -> None:
        check_reward_weights(weights)
        if not weights and scorer is None:
            raise ValueError("rewards: give at least one reward function or a reward model")
        self.weights = dict(weights)
        self.scorer = scorer
        self.scorer_weight = scorer_weight

    def __call__(self, samples: Sequence[RewardInput]) -> RewardBreakdown:
        per_function: dict[str, list[float]] = {
            name: [REWARD_FUNCTIONS[name][0](sample) for sample in samples] for name in self.weights
        }
        total = [
            sum(self.weights[name] * per_function[name][i] for name in self.weights) for i in range(len(samples))
        ]
        if self.scorer is not None:
            scores = self.scorer([s.prompt for s in samples], [s.completion for s in samples])
            per_function[REWARD_MODEL] = scores
            total = [t + self.scorer_weight * score for t, score in zip(total, scores, strict=True)]
        return RewardBreakdown(total=total, per_function=per_function)


def reward_inputs(
    prompts: Sequence[str],
    completions: Sequence[str],
    answers: Sequence[Any],
    *,
    lengths: Sequence[int],
    truncated: Sequence[bool],
    max_length: int,
    overlong_buffer: int,
    answer_fallback_last_number: bool = False,
) -> list[RewardInput]:
    """Zip per-completion columns into RewardInputs (answers of None stay None, others become str)."""
    return [
        RewardInput(
            prompt=prompt,
            completion=completion,
            answer=None if answer is None else str(answer),
            length=int(length),
            truncated=bool(cut),
            max_length=max_length,
            overlong_buffer=overlong_buffer,
            answer_fallback_last_number=answer_fallback_last_number,
        )
        for prompt, completion, answer, length, cut in zip(
            prompts, completions, answers, lengths, truncated, strict=True
        )
    ]
