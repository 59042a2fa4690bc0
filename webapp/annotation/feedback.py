"""From feedback to training data: the one place for each rule, read by the exports and by runs' data sources
alike. Pure functions over ids, texts and values (no database).

Ratings -> preference pairs (UltraFeedback's binarization), per item:
- a response's score is the mean of all its ratings (every aspect, every annotator);
- chosen: the best score; among responses tied at the best, the lowest response id (the first added);
- rejected: under "random" (the default), a response drawn from those scored strictly lower, by a generator seeded
  with (seed, item id), so one item's draw does not depend on the other items; under "worst", the lowest score (among
  responses tied at the lowest, the lowest id);
- no response scored lower than the best (every response tied, or only one rated): no pair;
- margin = chosen's score - rejected's score; weight 1.0.
Empty (whitespace-only) responses carry no preference and are left out first, as in preferences.py.

Feedback -> unpaired (KTO) rows, `label` True = desirable (up):
- thumbs: one row a thumb;
- a ranking (or a pairwise answer): its best tier up and its worst tier down; an all-bad answer puts every response
  it holds down; an answer of one tier that is not all bad (everything tied) says nothing and gives no row;
- ratings: each binarized pair's chosen up and rejected down;
- an imported preference pair (no answer behind it): chosen up, rejected down.
Across annotators (`aggregate_unpaired`, the aggregation names of aggregation.py): "all" keeps every row; "majority"
keeps one row a response, the label most of its rows give (a tie drops the response); "drop_conflicts" one row a
response whose rows all agree; "annotator:<name>" that annotator's rows; "resolved" the rows of resolved items
(label_sources.py: not `unresolved`), then one row a response as "majority". The row kept is the response's earliest
row with the kept label. An adjudicated item's rows are the decision's under "majority", "drop_conflicts" and
"resolved" (selectors puts them in place of the annotators' rows), its annotators' under "all" and "annotator:".
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass

from trainer.config import SEED_MAX
from webapp.annotation.aggregation import aggregation_annotator, aggregation_check
from webapp.annotation.label_sources import IMPORTED, UNRESOLVED
from webapp.text import is_blank

BINARIZATIONS = ("random", "worst")
DEFAULT_BINARIZATION = "random"
DEFAULT_SEED = 0


class BinarizationError(ValueError):
    pass


def left_out_responses(texts: dict[int, str]) -> set[int]:
    """The responses that carry no preference: the empty (whitespace-only) ones."""
    return {response for response, text in texts.items() if is_blank(text)}


def binarization_check(binarization: object, seed: object) -> tuple[str, int]:
    """(binarization, seed) as given, or BinarizationError naming the one at fault."""
    if binarization not in BINARIZATIONS:
        raise BinarizationError(f"binarization: unknown binarization {binarization!r}; choose one of "
                                f"{', '.join(BINARIZATIONS)}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= SEED_MAX:
        raise BinarizationError(f"seed: must be a whole number from 0 to {SEED_MAX}, got {seed!r}")
    return binarization, seed


@dataclass(frozen=True)
class Rating:
    """One rating of one response (on any aspect, by anyone)."""

    response: int
    value: float


@dataclass(frozen=True)
class BinarizedPair:
    chosen: int
    rejected: int
    chosen_score: float
    rejected_score: float
    margin: float
    weight: float = 1.0


def response_scores(ratings: Iterable[Rating]) -> dict[int, float]:
    """Response id -> the mean of all its ratings."""
    values: dict[int, list[float]] = defaultdict(list)
    for rating in ratings:
        values[rating.response].append(rating.value)
    # rounded so that equal means reached by different sums compare equal (a tie is a tie)
    return {response: round(sum(given) / len(given), 9) for response, given in values.items()}


def binarize_ratings(
    item: int | str,
    ratings: Iterable[Rating],
    *,
    left_out: Collection[int] = frozenset(),
    binarization: str = DEFAULT_BINARIZATION,
    seed: int = DEFAULT_SEED,
) -> BinarizedPair | None:
    """The one pair of item `item`'s ratings (see the module's rule), or None. `left_out`: responses that carry no
    preference (`left_out_responses`: the empty ones)."""
    binarization_check(binarization, seed)
    scores = {response: score for response, score in response_scores(ratings).items() if response not in left_out}
    if len(scores) < 2:
        return None
    best = max(scores.values())
    chosen = min(response for response, score in scores.items() if score == best)
    lower = sorted(response for response, score in scores.items() if score < best)
    if not lower:
        return None
    if binarization == "worst":
        worst = min(scores[response] for response in lower)
        rejected = min(response for response in lower if scores[response] == worst)
    else:
        rejected = random.Random(f"{seed}:{item}").choice(lower)
    return BinarizedPair(chosen=chosen, rejected=rejected, chosen_score=best, rejected_score=scores[rejected],
                         margin=best - scores[rejected])


# Unpaired (KTO) rows --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnpairedLabel:
    """One unpaired row in ids: `response` is desirable (label True) or not, by `annotator` (None: nobody known),
    from `source` ("thumbs", "ranking", "pairwise", "ratings", "pairs"); `label_source`: its item's
    (label_sources.py), "imported" for a row of no item's answers."""

    response: int
    label: bool
    annotator: str | None
    source: str
    label_source: str = IMPORTED


def thumb_label(response: int, value: float, *, annotator: str | None) -> UnpairedLabel:
    """A thumb (1.0 up, 0.0 down) as its row."""
    return UnpairedLabel(response=response, label=value >= 0.5, annotator=annotator, source="thumbs")


def tier_labels(
    tiers: Sequence[Sequence[int]], *, all_bad: bool, annotator: str | None, left_out: Collection[int] = frozenset(),
    source: str = "ranking",
) -> list[UnpairedLabel]:
    """A ranking's (or pairwise answer's) rows: best tier up, worst tier down; all bad: every response down; one tier
    not all bad: none. `left_out` responses (empty ones) are taken out first, a tier left empty by that dropped."""
    kept = [[response for response in tier if response not in left_out] for tier in tiers]
    kept = [tier for tier in kept if tier]
    if all_bad:
        return [UnpairedLabel(response, False, annotator, source) for tier in kept for response in tier]
    if len(kept) < 2:
        return []
    return ([UnpairedLabel(response, True, annotator, source) for response in kept[0]]
            + [UnpairedLabel(response, False, annotator, source) for response in kept[-1]])


def pair_labels(chosen: int, rejected: int, *, annotator: str | None, source: str) -> list[UnpairedLabel]:
    """A pair's rows: chosen up, rejected down (a binarized ratings pair, an imported preference pair)."""
    return [UnpairedLabel(chosen, True, annotator, source), UnpairedLabel(rejected, False, annotator, source)]


def aggregate_unpaired(rows: Iterable[UnpairedLabel], mode: str) -> Iterator[UnpairedLabel]:
    """The rows `mode` keeps (see the module's rule), in their order; an unknown mode is refused at once
    (aggregation.AggregationError)."""
    aggregation_check(mode)
    if mode == "all":
        return iter(rows)
    annotator = aggregation_annotator(mode)
    if annotator is not None:
        return (row for row in rows if row.annotator == annotator)
    if mode == "resolved":
        return _one_row_a_response((row for row in rows if row.label_source != UNRESOLVED), "majority")
    return _one_row_a_response(rows, mode)


def _one_row_a_response(rows: Iterable[UnpairedLabel], mode: str) -> Iterator[UnpairedLabel]:
    votes: dict[int, dict[bool, list[UnpairedLabel]]] = {}
    for row in rows:
        votes.setdefault(row.response, {}).setdefault(row.label, []).append(row)
    for by_label in votes.values():
        up, down = by_label.get(True, []), by_label.get(False, [])
        if up and down and (mode == "drop_conflicts" or len(up) == len(down)):
            continue
        yield (up if len(up) > len(down) else down)[0]


def tiers_from_scores(scores: dict[int, float]) -> list[list[int]]:
    """A labels answer read as a ranking, for what compares responses by rank (a round's best response, its win
    rate): responses by their score (a thumb, the mean of their ratings), best first, equal scores in one tier."""
    by_score: dict[float, list[int]] = defaultdict(list)
    for response, score in scores.items():
        by_score[round(score, 9)].append(response)
    return [sorted(by_score[score]) for score in sorted(by_score, reverse=True)]
