"""Gold items' rules, free of the database: a gold answer written in the mode's own terms, and how much of an
answer agrees with a gold answer.

An answer is judged decision by decision, and an annotator's accuracy pools the decisions of their gold answers:
- ranking and pairwise: every two responses of the item are one decision (better, worse or tied), matched when the
  answer puts them the same way as the gold (so a tie in the gold is matched only by a tie); pairwise has one;
- thumbs: every response's thumb is one decision, matched when equal;
- ratings: every response's rating on every aspect is one decision, matched when within ±1 of the gold's value
  (`RATING_TOLERANCE`): a neighbouring value on the scale is a difference of taste, two steps away is not.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from django.core.exceptions import ValidationError

from webapp.annotation.agreement import positions
from webapp.annotation.modes.base import Labels, Tiers, response_letter

RATING_TOLERANCE = 1.0
PAIRWISE_CHOICES = ("A", "B", "tie")
_RESPONSE_NAME = re.compile(r"^(?:[A-Z]|R[1-9][0-9]*)$")


@dataclass(frozen=True)
class Decisions:
    """How many of a gold answer's decisions an answer matched."""

    matched: int
    total: int


def _response_by_name(name: str, responses: Sequence[int]) -> int:
    """`responses` in the item page's order (R1 first, also called A): the id named "B" or "R2"."""
    index = int(name[1:]) - 1 if name.startswith("R") and len(name) > 1 else ord(name) - ord("A")
    if not 0 <= index < len(responses):
        raise ValidationError(f"order: {name} is not a response of this item (it has {len(responses)}: "
                              f"{', '.join(response_letter(i) for i in range(len(responses)))})")
    return responses[index]


def tiers_from_order(order: str, responses: Sequence[int]) -> Tiers:
    """An order such as "B > A = C" (best first, "=" ties, letters or R-numbers of the item page) as tiers of
    response ids; every response of the item named once."""
    if not order.strip():
        raise ValidationError("order: write the responses best first, e.g. “B > A = C”")
    tiers: Tiers = []
    for tier_text in order.upper().split(">"):
        names = [name.strip() for name in tier_text.split("=")]
        if not all(names):
            raise ValidationError(f"order: {order.strip()!r} has an empty place; write e.g. “B > A = C”")
        if bad := [name for name in names if not _RESPONSE_NAME.match(name)]:
            raise ValidationError(f"order: {bad[0][:20]!r} is not a response letter (A, B, …)")
        tiers.append([_response_by_name(name, responses) for name in names])
    return tiers_check(tiers, responses)


def tiers_from_choice(choice: str, responses: Sequence[int]) -> Tiers:
    """A pairwise gold answer: A or B better, or a tie."""
    if len(responses) != 2:
        raise ValidationError(f"choice: a pairwise item compares two responses; this one has {len(responses)}")
    first, second = responses
    tiers = {"A": [[first], [second]], "B": [[second], [first]], "tie": [[first, second]]}.get(choice)
    if tiers is None:
        raise ValidationError("choice: A, B or tie")
    return tiers


def tiers_check(tiers: Tiers, responses: Sequence[int]) -> Tiers:
    """Tiers naming every response of the item once, empty tiers dropped."""
    cleaned = [[int(response) for response in tier] for tier in tiers if tier]
    named = [response for tier in cleaned for response in tier]
    if len(named) != len(set(named)):
        raise ValidationError("order: a response is named twice")
    if missing := [response_letter(i) for i, response in enumerate(responses) if response not in named]:
        raise ValidationError(f"order: place every response; {', '.join(missing)} not placed")
    if set(named) - set(responses):
        raise ValidationError("order: names responses that are not this item's")
    return cleaned


def tier_decisions(gold: Tiers, answer: Tiers) -> Decisions:
    """Every two responses of the gold: matched when the answer orders them the same way (or ties them, as the
    gold does)."""
    gold_at, answer_at = positions(gold), positions(answer)
    matched = total = 0
    for first, second in combinations(sorted(gold_at), 2):
        total += 1
        if first in answer_at and second in answer_at:
            gold_sign = (gold_at[first] > gold_at[second]) - (gold_at[first] < gold_at[second])
            answer_sign = (answer_at[first] > answer_at[second]) - (answer_at[first] < answer_at[second])
            matched += gold_sign == answer_sign
    return Decisions(matched=matched, total=total)


def label_decisions(gold: Labels, answer: Labels, *, tolerance: float) -> Decisions:
    """Every label of the gold (a response's thumb, or its rating on an aspect): matched when the answer's is within
    `tolerance` of it (0 for thumbs)."""
    matched = total = 0
    for response, given in gold.items():
        for aspect, value in given.items():
            total += 1
            answered = answer.get(response, {}).get(aspect)
            matched += answered is not None and abs(answered - value) <= tolerance
    return Decisions(matched=matched, total=total)


def labels_from_json(stored: dict) -> Labels:
    """GoldAnswer.labels as stored (JSON keys are strings) back to {response id: {aspect: value}}."""
    return {int(response): {aspect: float(value) for aspect, value in given.items()} for response, given in stored.items()}
