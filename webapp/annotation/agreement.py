"""Inter-annotator agreement on rankings, thumbs and ratings (pure functions, no database).

`ItemRankings` maps annotator -> tiers (lists of response ids, best first, ties in one tier) for one item.
- Kendall's tau-b between two annotators on one item, averaged over every (item, annotator pair).
- Pairwise agreement: over every (item, annotator pair, response pair), how often both annotators order
  the two responses the same way (a tie is its own answer).
- Krippendorff's alpha with the ordinal metric; a unit is one (item, response), its values the positions
  (tier numbers) the annotators gave it.
- Thumbs and ratings (`label_alpha`): Krippendorff's alpha over labels, nominal for thumbs (a unit is one response,
  its values the thumbs it got, up 1 / down 0), interval for ratings (a unit is one (response, aspect), its values
  the ratings it got); computed over the items holding a unit labelled twice or more.
- Agreement with the majority: per annotator, how often their order of a response pair matches the most
  common order among the other annotators of that item (pairs where the others are split are not counted).
- Disputed item: two or more answers (skips excluded) that do not name the same best responses, an all-bad
  answer being its own "best" (so "all bad" against a ranking is a dispute). Kendall's tau alone would miss
  two annotators who agree on the order of the bad responses but not on the one to choose, the pair that
  matters most for training.
"""

from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from math import sqrt

Tiers = list[list[int]]
ItemRankings = Mapping[Hashable, Tiers]


def positions(tiers: Tiers) -> dict[int, int]:
    """Response id -> tier number (1 = best)."""
    return {response: number for number, tier in enumerate(tiers, start=1) for response in tier}


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def _order(position: dict[int, int], first: int, second: int) -> int:
    """-1 when `first` is preferred, 1 when `second` is, 0 for a tie."""
    return _sign(position[first] - position[second])


def kendall_tau_b(first: dict[int, int], second: dict[int, int]) -> float | None:
    """Tau-b over the responses both annotators ranked; None when either put them all in one tier."""
    shared = sorted(first.keys() & second.keys())
    concordant = discordant = ties_first_only = ties_second_only = 0
    for a, b in combinations(shared, 2):
        x, y = _order(first, a, b), _order(second, a, b)
        if x == 0 and y == 0:
            continue
        if x == 0:
            ties_first_only += 1
        elif y == 0:
            ties_second_only += 1
        elif x == y:
            concordant += 1
        else:
            discordant += 1
    untied_first = concordant + discordant + ties_second_only
    untied_second = concordant + discordant + ties_first_only
    if untied_first == 0 or untied_second == 0:
        return None
    return (concordant - discordant) / sqrt(untied_first * untied_second)


def _annotator_pairs(item: ItemRankings) -> Iterable[tuple[dict[int, int], dict[int, int]]]:
    ranked = [positions(tiers) for _, tiers in sorted(item.items(), key=lambda entry: str(entry[0]))]
    return combinations(ranked, 2)


def mean_kendall_tau(items: Iterable[ItemRankings]) -> float | None:
    taus = [tau for item in items for a, b in _annotator_pairs(item) if (tau := kendall_tau_b(a, b)) is not None]
    return sum(taus) / len(taus) if taus else None


def pairwise_agreement_rate(items: Iterable[ItemRankings]) -> float | None:
    agree = total = 0
    for item in items:
        for a, b in _annotator_pairs(item):
            for first, second in combinations(sorted(a.keys() & b.keys()), 2):
                total += 1
                agree += _order(a, first, second) == _order(b, first, second)
    return agree / total if total else None


ALPHA_METRICS = ("nominal", "ordinal", "interval")


def krippendorff_alpha(units: Iterable[Iterable[float]], *, metric: str) -> float | None:
    """Krippendorff's alpha; each unit is the list of values its coders gave (missing values left out), units with
    fewer than two values are not pairable and count for nothing. `metric`: nominal (values equal or not), ordinal
    (ranks, distances by how many values lie between) or interval (squared differences). None when nothing is
    pairable or every value is the same (no expected disagreement)."""
    if metric not in ALPHA_METRICS:
        raise ValueError(f"unknown alpha metric {metric!r}; choose one of {', '.join(ALPHA_METRICS)}")
    pairable = [list(values) for values in units]
    pairable = [values for values in pairable if len(values) >= 2]
    coincidences: dict[tuple[float, float], float] = defaultdict(float)
    for values in pairable:
        for i, c in enumerate(values):
            for j, k in enumerate(values):
                if i != j:
                    coincidences[(c, k)] += 1.0 / (len(values) - 1)
    marginals: dict[float, float] = defaultdict(float)
    for (c, _), count in coincidences.items():
        marginals[c] += count
    n = sum(marginals.values())
    if n <= 1:
        return None
    categories = sorted(marginals)
    delta_squared = _metrics(categories, marginals)[metric]
    observed = sum(count * delta_squared(c, k) for (c, k), count in coincidences.items())
    expected = sum(marginals[c] * marginals[k] * delta_squared(c, k) for c in categories for k in categories)
    if expected == 0:
        return None
    return 1.0 - (n - 1) * observed / expected


def _metrics(categories: list[float], marginals: Mapping[float, float]) -> dict:
    index = {value: i for i, value in enumerate(categories)}
    cumulative = [0.0]
    for value in categories:
        cumulative.append(cumulative[-1] + marginals[value])

    def ordinal(c: float, k: float) -> float:
        low, high = sorted((index[c], index[k]))
        between = cumulative[high + 1] - cumulative[low]
        return (between - (marginals[c] + marginals[k]) / 2) ** 2

    return {"nominal": lambda c, k: float(c != k), "ordinal": ordinal, "interval": lambda c, k: float(c - k) ** 2}


def krippendorff_alpha_ordinal(units: Iterable[Iterable[float]]) -> float | None:
    """Alpha for ordinal values; each unit is the list of values its coders gave (missing values left out)."""
    return krippendorff_alpha(units, metric="ordinal")


@dataclass(frozen=True)
class LabelAgreement:
    metric: str
    alpha: float | None
    items: int  # items holding a unit labelled twice or more: what alpha is computed over


def label_alpha(labels: Iterable[tuple[Hashable, Hashable, float]], *, metric: str) -> LabelAgreement:
    """Alpha over (item, unit, value) labels: a unit's values are every label it got (one per annotator)."""
    by_unit: dict[tuple[Hashable, Hashable], list[float]] = defaultdict(list)
    for item, unit, value in labels:
        by_unit[(item, unit)].append(value)
    items = {item for (item, _), values in by_unit.items() if len(values) >= 2}
    return LabelAgreement(metric=metric, alpha=krippendorff_alpha(by_unit.values(), metric=metric), items=len(items))


def ranking_alpha(items: Iterable[ItemRankings]) -> float | None:
    units = []
    for item in items:
        by_response: dict[int, list[int]] = defaultdict(list)
        for tiers in item.values():
            for response, number in positions(tiers).items():
                by_response[response].append(number)
        units.extend(by_response.values())
    return krippendorff_alpha_ordinal(units)


def agreement_with_majority(items: Iterable[ItemRankings]) -> dict[Hashable, float]:
    agree: Counter = Counter()
    counted: Counter = Counter()
    for item in items:
        ranked = {annotator: positions(tiers) for annotator, tiers in item.items()}
        for annotator, own in ranked.items():
            others = [position for other, position in ranked.items() if other != annotator]
            for first, second in combinations(sorted(own), 2):
                votes = Counter(_order(p, first, second) for p in others if first in p and second in p)
                top = votes.most_common(2)
                if not top or (len(top) == 2 and top[0][1] == top[1][1]):
                    continue
                counted[annotator] += 1
                agree[annotator] += _order(own, first, second) == top[0][0]
    return {annotator: agree[annotator] / counted[annotator] for annotator in counted}


def best_answer(tiers: Tiers, *, all_bad: bool) -> frozenset[int] | str:
    """What one answer says is best: the ids of its top tier, or "all bad"."""
    if all_bad:
        return "all bad"
    return frozenset(tiers[0]) if tiers else frozenset()


def is_disputed(answers: Iterable[frozenset[int] | str]) -> bool:
    return len(set(answers)) > 1
