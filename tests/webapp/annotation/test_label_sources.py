"""The rules of label_sources.py on hand-made answers: agreement, the queue's rule and each source."""

import pytest

from webapp.annotation.label_sources import Answer, in_queue, item_agreement, item_source, majority_settles

pytestmark = pytest.mark.django_db(False)

XYZ, YXZ, ZYX = Answer([[1], [2], [3]]), Answer([[2], [1], [3]]), Answer([[3], [2], [1]])
TIED = Answer([[1, 2], [3]])


def test_agreement_is_the_share_of_agreeing_comparisons():
    assert item_agreement([XYZ]) is None
    assert item_agreement([XYZ, XYZ]) == 1.0
    assert item_agreement([XYZ, YXZ]) == pytest.approx(2 / 3)
    assert item_agreement([XYZ, ZYX]) == 0.0
    assert item_agreement([XYZ, TIED]) == pytest.approx(2 / 3)  # a tie is its own answer: {1,2} disagrees
    # only the responses both ranked compare: a thumbs answer of two responses beside one of three
    assert item_agreement([Answer([[1], [2]]), XYZ]) == 1.0


def test_the_queue_needs_enough_answers_a_low_agreement_and_no_decision():
    rate = item_agreement([XYZ, ZYX, XYZ])
    assert rate == pytest.approx(1 / 3)
    assert in_queue(3, rate, min_answers=3, threshold=0.6, adjudicated=False)
    assert not in_queue(3, rate, min_answers=4, threshold=0.6, adjudicated=False)
    assert not in_queue(3, rate, min_answers=3, threshold=1 / 3, adjudicated=False)  # below, not at
    assert not in_queue(3, rate, min_answers=3, threshold=0.6, adjudicated=True)
    assert not in_queue(3, None, min_answers=2, threshold=0.6, adjudicated=False)  # no comparison at all


def test_each_source():
    assert item_source([XYZ], queued=False, adjudicated=False) == "unanimous"
    assert item_source([XYZ, XYZ], queued=False, adjudicated=False) == "unanimous"
    assert item_source([XYZ, XYZ, YXZ], queued=False, adjudicated=False) == "majority"
    assert item_source([XYZ, YXZ], queued=False, adjudicated=False) == "unresolved"  # 1 vote each way on 1, 2
    assert item_source([XYZ, XYZ], queued=True, adjudicated=False) == "unresolved"
    assert item_source([XYZ, ZYX], queued=True, adjudicated=True) == "adjudicated"
    # same tiers, one all bad: not the same answer; a tie is no vote, so the order is settled
    assert item_source([Answer([[1, 2]], all_bad=True), Answer([[1, 2]])], queued=False,
                       adjudicated=False) == "majority"
    assert majority_settles([XYZ, TIED])  # 1 > 2 has one vote and nobody voted 2 > 1
