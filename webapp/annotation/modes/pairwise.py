"""Pairwise: two responses, A or B is better, a tie, or both bad; a choice submits at once."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import QueryDict

from webapp.annotation.modes.base import AnnotationMode, Entered, StoredAnswer, Tiers
from webapp.text import whole_number


def _response_id(post: QueryDict, name: str) -> int:
    value = post.get(name, "")
    number = whole_number(value)
    if number is None:
        raise ValidationError(f"{name}: a response number is expected, not {value[:40]!r}")
    return number


def tiers_from_post(post: QueryDict) -> tuple[Tiers, bool]:
    first, second = _response_id(post, "response_a"), _response_id(post, "response_b")
    if first == second:
        raise ValidationError(f"response_b: the same response as response_a ({first}); two different ones are compared")
    choices = {"a": [[first], [second]], "b": [[second], [first]], "tie": [[first, second]],
               "both_bad": [[first, second]]}
    choice = post.get("choice", "")
    if choice not in choices:
        raise ValidationError("choose A, B, tie or both bad")
    return choices[choice], choice == "both_bad"


def entered_from_post(post: QueryDict) -> Entered:
    return Entered(fields={"choice": post.get("choice", "")})


def entered_from_ranking(ranking: StoredAnswer, shown: list[int]) -> Entered:
    if ranking.all_bad:
        choice = "both_bad"
    elif len(ranking.tiers) == 1:
        choice = "tie"
    else:
        choice = "a" if ranking.tiers[0] == shown[:1] else "b"
    return Entered(fields={"choice": choice})


MODE = AnnotationMode(
    name="pairwise",
    label="Pairwise",
    responses_shown=lambda responses_per_item: 2,
    tiers_from_post=tiers_from_post,
    entered_from_post=entered_from_post,
    entered_from_ranking=entered_from_ranking,
)
