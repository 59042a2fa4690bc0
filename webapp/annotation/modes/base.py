"""What an annotation mode is: the parts of the annotate page and of a submission that differ from mode to mode.

A mode's answer is either tiers (ranking, pairwise: the Ranking row holds them and pairs are derived from them) or
labels on each shown response (thumbs, ratings: ResponseLabel rows, the Ranking row being the answer's envelope with
empty tiers). A tiers mode gives `tiers_from_post` and `entered_from_ranking`; a labels mode `labels_from_post`,
`labels_check` and `entered_from_labels`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from django.http import QueryDict

Tiers = list[list[int]]
# response id -> aspect -> value: a thumb is the aspect "" with 1.0 (up) or 0.0 (down), a rating an aspect's number
Labels = dict[int, dict[str, float]]


class StoredAnswer(Protocol):
    """What a mode reads of a stored answer (a Ranking) to put it back into its controls."""

    tiers: Tiers
    all_bad: bool


class LabelledProject(Protocol):
    """What a labels mode reads of its project to check an answer: the aspects rated and the scale."""

    @property
    def aspects(self) -> list[dict[str, str]]: ...

    rating_min: int
    rating_max: int


@dataclass(frozen=True)
class Entered:
    """An answer as the page's controls hold it: a value per response (its rank, its thumb, or its ratings by
    aspect) and the item's own fields (a choice, "all bad"); the mode's template reads them back into its
    controls."""

    per_response: Mapping[int, str | Mapping[str, str]] = field(default_factory=dict)
    fields: Mapping[str, str | bool] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AnnotationMode:
    name: str
    label: str
    # how many of an item's responses an annotator sees, given the project's responses per item
    responses_shown: Callable[[int], int]
    # what the annotator entered, put back into the controls when the server refuses the answer
    entered_from_post: Callable[[QueryDict], Entered]
    # A tiers mode: the posted form -> (tiers of response ids, best first; all bad), a ValidationError naming the
    # field at fault; and a stored answer (not a skip) put back into the controls, given the responses in the order
    # shown (A first).
    tiers_from_post: Callable[[QueryDict], tuple[Tiers, bool]] | None = None
    entered_from_ranking: Callable[[StoredAnswer, list[int]], Entered] | None = None
    # A labels mode: the posted form -> labels (checked by labels_check, not here); the labels checked against the
    # project and the responses shown (in the order shown, A first), cleaned, or a ValidationError naming the
    # response and aspect at fault; and stored labels put back into the controls.
    labels_from_post: Callable[[QueryDict], Labels] | None = None
    labels_check: Callable[[Labels, LabelledProject, Sequence[int]], Labels] | None = None
    entered_from_labels: Callable[[Labels, list[int]], Entered] | None = None

    def __post_init__(self) -> None:
        tiers_parts = (self.tiers_from_post, self.entered_from_ranking)
        labels_parts = (self.labels_from_post, self.labels_check, self.entered_from_labels)
        if not (all(tiers_parts) and not any(labels_parts)) and not (all(labels_parts) and not any(tiers_parts)):
            raise TypeError(f"mode {self.name!r}: give either the tiers functions or the labels functions, all of them")

    @property
    def gives_labels(self) -> bool:
        """True for a mode whose answer is labels on the responses (thumbs, ratings), False for tiers."""
        return self.labels_from_post is not None

    @property
    def template(self) -> str:
        """Its partials on the annotate page: response_control (in each response's header), item_controls (under
        the responses), submit (before Skip) and keys (its lines in the keys dialog)."""
        return f"annotation/modes/{self.name}.html"

    @property
    def script(self) -> str:
        """Its static script: registers the mode's keys and controls with static/annotation/annotate.js."""
        return f"annotation/modes/{self.name}.js"


def response_letter(index: int) -> str:
    """How the page names the response shown at `index` (0: A)."""
    return chr(ord("A") + index)
