"""The rules from feedback to training data (webapp.annotation.feedback) and the agreement of thumbs and ratings
(webapp.annotation.agreement), as pure functions: the values the README states."""

import random
from itertools import combinations

import pytest

from webapp.annotation.aggregation import AggregationError
from webapp.annotation.agreement import ALPHA_METRICS, krippendorff_alpha, label_alpha, ranking_alpha
from webapp.annotation.feedback import (
    BinarizationError,
    BinarizedPair,
    Rating,
    UnpairedLabel,
    aggregate_unpaired,
    binarize_ratings,
    left_out_responses,
    pair_labels,
    response_scores,
    thumb_label,
    tier_labels,
)

# The README's example item: responses 1..4 rated by two annotators on two aspects (helpfulness, honesty).
# Means: 1 -> 4.5, 2 -> 4.5 (tied with 1 at the top: 1 is chosen, the lower id), 3 -> 3.0, 4 -> 1.25.
EXAMPLE = [Rating(1, 5), Rating(1, 4), Rating(1, 4), Rating(1, 5),
           Rating(2, 5), Rating(2, 5), Rating(2, 4), Rating(2, 4),
           Rating(3, 3), Rating(3, 3), Rating(3, 3), Rating(3, 3),
           Rating(4, 1), Rating(4, 2), Rating(4, 1), Rating(4, 1)]


def test_a_score_is_the_mean_of_all_ratings_of_the_response():
    assert response_scores(EXAMPLE) == {1: 4.5, 2: 4.5, 3: 3.0, 4: 1.25}


def test_worst_binarization_pairs_the_first_best_with_the_lowest_and_the_margin_is_the_score_difference():
    assert binarize_ratings("item-0", EXAMPLE, binarization="worst") == BinarizedPair(
        chosen=1, rejected=4, chosen_score=4.5, rejected_score=1.25, margin=3.25, weight=1.0)


@pytest.mark.parametrize(("seed", "rejected"), [(0, 4), (1, 4), (2, 3), (3, 3)])
def test_random_binarization_draws_a_lower_response_with_a_generator_seeded_by_seed_and_item(seed, rejected):
    pair = binarize_ratings("item-0", EXAMPLE, seed=seed)
    scores = {3: 3.0, 4: 1.25}
    assert (pair.chosen, pair.rejected, pair.margin, pair.weight) == (1, rejected, 4.5 - scores[rejected], 1.0)
    # the documented draw: random.Random("<seed>:<item>").choice(the lower-scored responses by id)
    assert random.Random(f"{seed}:item-0").choice([3, 4]) == rejected


def test_the_draw_of_an_item_does_not_depend_on_other_items_or_on_the_ratings_order():
    shuffled = list(reversed(EXAMPLE))
    assert [binarize_ratings("item-0", shuffled, seed=seed).rejected for seed in range(4)] == [4, 4, 3, 3]
    # another item with the same ratings draws with its own generator
    assert [binarize_ratings("item-1", EXAMPLE, seed=seed).rejected for seed in range(4)] == [
        random.Random(f"{seed}:item-1").choice([3, 4]) for seed in range(4)]


def test_no_pair_when_every_response_ties_or_only_one_is_rated():
    assert binarize_ratings("i", [Rating(1, 3), Rating(2, 3), Rating(2, 3)]) is None
    assert binarize_ratings("i", [Rating(1, 5), Rating(1, 1)]) is None
    assert binarize_ratings("i", []) is None


def test_ties_below_the_top_are_rejected_candidates_and_worst_takes_the_lowest_id_among_tied_worst():
    ratings = [Rating(7, 5), Rating(5, 2), Rating(6, 2)]
    assert binarize_ratings("i", ratings, binarization="worst") == BinarizedPair(7, 5, 5.0, 2.0, 3.0)


def test_empty_responses_are_left_out_before_binarizing():
    assert left_out_responses({1: "fine", 2: "  \n", 3: ""}) == {2, 3}
    ratings = [Rating(1, 2), Rating(2, 5), Rating(3, 1)]
    assert binarize_ratings("i", ratings, left_out={2, 3}) is None
    assert binarize_ratings("i", ratings, left_out={2}, binarization="worst") == BinarizedPair(1, 3, 2.0, 1.0, 1.0)


def test_an_unknown_binarization_or_a_bad_seed_is_refused_naming_it():
    with pytest.raises(BinarizationError, match="binarization: unknown binarization 'best'"):
        binarize_ratings("i", EXAMPLE, binarization="best")
    for seed in (-1, "3", True, 1.5, 2**70):
        with pytest.raises(BinarizationError, match="seed: must be a whole number"):
            binarize_ratings("i", EXAMPLE, seed=seed)


# Unpaired (KTO) rows -------------------------------------------------------------------------------------------


def test_a_thumb_is_one_row_up_or_down():
    assert thumb_label(3, 1.0, annotator="ann0") == UnpairedLabel(3, True, "ann0", "thumbs")
    assert thumb_label(3, 0.0, annotator=None) == UnpairedLabel(3, False, None, "thumbs")


def test_a_ranking_gives_its_best_tier_up_and_its_worst_tier_down():
    rows = tier_labels([[1, 2], [3], [4, 5]], all_bad=False, annotator="ann0")
    assert [(row.response, row.label) for row in rows] == [(1, True), (2, True), (4, False), (5, False)]
    assert {row.source for row in rows} == {"ranking"} and {row.annotator for row in rows} == {"ann0"}


def test_a_pairwise_answer_gives_one_up_one_down_and_all_bad_puts_every_response_down():
    assert tier_labels([[8], [9]], all_bad=False, annotator="a", source="pairwise") == [
        UnpairedLabel(8, True, "a", "pairwise"), UnpairedLabel(9, False, "a", "pairwise")]
    assert [(row.response, row.label) for row in tier_labels([[1, 2, 3]], all_bad=True, annotator="a")] == [
        (1, False), (2, False), (3, False)]


def test_one_tier_that_is_not_all_bad_says_nothing_and_empty_responses_are_left_out():
    assert tier_labels([[1, 2, 3]], all_bad=False, annotator="a") == []
    # the worst tier holds only an empty response: the tier above it is the worst that remains
    rows = tier_labels([[1], [2], [3]], all_bad=False, annotator="a", left_out={3})
    assert [(row.response, row.label) for row in rows] == [(1, True), (2, False)]
    assert tier_labels([[1], [2]], all_bad=False, annotator="a", left_out={2}) == []


def test_a_pair_gives_its_chosen_up_and_its_rejected_down():
    assert pair_labels(1, 4, annotator=None, source="ratings") == [
        UnpairedLabel(1, True, None, "ratings"), UnpairedLabel(4, False, None, "ratings")]


# Thumbs of the README's example: response 1 up by ann0 and ann1; response 2 down by ann0 and ann2, up by ann1;
# response 3 down by ann1.
THUMBS = [UnpairedLabel(1, True, "ann0", "thumbs"), UnpairedLabel(2, False, "ann0", "thumbs"),
          UnpairedLabel(1, True, "ann1", "thumbs"), UnpairedLabel(2, True, "ann1", "thumbs"),
          UnpairedLabel(3, False, "ann1", "thumbs"), UnpairedLabel(2, False, "ann2", "thumbs")]


@pytest.mark.parametrize(("mode", "expected"), [
    ("all", [(1, True), (2, False), (1, True), (2, True), (3, False), (2, False)]),
    ("majority", [(1, True), (2, False), (3, False)]),
    ("drop_conflicts", [(1, True), (3, False)]),
    ("annotator:ann1", [(1, True), (2, True), (3, False)]),
    ("annotator:nobody", []),
])
def test_aggregations_of_unpaired_rows(mode, expected):
    assert [(row.response, row.label) for row in aggregate_unpaired(THUMBS, mode)] == expected


def test_majority_keeps_the_earliest_row_of_the_kept_label_and_drops_a_tie():
    (kept,) = [row for row in aggregate_unpaired(THUMBS, "majority") if row.response == 2]
    assert kept is THUMBS[1]
    assert list(aggregate_unpaired(THUMBS[2:4] + [UnpairedLabel(2, False, "x", "thumbs")], "majority")) == [THUMBS[2]]
    with pytest.raises(AggregationError):
        aggregate_unpaired(THUMBS, "most")


# Agreement -----------------------------------------------------------------------------------------------------

# Krippendorff (2011), "Computing Krippendorff's alpha-reliability", the example of 4 coders and 12 units with
# missing values (None); the published alphas: nominal 0.743, ordinal 0.815, interval 0.849.
CODERS = [[1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
          [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
          [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
          [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None]]
PUBLISHED = {"nominal": 0.743, "ordinal": 0.815, "interval": 0.849}


@pytest.mark.parametrize("metric", ALPHA_METRICS)
def test_alpha_matches_krippendorffs_published_example(metric):
    units = [[value for value in unit if value is not None] for unit in zip(*CODERS, strict=True)]
    assert round(krippendorff_alpha(units, metric=metric), 3) == PUBLISHED[metric]


def _interval_alpha_by_definition(units: list[list[float]]) -> float:
    """1 - D_o / D_e with D_o the mean squared difference within units (each unit's pairs weighted 1/(m-1)) and D_e
    the mean squared difference between any two pairable values."""
    pairable = [unit for unit in units if len(unit) >= 2]
    values = [value for unit in pairable for value in unit]
    n = len(values)
    within = sum(2 * (a - b) ** 2 / (len(unit) - 1) for unit in pairable for a, b in combinations(unit, 2)) / n
    between = sum(2 * (a - b) ** 2 for a, b in combinations(values, 2)) / (n * (n - 1))
    return 1 - within / between


def test_ratings_alpha_is_interval_over_response_and_aspect_units():
    # (item, (response, aspect), rating), two annotators on item 1, one on item 2 (nothing pairable there)
    labels = [(1, (1, "help"), 5), (1, (1, "help"), 4), (1, (1, "honest"), 4), (1, (1, "honest"), 5),
              (1, (2, "help"), 5), (1, (2, "help"), 4), (1, (3, "help"), 3), (1, (3, "help"), 3),
              (1, (4, "help"), 1), (1, (4, "help"), 2), (2, (5, "help"), 4)]
    agreement = label_alpha(labels, metric="interval")
    units = [[5, 4], [4, 5], [5, 4], [3, 3], [1, 2], [4]]
    assert agreement.alpha == pytest.approx(_interval_alpha_by_definition(units))
    # by hand: n = 10 values, mean 3.6, squared deviations 16.4; D_o = 2 * 4 / 10 = 0.8 (four units differ by 1),
    # D_e = 2 * 10 * 16.4 / (10 * 9) = 3.6444; alpha = 1 - 0.8 / 3.6444 = 32/41
    assert agreement.alpha == pytest.approx(32 / 41) and (agreement.items, agreement.metric) == (1, "interval")


def test_thumbs_alpha_is_nominal_over_responses_computed_by_hand():
    # response 1: up, up; response 2: down, up, down; response 3: one thumb (not pairable). Coincidences:
    # o(1,1) = 2, o(0,0) = o(0,1) = o(1,0) = 1; n0 = 2, n1 = 3, n = 5; alpha = 1 - (n-1) * 2 / (2 * n0 * n1) = 1/3.
    labels = [(1, 1, 1.0), (1, 1, 1.0), (1, 2, 0.0), (1, 2, 1.0), (1, 2, 0.0), (1, 3, 0.0)]
    agreement = label_alpha(labels, metric="nominal")
    assert agreement.alpha == pytest.approx(1 / 3) and agreement.items == 1


def test_alpha_is_none_without_pairable_units_or_variation_and_the_ordinal_alpha_is_unchanged():
    assert label_alpha([(1, 1, 1.0), (2, 2, 0.0)], metric="nominal").alpha is None
    assert label_alpha([(1, 1, 1.0), (1, 1, 1.0)], metric="nominal").alpha is None
    with pytest.raises(ValueError, match="unknown alpha metric"):
        krippendorff_alpha([[1, 2]], metric="ratio")
    assert ranking_alpha([{"a": [[1], [2]], "b": [[1], [2]]}]) == 1.0
