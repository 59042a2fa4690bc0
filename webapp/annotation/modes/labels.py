"""What the two labels modes (thumbs, ratings) share: checking that an answer labels exactly the shown responses."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError

from webapp.annotation.modes.base import Labels, response_letter


def letters(shown: Sequence[int]) -> dict[int, str]:
    """Response id -> the letter the page shows it under."""
    return {response: response_letter(index) for index, response in enumerate(shown)}


def only_shown(labels: Labels, shown: Sequence[int]) -> None:
    """ValidationError when the answer labels a response the annotator was not shown."""
    if unknown := sorted(set(labels) - set(shown)):
        raise ValidationError(f"the answer labels response(s) {', '.join(map(str, unknown))}, not shown for this item "
                              f"(those are {', '.join(map(str, shown))})")
