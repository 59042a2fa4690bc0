"""Suggested answers from model scores or judge verdicts, with a confidence from 0 (a coin flip) to 1 (sure).

Pure arithmetic (no torch, no Django): the suggestions job (workers/suggesting.py) calls it with a reward model's
scores or a judge's probabilities and stores what it returns.

- Tiers from a reward model: responses by score, best first, equal scores one tier. The confidence is that of the
  closest two adjacent tiers under Bradley–Terry, the model a reward model is trained with: P(better beats worse)
  = σ(Δ), mapped onto 0–1 as 2·σ(|Δ|) − 1; any tie makes it 0.
- A judge's pair verdict: the judge saw the pair in both orders; its preference stands only when both orders
  prefer the same response. Otherwise the position decided (`order_decided`) and the pair is a tie with confidence 0.
- Tiers from judge verdicts: Copeland scores (standing wins − standing losses), equal scores one tier; the confidence
  is the weakest standing link between adjacent tiers (0 when two adjacent responses have no standing verdict
  between them, or when a tier holds a tie).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value)) if value >= 0 else math.exp(value) / (1.0 + math.exp(value))


def confidence_of_probability(probability: float) -> float:
    """How far a probability of "better" is from a coin flip, 0 to 1."""
    return min(1.0, abs(2.0 * probability - 1.0))


@dataclass(frozen=True)
class SuggestedTiers:
    tiers: list[list]
    confidence: float


def tiers_by_score(scores: Mapping[Key, float]) -> SuggestedTiers:
    """Tiers of keys by score, best first (equal scores one tier; keys in a tier in the order given)."""
    if not scores:
        raise ValueError("no scores to rank")
    ordered = sorted(scores.items(), key=lambda item: -item[1])
    tiers: list[list] = []
    tier_scores: list[float] = []
    for key, score in ordered:
        if tier_scores and score == tier_scores[-1]:
            tiers[-1].append(key)
        else:
            tiers.append([key])
            tier_scores.append(score)
    if len(tiers) < len(scores):
        return SuggestedTiers(tiers, 0.0)
    closest = min(upper - lower for upper, lower in zip(tier_scores, tier_scores[1:], strict=False))
    return SuggestedTiers(tiers, confidence_of_probability(sigmoid(closest)))


@dataclass(frozen=True)
class PairVerdict:
    """A judge's verdict on responses x and y, seen as A then B (x first) and as A then B (y first)."""

    # 1: x is better, -1: y is better, 0: no standing preference
    winner: int
    confidence: float
    # the two orders preferred different responses: the position, not the content, decided
    order_decided: bool


def pair_verdict(x_shown_first: float, y_shown_first: float) -> PairVerdict:
    """From P(the judge answers A) when x is shown as A and when y is shown as A."""
    x_better_first, x_better_second = x_shown_first, 1.0 - y_shown_first
    first, second = _side(x_better_first), _side(x_better_second)
    if first != 0 and first == second:
        confidence = min(confidence_of_probability(x_better_first), confidence_of_probability(x_better_second))
        return PairVerdict(first, confidence, order_decided=False)
    return PairVerdict(0, 0.0, order_decided=first != 0 and second != 0)


def _side(probability_x_better: float) -> int:
    return 1 if probability_x_better > 0.5 else -1 if probability_x_better < 0.5 else 0


def tiers_by_verdicts(keys: Sequence[Key], verdicts: Mapping[tuple[Key, Key], PairVerdict]) -> SuggestedTiers:
    """Copeland tiers from every pair's verdict (`verdicts[(x, y)]` for x before y in `keys`)."""
    if len(keys) < 2:
        raise ValueError("a ranking needs two responses or more")
    wins = {key: 0 for key in keys}
    beats: dict[tuple[Key, Key], float] = {}
    for (x, y), verdict in verdicts.items():
        if verdict.winner:
            better, worse = (x, y) if verdict.winner > 0 else (y, x)
            wins[better] += 1
            wins[worse] -= 1
            beats[(better, worse)] = verdict.confidence
    ranked = tiers_by_score({key: float(wins[key]) for key in keys}).tiers
    if len(ranked) < len(keys):
        return SuggestedTiers(ranked, 0.0)
    links = [beats.get((upper[0], lower[0]), 0.0) for upper, lower in zip(ranked, ranked[1:], strict=False)]
    return SuggestedTiers(ranked, min(links))


def thumb_threshold(labelled: Sequence[tuple[float, bool]], scores: Sequence[float]) -> float:
    """The score above which a response is suggested up: the cut that best separates the humans' ups and downs
    (`labelled`: score, up), when the humans gave both; else the median of `scores`."""
    ups = [score for score, up in labelled if up]
    downs = [score for score, up in labelled if not up]
    if not ups or not downs:
        ordered = sorted(scores)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    candidates = sorted({score for score, _ in labelled})
    cuts = [(low + high) / 2 for low, high in zip(candidates, candidates[1:], strict=False)] or candidates
    return max(cuts, key=lambda cut: (sum(s > cut for s in ups) + sum(s <= cut for s in downs), -abs(cut)))


def thumb_suggestion(score: float, threshold: float) -> tuple[int, float]:
    """Up (1) above the threshold, else down (0); confidence 2·σ(|score − threshold|) − 1."""
    return int(score > threshold), confidence_of_probability(sigmoid(abs(score - threshold)))


def rating_suggestion(score: float, scores: Sequence[float], *, least: int, most: int) -> tuple[int, float]:
    """The score's quantile among `scores` (0: the lowest, 1: the highest) placed on the scale least..most; the
    confidence is 1 on a scale point and 0 halfway between two."""
    ordered = sorted(scores)
    if len(ordered) < 2:
        return round((least + most) / 2), 0.0
    below = sum(s < score for s in ordered)
    equal = sum(s == score for s in ordered)
    quantile = (below + (equal - 1) / 2) / (len(ordered) - 1)
    position = quantile * (most - least)
    nearest = round(position)
    return least + nearest, max(0.0, 1.0 - 2.0 * abs(position - nearest))
