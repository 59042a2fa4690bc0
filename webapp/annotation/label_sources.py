"""Where an item's label comes from, and how much its annotators agree: the adjudication queue's rule and the
`label_source` of every export and training row. Pure functions over answers (no database).

An item's answers are its non-skipped answers that are not held back, each as tiers of response ids, best first
(`selectors.answers_as_tiers`: a thumbs or ratings answer becomes its responses ordered by their labels), with its
all-bad flag.

- Agreement (`item_agreement`): over every (annotator pair × response pair both ranked), the share of comparisons in
  which the two annotators order the two responses the same way, a tie being its own answer
  (agreement.pairwise_agreement_rate on one item). 1.0: everyone agrees; None: fewer than two answers.
- Votes: each answer votes on each response pair it orders (a tie in it is no vote), as the pair rows are counted by
  the `majority` aggregation (aggregation.py).
- Sources, in this order:
  - `adjudicated`: a researcher decided the item (an Adjudication row);
  - `unresolved`: the item is in the adjudication queue (at least the project's `adjudication_min_answers` answers
    and agreement below its `adjudication_threshold`), or some response pair has as many votes one way as the other;
  - `unanimous`: every answer is the same (same tiers and same all-bad flag); a single answer is unanimous: nobody
    contradicts it;
  - `majority`: otherwise: the answers differ, but every pair that has a vote has more votes one way.
- `imported`: a row that comes from no item's answers (an imported preference pair, an imported label).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from webapp.annotation import agreement

UNANIMOUS, MAJORITY, ADJUDICATED, UNRESOLVED, IMPORTED = "unanimous", "majority", "adjudicated", "unresolved", "imported"
SOURCES = (UNANIMOUS, MAJORITY, ADJUDICATED, UNRESOLVED)


@dataclass(frozen=True)
class Answer:
    tiers: list[list[int]]
    all_bad: bool = False


def item_agreement(answers: Sequence[Answer]) -> float | None:
    """The share of (annotator pair × response pair) comparisons that agree; None under two answers."""
    if len(answers) < 2:
        return None
    return agreement.pairwise_agreement_rate([{index: answer.tiers for index, answer in enumerate(answers)}])


def in_queue(answers: int, rate: float | None, *, min_answers: int, threshold: float, adjudicated: bool) -> bool:
    """Whether an item of `answers` answers agreeing at `rate` (item_agreement) waits for a researcher: enough
    answers, agreement below the threshold, not yet decided."""
    return not adjudicated and answers >= min_answers and rate is not None and rate < threshold


def _same(answer: Answer) -> tuple:
    return answer.all_bad, tuple(frozenset(tier) for tier in answer.tiers if tier)


def _pair_votes(answers: Sequence[Answer]) -> dict[tuple[int, int], Counter]:
    """(lower id, higher id) -> Counter of directions: -1 when the lower id was preferred, 1 when the higher."""
    votes: dict[tuple[int, int], Counter] = {}
    for answer in answers:
        position = agreement.positions(answer.tiers)
        for first, second in combinations(sorted(position), 2):
            if position[first] != position[second]:
                votes.setdefault((first, second), Counter())[-1 if position[first] < position[second] else 1] += 1
    return votes


def majority_settles(answers: Sequence[Answer]) -> bool:
    """Every response pair with a vote has more votes one way than the other."""
    return all(counts[-1] != counts[1] for counts in _pair_votes(answers).values())


def item_source(answers: Sequence[Answer], *, queued: bool, adjudicated: bool) -> str:
    """The item's label source (the module's rules); `queued`: `in_queue` said so."""
    if adjudicated:
        return ADJUDICATED
    if queued:
        return UNRESOLVED
    if len({_same(answer) for answer in answers}) <= 1:
        return UNANIMOUS
    return MAJORITY if majority_settles(answers) else UNRESOLVED
