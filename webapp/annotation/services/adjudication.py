"""Adjudication: a researcher's decision on an item whose annotators disagree (webapp.annotation.label_sources has
the queue's rule). The decision is one annotator's answer taken as it is, or an answer the researcher gives in the
mode's terms (tiers of response ids; thumbs or ratings per response), always with a reason. Deciding again replaces
the decision: one Adjudication row an item."""

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.annotation.models import Adjudication, Prompt, Ranking, ResponseLabel
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Labels, Tiers
from webapp.text_bounds import RATIONALE_MAX_CHARS


def _reason_check(reason: str) -> str:
    cleaned = reason.strip()
    if not cleaned:
        raise ValidationError("reason: give the reason for the decision")
    if len(cleaned) > RATIONALE_MAX_CHARS:
        raise ValidationError(f"reason: at most {RATIONALE_MAX_CHARS} characters, got {len(cleaned)}")
    return cleaned


def _tiers_check(tiers: Sequence[Sequence[int]], responses: set[int]) -> Tiers:
    """Tiers of the item's own responses, each once, at least two of them ranked."""
    try:
        cleaned = [[int(response) for response in tier] for tier in tiers if tier]
    except (TypeError, ValueError):
        raise ValidationError("tiers: response ids, as lists of whole numbers") from None
    flat = [response for tier in cleaned for response in tier]
    if len(flat) != len(set(flat)):
        raise ValidationError("tiers: a response appears twice")
    if unknown := sorted(set(flat) - responses):
        raise ValidationError(f"tiers: response {unknown[0]} is not one of this item's")
    if len(flat) < 2:
        raise ValidationError("tiers: rank two responses or more")
    return cleaned


def _answered_responses(prompt: Prompt) -> list[int]:
    """The responses the item's labels answers labelled (the responses shown), else all of its responses."""
    labelled = sorted(set(ResponseLabel.objects.filter(prompt=prompt, ranking__isnull=False)
                          .values_list("response_id", flat=True)))
    return labelled or list(prompt.responses.order_by("id").values_list("pk", flat=True))


def _answer_of(prompt: Prompt, ranking_id: int) -> tuple[Tiers, Labels]:
    ranking = Ranking.objects.filter(pk=ranking_id, prompt=prompt, skipped=False).first()
    if ranking is None:
        raise ValidationError(f"answer: {ranking_id} is not an answer to this item (skips have none)")
    labels: Labels = {}
    for response, aspect, value in ranking.labels.order_by("id").values_list("response_id", "aspect", "value"):
        labels.setdefault(response, {})[aspect] = value
    return ranking.tiers, labels


@transaction.atomic
def adjudication_decide(
    *, prompt: Prompt, decided_by: AbstractBaseUser, reason: str, answer_id: int | None = None,
    tiers: Sequence[Sequence[int]] | None = None, labels: Labels | None = None,
) -> Adjudication:
    """Decide an item: take the answer `answer_id` (a Ranking of the item), or give `tiers` (ranking and pairwise
    modes) or `labels` (thumbs and ratings: {response id: {aspect: value}}, a thumb's aspect ""); `reason` required.
    Deciding again replaces the decision. ValidationError names the field at fault."""
    reason = _reason_check(reason)
    given = [name for name, value in (("answer", answer_id), ("tiers", tiers), ("labels", labels)) if value is not None]
    if len(given) != 1:
        raise ValidationError("answer: take one annotator's answer or give one, not "
                              + (" and ".join(given) if given else "neither"))
    project = prompt.project
    mode = annotation_mode(project.mode)
    if answer_id is not None:
        tiers, labels = _answer_of(prompt, answer_id)
        tiers, labels = (None, labels) if mode.gives_labels else (tiers, None)
    if mode.gives_labels:
        if labels is None:
            raise ValidationError(f"labels: a {project.mode} item is decided by labels on its responses, not tiers")
        checked = mode.labels_check(labels, project, _answered_responses(prompt))
        stored = {"tiers": [], "labels": {str(response): given for response, given in checked.items()}}
    else:
        if tiers is None:
            raise ValidationError(f"tiers: a {project.mode} item is decided by an order of its responses, not labels")
        responses = set(prompt.responses.values_list("pk", flat=True))
        stored = {"tiers": _tiers_check(tiers, responses), "labels": {}}
    decision, _ = Adjudication.objects.update_or_create(
        prompt=prompt, defaults={**stored, "reason": reason, "decided_by": decided_by, "decided_at": timezone.now()})
    return decision
