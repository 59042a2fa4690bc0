"""Ranking: the annotator ranks every shown response (equal numbers are ties), or marks them all bad."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import QueryDict

from webapp.annotation.modes.base import AnnotationMode, Entered, StoredAnswer, Tiers
from webapp.text import whole_number


def tiers_from_post(post: QueryDict) -> tuple[Tiers, bool]:
    """rank_<response id> = number (1 best); equal numbers are ties. Unranked responses are left out."""
    by_rank: dict[int, list[int]] = {}
    for key, value in post.items():
        if key.startswith("rank_") and value.strip():
            try:
                by_rank.setdefault(int(value), []).append(int(key.removeprefix("rank_")))
            except ValueError:
                raise ValidationError(f"{key}: {value!r} is not a rank number") from None
    return [sorted(by_rank[rank]) for rank in sorted(by_rank)], post.get("all_bad") == "on"


def entered_from_post(post: QueryDict) -> Entered:
    ranks = {number: value for key, value in post.items()
             if key.startswith("rank_") and (number := whole_number(key.removeprefix("rank_"))) is not None}
    return Entered(per_response=ranks, fields={"all_bad": post.get("all_bad") == "on"})


def entered_from_ranking(ranking: StoredAnswer, shown: list[int]) -> Entered:
    if ranking.all_bad:
        return Entered(fields={"all_bad": True})
    ranks = {response: str(place) for place, tier in enumerate(ranking.tiers, start=1) for response in tier}
    return Entered(per_response=ranks, fields={"all_bad": False})


MODE = AnnotationMode(
    name="ranking",
    label="Ranking",
    responses_shown=lambda responses_per_item: responses_per_item,
    tiers_from_post=tiers_from_post,
    entered_from_post=entered_from_post,
    entered_from_ranking=entered_from_ranking,
)
