"""Head-to-head win rates: how often people preferred one model's response over another's on the same prompt,
with ties counted as half a win, and a Wilson score interval at 95 %."""

import math
from collections.abc import Iterable
from dataclasses import dataclass

Z_95 = 1.959963984540054


@dataclass(frozen=True)
class WinRate:
    won: int
    tied: int
    lost: int
    low: float
    high: float

    @property
    def compared(self) -> int:
        return self.won + self.tied + self.lost

    @property
    def rate(self) -> float:
        return (self.won + self.tied / 2) / self.compared

    @property
    def text(self) -> str:
        """e.g. "75 % (30–95 %)": the rate and its 95 % interval, in whole percents."""
        return f"{round(100 * self.rate)} % ({round(100 * self.low)}–{round(100 * self.high)} %)"


def wilson_interval(score: float, count: int, *, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `score / count` (score may hold halves, for ties)."""
    if count <= 0:
        raise ValueError("a win rate needs one comparison or more")
    share = score / count
    denominator = 1 + z * z / count
    centre = (share + z * z / (2 * count)) / denominator
    spread = z * math.sqrt(share * (1 - share) / count + z * z / (4 * count * count)) / denominator
    return max(0.0, centre - spread), min(1.0, centre + spread)


def win_rate(outcomes: Iterable[float]) -> WinRate | None:
    """From one score per comparison (1 won, 0.5 tied, 0 lost); None when there is none."""
    scores = list(outcomes)
    if not scores:
        return None
    won, tied = scores.count(1.0), scores.count(0.5)
    low, high = wilson_interval(won + tied / 2, len(scores))
    return WinRate(won=won, tied=tied, lost=len(scores) - won - tied, low=low, high=high)


def outcome(new_position: int, compared_position: int) -> float:
    """The new response's score against the compared one, from their tiers (1 = best)."""
    # a lower tier wins as a higher score does
    return score_outcome(compared_position, new_position)


def score_outcome(new_score: float, compared_score: float) -> float:
    """The new response's score against the compared one, from a reward model's scores (higher wins)."""
    if new_score == compared_score:
        return 0.5
    return 1.0 if new_score > compared_score else 0.0
