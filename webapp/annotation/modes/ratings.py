"""Ratings: every shown response rated on each of the project's aspects (Project.aspects), a whole number on the
project's scale (rating_min..rating_max). Stored as one ResponseLabel per (response, aspect)."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError
from django.http import QueryDict

from webapp.annotation.modes.base import AnnotationMode, Entered, LabelledProject, Labels
from webapp.annotation.modes.labels import letters, only_shown
from webapp.text import whole_number

PREFIX = "rating_"


def _ratings(post: QueryDict) -> dict[int, dict[str, str]]:
    """rating_<response id>_<aspect name> = the rating; empty ones (not given yet) left out."""
    ratings: dict[int, dict[str, str]] = {}
    for key, value in post.items():
        if not key.startswith(PREFIX) or not value.strip():
            continue
        number, _, aspect = key.removeprefix(PREFIX).partition("_")
        response = whole_number(number)
        if response is not None and aspect:
            ratings.setdefault(response, {})[aspect] = value.strip()
    return ratings


def labels_from_post(post: QueryDict) -> Labels:
    labels: Labels = {}
    for response, given in _ratings(post).items():
        for aspect, value in given.items():
            try:
                labels.setdefault(response, {})[aspect] = float(int(value))
            except ValueError:
                raise ValidationError(f"{PREFIX}{response}_{aspect}: {value[:20]!r} is not a whole number") from None
    return labels


def labels_check(labels: Labels, project: LabelledProject, shown: Sequence[int]) -> Labels:
    """Every shown response rated on every aspect of the project, each a whole number within its scale."""
    only_shown(labels, shown)
    aspects = [aspect["name"] for aspect in project.aspects]
    named = letters(shown)
    for response, given in labels.items():
        if unknown := [aspect for aspect in given if aspect not in aspects]:
            raise ValidationError(f"response {named[response]}: {', '.join(map(repr, unknown))} is not an aspect of "
                                  f"this project (its aspects: {', '.join(aspects)})")
    missing = [f"{named[response]} {aspect}" for response in shown for aspect in aspects
               if aspect not in labels.get(response, {})]
    if missing:
        shown_missing = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise ValidationError(f"rate every response on every aspect: {shown_missing} not rated")
    low, high = project.rating_min, project.rating_max
    for response in shown:
        for aspect in aspects:
            value = labels[response][aspect]
            if not float(value).is_integer() or not low <= value <= high:
                raise ValidationError(f"response {named[response]}, {aspect}: {value:g} is not a whole number from "
                                      f"{low} to {high} (the project's scale)")
    return {response: {aspect: float(labels[response][aspect]) for aspect in aspects} for response in shown}


def entered_from_post(post: QueryDict) -> Entered:
    return Entered(per_response=_ratings(post))


def entered_from_labels(labels: Labels, shown: list[int]) -> Entered:
    return Entered(per_response={response: {aspect: f"{value:g}" for aspect, value in given.items()}
                                 for response, given in labels.items()})


MODE = AnnotationMode(
    name="ratings",
    label="Ratings",
    responses_shown=lambda responses_per_item: responses_per_item,
    entered_from_post=entered_from_post,
    labels_from_post=labels_from_post,
    labels_check=labels_check,
    entered_from_labels=entered_from_labels,
)
