import math

import pytest

from webapp.experiments.downsampling import downsample


def test_short_series_is_returned_whole():
    series = downsample([1, 2, 3], [0.5, 0.25, 0.125], 2000)
    assert series.x == [1, 2, 3] and series.y == [0.5, 0.25, 0.125]


def test_long_series_keeps_at_most_max_points_with_first_last_and_a_single_spike():
    count = 100_000
    xs = list(range(1, count + 1))
    ys = [math.sin(x / 1000) for x in xs]
    ys[54_321] = 50.0  # one spike among 100k points
    ys[77_777] = -40.0
    series = downsample(xs, ys, 2000)
    assert len(series.x) <= 2000
    assert series.x[0] == 1 and series.x[-1] == count
    assert max(series.y) == 50.0 and min(series.y) == -40.0
    assert series.x[series.y.index(50.0)] == 54_322
    assert series.x == sorted(series.x)


def test_non_finite_values_are_returned_as_markers_not_dropped():
    xs = list(range(10_000))
    ys = [1.0] * 10_000
    ys[10], ys[20], ys[9_999] = math.nan, math.inf, -math.inf
    series = downsample(xs, ys, 100)
    assert list(zip(series.nonfinite_x, series.nonfinite, strict=True)) == [
        (10, "NaN"), (20, "Infinity"), (9_999, "-Infinity")
    ]
    assert all(math.isfinite(y) for y in series.y)
    assert series.size <= 100


def test_constant_x_still_respects_the_budget():
    series = downsample([5] * 5000, [float(i % 7) for i in range(5000)], 50)
    assert len(series.x) <= 50 and max(series.y) == 6.0 and min(series.y) == 0.0


def test_mismatched_lengths_and_tiny_budgets_are_refused():
    with pytest.raises(ValueError, match="x has 2 points but y has 1"):
        downsample([1, 2], [1.0], 100)
    with pytest.raises(ValueError, match="at least 4"):
        downsample([1], [1.0], 2)
