"""Agreement figures against values computed by hand (and Krippendorff's own published example)."""

import math

import pytest

from webapp.annotation import agreement

# Three annotators rank responses 1, 2, 3 of one item.
ITEM = {"x": [[1], [2], [3]], "y": [[1], [3], [2]], "z": [[2], [1], [3]]}


def test_kendall_tau_by_hand():
    # x-y: 2 concordant, 1 discordant = 1/3; x-z: 1/3; y-z: -1/3; mean 1/9
    assert agreement.mean_kendall_tau([ITEM]) == pytest.approx(1 / 9)


def test_kendall_tau_b_with_a_tie():
    # (1,2) tied by the first only; (1,3), (2,3) concordant: 2 / sqrt(2 * 3)
    tau = agreement.kendall_tau_b(agreement.positions([[1, 2], [3]]), agreement.positions([[1], [2], [3]]))
    assert tau == pytest.approx(2 / math.sqrt(6))


def test_pairwise_agreement_by_hand():
    # agreeing response pairs: x-y 2 of 3, x-z 2 of 3, y-z 1 of 3
    assert agreement.pairwise_agreement_rate([ITEM]) == pytest.approx(5 / 9)


def test_agreement_with_the_majority_of_the_others_by_hand():
    # x: only (1,3) has a majority among y, z, and x agrees; y: (1,3) agrees, (2,3) not; z: (1,2) not, (1,3) agrees
    assert agreement.agreement_with_majority([ITEM]) == pytest.approx({"x": 1.0, "y": 0.5, "z": 0.5})


def test_ordinal_alpha_by_hand():
    # units (responses) get positions [1,1,2], [2,3,1], [3,2,3]; every category has n_c = 3, n = 9;
    # ordinal delta^2: d12 = d23 = (6 - 3)^2 = 9, d13 = (9 - 3)^2 = 36;
    # observed 2 * (1.5*9 + 1.5*9 + 0.5*36) = 90, expected 2 * (9*9 + 9*9 + 9*36) = 972
    # alpha = 1 - (n - 1) * 90 / 972 = 7/27
    assert agreement.ranking_alpha([ITEM]) == pytest.approx(7 / 27)


def test_ordinal_alpha_matches_krippendorffs_published_example():
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 observers, 12 units; ordinal 0.815
    n = None
    observers = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    units = [[value for value in unit if value is not None] for unit in zip(*observers, strict=True)]
    assert agreement.krippendorff_alpha_ordinal(units) == pytest.approx(0.815, abs=5e-4)


def test_perfect_agreement_and_too_little_data():
    same = {"a": [[1], [2], [3]], "b": [[1], [2], [3]]}
    assert agreement.mean_kendall_tau([same]) == 1.0
    assert agreement.pairwise_agreement_rate([same]) == 1.0
    assert agreement.ranking_alpha([same]) == 1.0
    assert agreement.mean_kendall_tau([]) is None and agreement.ranking_alpha([]) is None
