"""Server-side downsampling of metric series that keeps spikes.

The x range is cut into equal buckets; in each bucket the points with the smallest and the largest y are
kept, as are the first and last points overall, so a single spike in 100k points is still drawn (MLflow's
stride sampling drops it). Non-finite values never take part in min/max: they are returned apart, to be
drawn as markers, and are never dropped unless they alone exceed the budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Series:
    """x and y of the finite points, and the x and spelling ("NaN", "Infinity", "-Infinity") of the others."""

    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    nonfinite_x: list[float] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.x) + len(self.nonfinite_x)


def spelling(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def min_max_indices(x: np.ndarray, y: np.ndarray, max_points: int) -> np.ndarray:
    """Sorted indices of the points to keep: first, last and per-bucket min and max; at most max_points.

    `x` must be non-decreasing and `y` finite.
    """
    count = len(x)
    if count <= max_points:
        return np.arange(count)
    buckets = max(1, (max_points - 2) // 2)
    span = x[-1] - x[0]
    if span > 0:
        bucket = np.minimum(((x - x[0]) / span * buckets).astype(np.int64), buckets - 1)
    else:
        bucket = np.minimum(np.arange(count) * buckets // count, buckets - 1)
    order = np.lexsort((y, bucket))
    sorted_buckets = bucket[order]
    starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
    ends = np.r_[starts[1:] - 1, count - 1]
    keep = np.concatenate([order[starts], order[ends], [0, count - 1]])
    return np.unique(keep)


def evenly_spaced(count: int, max_points: int) -> np.ndarray:
    if count <= max_points:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, max_points).round().astype(np.int64))


def downsample(x: Sequence[float], y: Sequence[float], max_points: int) -> Series:
    """At most `max_points` points of the series (x sorted ascending); non-finite y come back as markers."""
    if max_points < 4:
        raise ValueError(f"max_points must be at least 4, got {max_points}")
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.shape != ys.shape:
        raise ValueError(f"x has {xs.size} points but y has {ys.size}")
    finite = np.isfinite(ys)
    bad_x, bad_y = xs[~finite], ys[~finite]
    # Non-finite points are rare (a run stops on a NaN loss); they get what they need, up to half the budget.
    bad_keep = evenly_spaced(len(bad_x), max_points // 2)
    good_x, good_y = xs[finite], ys[finite]
    good_keep = min_max_indices(good_x, good_y, max_points - len(bad_keep))
    return Series(
        x=good_x[good_keep].tolist(),
        y=good_y[good_keep].tolist(),
        nonfinite_x=bad_x[bad_keep].tolist(),
        nonfinite=[spelling(value) for value in bad_y[bad_keep].tolist()],
    )


def exponential_moving_average(values: Sequence[float] | np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's EMA without debiasing: s[0] = v[0], s[i] = weight * s[i-1] + (1 - weight) * v[i].

    In closed form, so 100k values take milliseconds rather than a Python loop: within a block that starts after
    s[p], s[p+1+i] = weight**(i+1) * s[p] + (1 - weight) * sum_{j<=i} weight**(i-j) v[p+1+j]. The block is short
    enough that weight**length stays above 1e-150, so v / weight**k neither overflows nor loses the old terms.
    """
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0 or weight == 0:
        return values.copy()
    block = max(1, int(-150 / math.log10(weight)))
    smoothed = np.empty_like(values)
    previous = values[0]
    for start in range(0, values.size, block):
        chunk = values[start:start + block]
        powers = weight ** np.arange(1, chunk.size + 1)
        smoothed[start:start + chunk.size] = powers * (previous + (1 - weight) * np.cumsum(chunk / powers))
        previous = smoothed[start + chunk.size - 1]
    return smoothed
