"""What an annotation mode is: the parts of the annotate page and of a submission that differ from mode to mode."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from django.http import QueryDict

Tiers = list[list[int]]


class StoredAnswer(Protocol):
    """What a mode reads of a stored answer (a Ranking) to put it back into its controls."""

    tiers: Tiers
    all_bad: bool


@dataclass(frozen=True)
class Entered:
    """An answer as the page's controls hold it: a value per response (its rank, say) and the item's own fields
    (a choice, "all bad"); the mode's template reads them back into its controls."""

    per_response: Mapping[int, str] = field(default_factory=dict)
    fields: Mapping[str, str | bool] = field(default_factory=dict)


@dataclass(frozen=True)
class AnnotationMode:
    name: str
    label: str
    # how many of an item's responses an annotator sees, given the project's responses per item
    responses_shown: Callable[[int], int]
    # the posted form -> (tiers of response ids, best first; all bad); ValidationError naming the field at fault
    tiers_from_post: Callable[[QueryDict], tuple[Tiers, bool]]
    # what the annotator entered, put back into the controls when the server refuses the answer
    entered_from_post: Callable[[QueryDict], Entered]
    # a stored answer (not a skip) put back into the controls, given the responses in the order shown (A first)
    entered_from_ranking: Callable[[StoredAnswer, list[int]], Entered]

    @property
    def template(self) -> str:
        """Its partials on the annotate page: response_control (in each response's header), item_controls (under
        the responses), submit (before Skip) and keys (its lines in the keys dialog)."""
        return f"annotation/modes/{self.name}.html"

    @property
    def script(self) -> str:
        """Its static script: registers the mode's keys and controls with static/annotation/annotate.js."""
        return f"annotation/modes/{self.name}.js"
