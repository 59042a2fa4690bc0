"""Pairs from a ranking's tiers: all C(K,2) minus ties (InstructGPT weights), best vs rest, adjacent."""

import pytest

from webapp.annotation.preferences import pairs_from_tiers

TIERS = [[1], [2, 3], [4]]  # 2 and 3 tied


def _as_tuples(pairs):
    return sorted((p.chosen, p.rejected, p.weight, p.margin) for p in pairs)


def test_all_pairs_minus_ties_weigh_one_over_k_choose_2():
    assert _as_tuples(pairs_from_tiers(TIERS)) == sorted(
        [(1, 2, 1 / 6, 1.0), (1, 3, 1 / 6, 1.0), (1, 4, 1 / 6, 2.0), (2, 4, 1 / 6, 1.0), (3, 4, 1 / 6, 1.0)]
    )


def test_best_vs_rest():
    assert _as_tuples(pairs_from_tiers(TIERS, strategy="best_vs_rest")) == sorted(
        [(1, 2, 1 / 3, 1.0), (1, 3, 1 / 3, 1.0), (1, 4, 1 / 3, 2.0)]
    )


def test_adjacent():
    assert _as_tuples(pairs_from_tiers(TIERS, strategy="adjacent")) == sorted(
        [(1, 2, 0.25, 1.0), (1, 3, 0.25, 1.0), (2, 4, 0.25, 1.0), (3, 4, 0.25, 1.0)]
    )


def test_everything_tied_gives_no_pair_and_unknown_strategies_are_refused():
    assert pairs_from_tiers([[1, 2, 3]]) == []
    with pytest.raises(ValueError, match="unknown pair strategy 'best'"):
        pairs_from_tiers(TIERS, strategy="best")
