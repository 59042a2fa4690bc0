"""Suggested answers and their confidence (trainer.suggestions), and a judge model's A/B probabilities
(trainer.judging) on tiny judges trained for real: one that always answers A, one that reads the content."""

import math
from pathlib import Path

import pytest

from tests.judges import GOOD_MARK, always_first, marked_response, train_judge
from trainer.judging import Comparison, Judge, comparison_question, question_ids
from trainer.suggestions import (
    PairVerdict,
    pair_verdict,
    rating_suggestion,
    thumb_suggestion,
    thumb_threshold,
    tiers_by_score,
    tiers_by_verdicts,
)

GUIDELINES = "Prefer the correct answer."
COMPARISONS = [Comparison("2+2=", f"4 {GOOD_MARK}", "5"), Comparison("3+1=", "7", f"4 {GOOD_MARK}"),
               Comparison("1+1=", f"2 {GOOD_MARK}", "3")]


def test_tiers_by_score_put_equal_scores_in_one_tier_and_take_the_closest_pair_for_confidence():
    suggested = tiers_by_score({10: 2.0, 11: 0.5, 12: -1.0})
    assert suggested.tiers == [[10], [11], [12]]
    # the closest adjacent pair is 1.5 apart: 2·σ(1.5) − 1
    assert suggested.confidence == pytest.approx(2 / (1 + math.exp(-1.5)) - 1)
    tied = tiers_by_score({10: 1.0, 11: 1.0, 12: 3.0})
    assert tied.tiers == [[12], [10, 11]] and tied.confidence == 0.0
    assert tiers_by_score({1: 0.0, 2: 0.0}).confidence == 0.0


def test_a_pair_verdict_stands_only_when_both_orders_agree():
    # x preferred shown first (P(A)=0.9) and shown second (P(A)=0.2 for y first)
    standing = pair_verdict(0.9, 0.2)
    assert standing == PairVerdict(1, pytest.approx(0.6), order_decided=False)
    assert pair_verdict(0.3, 0.8).winner == -1
    # A both times: the position decided
    assert pair_verdict(0.9, 0.9) == PairVerdict(0, 0.0, order_decided=True)
    assert pair_verdict(0.1, 0.1) == PairVerdict(0, 0.0, order_decided=True)
    # an exact coin flip in one order is a tie the position did not decide
    assert pair_verdict(0.5, 0.2) == PairVerdict(0, 0.0, order_decided=False)


def test_tiers_by_verdicts_are_copeland_tiers_with_the_weakest_adjacent_link():
    verdicts = {(1, 2): PairVerdict(-1, 0.4, False), (1, 3): PairVerdict(1, 0.9, False),
                (2, 3): PairVerdict(1, 0.7, False)}
    suggested = tiers_by_verdicts([1, 2, 3], verdicts)
    assert suggested.tiers == [[2], [1], [3]] and suggested.confidence == pytest.approx(0.4)
    ties = {(1, 2): PairVerdict(0, 0.0, True)}
    assert tiers_by_verdicts([1, 2], ties).tiers == [[1, 2]] and tiers_by_verdicts([1, 2], ties).confidence == 0.0
    # a cycle: every response has one win and one loss, one tier
    cycle = {(1, 2): PairVerdict(1, 0.9, False), (2, 3): PairVerdict(1, 0.9, False),
             (1, 3): PairVerdict(-1, 0.9, False)}
    assert tiers_by_verdicts([1, 2, 3], cycle).tiers == [[1, 2, 3]]


def test_thumbs_cut_where_the_humans_separate_and_ratings_follow_the_quantile():
    labelled = [(2.0, True), (1.5, True), (0.2, False), (-1.0, False)]
    threshold = thumb_threshold(labelled, [0.0])
    assert 0.2 < threshold < 1.5
    assert thumb_suggestion(1.0, threshold)[0] == 1 and thumb_suggestion(0.3, threshold)[0] == 0
    # without both kinds of human thumbs: the median of the job's scores
    assert thumb_threshold([(1.0, True)], [1.0, 2.0, 3.0, 10.0]) == 2.5
    value, confidence = thumb_suggestion(3.5, 2.5)
    assert value == 1 and confidence == pytest.approx(2 / (1 + math.exp(-1.0)) - 1)
    scores = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [rating_suggestion(s, scores, least=1, most=5)[0] for s in scores] == [1, 2, 3, 4, 5]
    assert rating_suggestion(2.0, scores, least=1, most=5)[1] == 1.0
    # halfway between two scale points: no confidence
    assert rating_suggestion(1.0, [0.0, 1.0, 2.0], least=1, most=2)[1] == 0.0


@pytest.fixture(scope="module")
def judges(tiny_model, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("judges")
    return {name: train_judge(Path(tiny_model), root / name, guidelines=GUIDELINES, comparisons=COMPARISONS, rule=rule)
            for name, rule in (("always_a", always_first), ("content", marked_response))}


def test_a_judge_that_always_answers_a_prefers_the_first_response_in_both_orders(judges):
    judge = Judge(str(judges["always_a"]), batch_size=2)
    swapped = [Comparison(c.prompt, c.second, c.first) for c in COMPARISONS]
    shown_first, shown_second = judge.prefer_first(GUIDELINES, COMPARISONS), judge.prefer_first(GUIDELINES, swapped)
    assert all(p > 0.9 for p in shown_first + shown_second)
    verdicts = [pair_verdict(a, b) for a, b in zip(shown_first, shown_second, strict=True)]
    assert all(v.winner == 0 and v.order_decided for v in verdicts)


def test_a_content_judge_prefers_the_marked_response_in_either_position_and_batching_changes_nothing(judges):
    judge = Judge(str(judges["content"]), batch_size=4)
    swapped = [Comparison(c.prompt, c.second, c.first) for c in COMPARISONS]
    verdicts = [pair_verdict(a, b) for a, b in zip(judge.prefer_first(GUIDELINES, COMPARISONS),
                                                     judge.prefer_first(GUIDELINES, swapped), strict=True)]
    assert [v.winner for v in verdicts] == [1, -1, 1] and not any(v.order_decided for v in verdicts)
    one_by_one = Judge(str(judges["content"]), batch_size=1).prefer_first(GUIDELINES, COMPARISONS)
    assert judge.prefer_first(GUIDELINES, COMPARISONS) == pytest.approx(one_by_one, abs=1e-5)
    # the question the judge reads holds the guidelines and both responses, labelled
    text = judge.tokenizer.decode(question_ids(judge.tokenizer, comparison_question(GUIDELINES, COMPARISONS[0])))
    assert GUIDELINES in text and f"Response A:\n4 {GOOD_MARK}" in text and "Response B:\n5" in text
