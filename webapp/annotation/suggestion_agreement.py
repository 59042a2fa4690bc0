"""How far a machine's answers (suggestions, a reward model's scores) agree with the people's (pure functions, no
database). Both sides are read as tiers of response ids, best first, equal ones in one tier: a person's answer
through `selectors.answers_as_tiers` (a ranking, a pairwise choice, thumbs, ratings), a machine's through
`suggested_tiers` or `feedback.tiers_from_scores`.

Over the responses both sides ordered, for one (item, human answer):
- the human pairs are the pairs of responses the answer puts in different tiers (its strict preferences);
- a pair agrees when the machine orders it the same way; a pair the machine ties counts as not agreeing (a tie is no
  answer to the question the person answered) and is counted apart, as `tied`;
- Kendall's tau-b between the machine's tiers and the answer's (agreement.kendall_tau_b), None when either puts every
  shared response in one tier.
Over a source's items: accuracy = agreed pairs / human pairs, with its 95 % Wilson interval, every pair counting once
(an item with more answers or more responses weighs more); tau = the mean of the answers' defined tau-b values, each
(item, human answer) counting once.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from numbers import Real

from webapp.annotation import feedback, winrates
from webapp.annotation.agreement import Tiers, kendall_tau_b, positions


@dataclass(frozen=True)
class Comparison:
    """One machine ordering against one human answer to the same item."""

    agreed: int
    tied: int
    pairs: int
    tau: float | None


def compare(machine: Tiers, human: Tiers) -> Comparison:
    """The human answer's strict pairs (over the responses both ordered) the machine orders alike or ties, and the
    tau-b between them."""
    machine_position, human_position = positions(machine), positions(human)
    agreed = tied = pairs = 0
    for first, second in combinations(sorted(machine_position.keys() & human_position.keys()), 2):
        human_order = _sign(human_position[first] - human_position[second])
        if human_order == 0:
            continue
        pairs += 1
        machine_order = _sign(machine_position[first] - machine_position[second])
        if machine_order == 0:
            tied += 1
        elif machine_order == human_order:
            agreed += 1
    return Comparison(agreed=agreed, tied=tied, pairs=pairs, tau=kendall_tau_b(machine_position, human_position))


def _sign(value: int) -> int:
    return (value > 0) - (value < 0)


@dataclass(frozen=True)
class HumanAgreement:
    """A machine's agreement with the people over the items both answered (the module's definitions)."""

    items: int
    answers: int
    pairs: int
    agreed: int
    tied: int
    tau: float | None
    # the answers whose tau-b is defined: what `tau` averages
    tau_answers: int
    # answers to these items left out because they accepted a machine suggestion
    left_out: int = 0

    @property
    def accuracy(self) -> float | None:
        return self.agreed / self.pairs if self.pairs else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return winrates.wilson_interval(self.agreed, self.pairs) if self.pairs else None

    @property
    def low(self) -> float | None:
        return self.interval[0] if self.pairs else None

    @property
    def high(self) -> float | None:
        return self.interval[1] if self.pairs else None

    @property
    def text(self) -> str:
        """e.g. "75 % (41–93 %) of 12 pairs": the accuracy and its 95 % interval, in whole percents."""
        if not self.pairs:
            return "no human pair to compare"
        low, high = self.interval
        return (f"{round(100 * self.accuracy)} % ({round(100 * low)}–{round(100 * high)} %) of {self.pairs} "
                f"pair{'s' if self.pairs != 1 else ''}")


def human_agreement(machine: Mapping[int, Tiers], answers: Mapping[int, Iterable[Tiers]], *,
                    left_out: Mapping[int, int] | None = None) -> HumanAgreement:
    """A machine's tiers per item against the human answers per item (item ids alike); `left_out` counts, per item,
    the answers that accepted a suggestion (counted for the machine's items only)."""
    items = answered = pairs = agreed = tied = 0
    taus: list[float] = []
    for item, tiers in machine.items():
        comparisons = [compare(tiers, human) for human in answers.get(item, ())]
        if not comparisons:
            continue
        items += 1
        answered += len(comparisons)
        pairs += sum(comparison.pairs for comparison in comparisons)
        agreed += sum(comparison.agreed for comparison in comparisons)
        tied += sum(comparison.tied for comparison in comparisons)
        taus += [comparison.tau for comparison in comparisons if comparison.tau is not None]
    return HumanAgreement(items=items, answers=answered, pairs=pairs, agreed=agreed, tied=tied,
                          tau=sum(taus) / len(taus) if taus else None, tau_answers=len(taus),
                          left_out=sum((left_out or {}).get(item, 0) for item in machine))


RANKING_QUESTION = "ranking"


def suggested_tiers(ranking: object, per_response: Mapping[int, Iterable[object]]) -> Tiers | None:
    """One source's suggestion for one item as tiers: its ranking suggestion's value (tiers of response ids) when it
    has a readable one, else its per-response suggestions (thumbs 1/0, ratings) ordered by each response's mean value
    (as a person's labels are, feedback.tiers_from_scores); None when neither can be read."""
    if (tiers := _as_tiers(ranking)) is not None:
        return tiers
    scores = {response: sum(numbers) / len(numbers) for response, values in per_response.items()
              if (numbers := [float(value) for value in values if _is_number(value)])}
    return feedback.tiers_from_scores(scores) if scores else None


def _as_tiers(value: object) -> Tiers | None:
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(tier, list) and tier and all(_is_id(response) for response in tier) for tier in value):
        return None
    return [list(tier) for tier in value]


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    # a thumb may come as true/false from a file
    return isinstance(value, Real)
