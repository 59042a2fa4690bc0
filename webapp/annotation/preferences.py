"""Which preference pairs a ranking yields: the one rule, read by submit (which stores the "all" strategy's pairs),
by export (which derives the other strategies' pairs again) and so by training (which reads the export's rows).
Pure functions.

A ranking is a list of tiers of response ids, best first; responses in one tier are tied and give no pair.
Margin is the distance between the two tiers, so a pair from first vs last place weighs more in a margin loss.
An empty (or whitespace-only) response carries no preference (a model can sample one): `ranking_pairs` takes it out
before pairing, so the weights still add up to 1 per ranking over the responses that remain.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from webapp.text import BLANK_TEXT_REGEX, is_blank

STRATEGIES = ("all", "best_vs_rest", "adjacent")


@dataclass(frozen=True)
class DerivedPair:
    chosen: int
    rejected: int
    weight: float
    margin: float


# The same rule in the database's words: keeps out of exports the pairs stored before empty responses were left out.
LEFT_OUT_TEXT_REGEX = BLANK_TEXT_REGEX


def ranking_pairs(
    tiers: Sequence[Sequence[int]], texts: Mapping[int, str], *, strategy: str = "all"
) -> list[DerivedPair]:
    """The pairs of one ranking under `strategy`, given its prompt's response texts by id: empty responses left out."""
    left_out = {response for response, text in texts.items() if is_blank(text)}
    return pairs_from_tiers(_tiers_without(tiers, left_out), strategy=strategy)


def _tiers_without(tiers: Sequence[Sequence[int]], left_out: set[int]) -> list[list[int]]:
    """The tiers with some responses (empty ones, say) taken out, and tiers left empty by that dropped."""
    kept = [[response for response in tier if response not in left_out] for tier in tiers]
    return [tier for tier in kept if tier]


def pairs_from_tiers(tiers: Sequence[Sequence[int]], *, strategy: str = "all") -> list[DerivedPair]:
    """Pairs of one ranking.

    all: every pair of responses in different tiers, weight 1/C(K,2) for K ranked responses (InstructGPT:
    each ranking counts once, however many responses it orders). best_vs_rest: the top tier against every
    other response. adjacent: each tier against the next one. The last two weigh 1/(their pair count).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown pair strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    tiers = [list(tier) for tier in tiers if tier]
    if strategy == "all":
        tier_pairs = list(combinations(range(len(tiers)), 2))
    elif strategy == "best_vs_rest":
        tier_pairs = [(0, lower) for lower in range(1, len(tiers))]
    else:
        tier_pairs = [(upper, upper + 1) for upper in range(len(tiers) - 1)]
    raw = [
        (chosen, rejected, float(lower - upper))
        for upper, lower in tier_pairs
        for chosen in tiers[upper]
        for rejected in tiers[lower]
    ]
    if not raw:
        return []
    ranked = sum(len(tier) for tier in tiers)
    denominator = ranked * (ranked - 1) / 2 if strategy == "all" else len(raw)
    return [DerivedPair(chosen, rejected, 1.0 / denominator, margin) for chosen, rejected, margin in raw]
