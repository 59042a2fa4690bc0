"""Thumbs: one response at a time, up or down (KTO's unpaired feedback); the item is submitted after its last
response. Stored as one ResponseLabel per response (aspect "", 1.0 up / 0.0 down)."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError
from django.http import QueryDict

from webapp.annotation.modes.base import AnnotationMode, Entered, LabelledProject, Labels
from webapp.annotation.modes.labels import letters, only_shown
from webapp.text import whole_number

THUMB = ""  # ResponseLabel.THUMB: the aspect of a thumb
UP, DOWN = 1.0, 0.0
POSTED = {"up": UP, "down": DOWN}


def _thumbs(post: QueryDict) -> dict[int, str]:
    """thumb_<response id> = up | down; empty ones (not given yet) left out."""
    return {number: value for key, value in post.items()
            if key.startswith("thumb_") and value and (number := whole_number(key.removeprefix("thumb_"))) is not None}


def labels_from_post(post: QueryDict) -> Labels:
    labels: Labels = {}
    for response, value in _thumbs(post).items():
        if value not in POSTED:
            raise ValidationError(f"thumb_{response}: up or down, not {value[:20]!r}")
        labels[response] = {THUMB: POSTED[value]}
    return labels


def labels_check(labels: Labels, project: LabelledProject, shown: Sequence[int]) -> Labels:
    """Every shown response has one thumb, up (1.0) or down (0.0)."""
    only_shown(labels, shown)
    named = letters(shown)
    if missing := [named[response] for response in shown if response not in labels]:
        raise ValidationError(f"give every response a thumb up or down: {', '.join(missing)} "
                              f"{'has' if len(missing) == 1 else 'have'} none")
    for response in shown:
        given = labels[response]
        if set(given) != {THUMB}:
            raise ValidationError(f"response {named[response]}: a thumb has no aspect; "
                                  f"{', '.join(repr(aspect) for aspect in given if aspect)} given")
        if given[THUMB] not in (UP, DOWN):
            raise ValidationError(f"response {named[response]}: a thumb is up (1) or down (0), not {given[THUMB]!r}")
    return {response: {THUMB: float(labels[response][THUMB])} for response in shown}


def entered_from_post(post: QueryDict) -> Entered:
    return Entered(per_response={response: value for response, value in _thumbs(post).items() if value in POSTED})


def entered_from_labels(labels: Labels, shown: list[int]) -> Entered:
    return Entered(per_response={response: "up" if given.get(THUMB) == UP else "down"
                                 for response, given in labels.items() if THUMB in given})


MODE = AnnotationMode(
    name="thumbs",
    label="Thumbs up / down",
    responses_shown=lambda responses_per_item: responses_per_item,
    entered_from_post=entered_from_post,
    labels_from_post=labels_from_post,
    labels_check=labels_check,
    entered_from_labels=entered_from_labels,
)
