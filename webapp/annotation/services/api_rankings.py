"""An answer (a ranking, or labels in the thumbs and ratings modes) submitted through the API, as the token's user: the browser's own services underneath (an item is
leased to its annotator, then `ranking_submit`; a changed answer is reopened with `ranking_withdraw` first, as
the page's Back does), so its pairs, counts and exports are exactly those of the same ranking made on the page."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.annotation.models import Assignment, GoldAnswer, Prompt, Ranking
from webapp.annotation.modes.base import Labels
from webapp.annotation.selectors import answer_labels
from webapp.annotation.services.queue import _others_holding
from webapp.annotation.services.rankings import ranking_submit, ranking_withdraw


@dataclass(frozen=True)
class ApiRankingResult:
    ranking: Ranking
    changed: bool  # False: the same answer was stored already, nothing was written


def _same_answer(ranking: Ranking, tiers: Sequence[Sequence[int]], all_bad: bool, rationale: str,
                 labels: Labels | None) -> bool:
    if ranking.skipped or ranking.all_bad != all_bad or ranking.rationale != rationale.strip():
        return False
    if labels is not None:
        return answer_labels(ranking_id=ranking.pk) == {response: {aspect: float(value) for aspect, value in given.items()}
                          for response, given in labels.items()}
    if all_bad:
        return True
    given = [sorted(int(response) for response in tier) for tier in tiers if tier]
    return given == [sorted(tier) for tier in ranking.tiers]


def _lease_for_api(prompt: Prompt, annotator: AbstractBaseUser) -> Assignment:
    """The annotator's lease on `prompt`, taken as the queue would give it, refused when the item cannot be
    ranked (too few responses, taken out of the queue, or all the rankings it needs given by others)."""
    project = prompt.project
    if not prompt.annotatable:
        raise ValidationError(f"item {prompt.pk} is not offered for ranking in project {project.pk}")
    if prompt.response_count < 2:
        raise ValidationError(f"item {prompt.pk} has {prompt.response_count} response(s); ranking needs two or more")
    now = timezone.now()
    overlap_met = prompt.ranking_count + _others_holding(prompt, annotator, now) >= project.annotators_per_item
    if overlap_met and not GoldAnswer.objects.filter(prompt=prompt).exists():  # every annotator answers a gold item
        raise ValidationError(f"item {prompt.pk} has all the rankings it needs ({project.annotators_per_item} "
                              "per item, counting others' current leases)")
    assignment, _ = Assignment.objects.update_or_create(
        prompt=prompt, annotator=annotator,
        defaults={"status": Assignment.Status.LEASED, "leased_at": now,
                  "expires_at": now + timedelta(minutes=project.lease_minutes)},
    )
    return assignment


def api_ranking_submit(
    *, prompt_id: int, annotator: AbstractBaseUser, tiers: Sequence[Sequence[int]] = (), all_bad: bool = False,
    labels: Labels | None = None, rationale: str = "", suggestion_id: int | None = None,
) -> ApiRankingResult:
    """Store `annotator`'s ranking of the item (tiers of response ids, best first; a tier of several is a tie),
    or in a labels mode their labels ({response id: {aspect: value}}, as `ranking_submit` takes them).
    The same answer again writes nothing; a different one replaces the stored answer as the page's Back and
    submit do (within the project's lease time from the answer). All or nothing. `suggestion_id`: the item's
    suggestion the answer accepts, as `ranking_submit` takes it."""
    with transaction.atomic():
        prompt = Prompt.objects.select_for_update().select_related("project").get(pk=prompt_id)
        existing = Ranking.objects.filter(prompt=prompt, annotator=annotator).first()
        if existing is not None and _same_answer(existing, tiers, all_bad, rationale, labels):
            return ApiRankingResult(existing, changed=False)
        if existing is not None:
            ranking_withdraw(ranking_id=existing.pk, annotator=annotator)
            assignment_id = existing.assignment_id
        else:
            assignment_id = _lease_for_api(prompt, annotator).pk
        ranking = ranking_submit(assignment_id=assignment_id, annotator=annotator, tiers=tiers, all_bad=all_bad,
                                 labels=labels, rationale=rationale, suggestion_id=suggestion_id)
    return ApiRankingResult(ranking, changed=True)
