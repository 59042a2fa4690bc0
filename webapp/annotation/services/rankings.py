"""Rankings: submit, skip, withdraw, and the preference pairs a ranking yields."""

from collections.abc import Sequence
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from webapp.annotation.models import Assignment, PreferencePair, Project, Prompt, Ranking
from webapp.annotation.preferences import ranking_pairs
from webapp.annotation.selectors import rankings_with_pairs, response_texts, responses_shown
from webapp.annotation.services.queue import _locked_assignment, _others_holding
from webapp.text import counted
from webapp.text_bounds import RATIONALE_MAX_CHARS


def _validated_tiers(tiers: Sequence[Sequence[int]], shown: set[int]) -> list[list[int]]:
    cleaned = [[int(response) for response in tier] for tier in tiers if tier]
    flat = [response for tier in cleaned for response in tier]
    if len(flat) != len(set(flat)):
        raise ValidationError("a response appears twice in the ranking")
    if set(flat) != shown:
        missing = len(shown - set(flat))
        raise ValidationError(
            f"rank every response: {missing} not ranked" if missing else "the ranking names responses not shown"
        )
    return cleaned


def ranking_submit(
    *,
    assignment_id: int,
    annotator: AbstractBaseUser,
    tiers: Sequence[Sequence[int]],
    all_bad: bool = False,
    rationale: str = "",
    seconds_spent: float = 0.0,
) -> Ranking:
    """Record a ranking (tiers of response ids, best first). Submitting again returns the first ranking."""
    if len(rationale) > RATIONALE_MAX_CHARS:
        raise ValidationError(
            f"rationale: {len(rationale):,} characters; at most {RATIONALE_MAX_CHARS:,} are kept. Shorten it and submit again."
        )
    if "\x00" in rationale:  # pasted binary: Postgres text cannot hold it
        raise ValidationError("rationale: holds a NUL character (\\u0000), which cannot be stored; remove it and submit again")
    with transaction.atomic():
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        existing = Ranking.objects.filter(prompt=prompt, annotator=annotator).first()
        if existing is not None:
            return existing
        project = prompt.project
        shown = {response.pk for response in responses_shown(prompt=prompt, annotator=annotator)}
        # All bad: whatever ranks were filled in are ignored, every shown response is one tier and gives no pair.
        cleaned = [sorted(shown)] if all_bad else _validated_tiers(tiers, shown)
        now = timezone.now()
        if prompt.ranking_count + _others_holding(prompt, annotator, now) >= project.annotators_per_item:
            raise ValidationError(
                "your lease expired and this item has all the rankings it needs; skip it (S) to take the next one"
            )
        lease_seconds = (now - assignment.leased_at).total_seconds()
        ranking = Ranking.objects.create(
            assignment=assignment,
            prompt=prompt,
            annotator=annotator,
            tiers=cleaned,
            all_bad=all_bad,
            rationale=rationale.strip(),
            seconds_spent=max(0.0, min(float(seconds_spent), lease_seconds)),
        )
        Prompt.objects.filter(pk=prompt.pk).update(ranking_count=F("ranking_count") + 1)
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SUBMITTED)
        if not all_bad:
            _store_pairs(ranking, project)
    return ranking


def ranking_skip(*, assignment_id: int, annotator: AbstractBaseUser) -> Ranking:
    """Give the item back for others; it is not offered to this annotator again."""
    with transaction.atomic():
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        existing = Ranking.objects.filter(prompt=prompt, annotator=annotator).first()
        if existing is not None:
            return existing
        ranking = Ranking.objects.create(assignment=assignment, prompt=prompt, annotator=annotator, skipped=True)
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SKIPPED)
    return ranking


def ranking_withdraw(*, ranking_id: int, annotator: AbstractBaseUser) -> Ranking:
    """Take back one's own answer (a ranking or a skip) to change it: the item is leased to its annotator again.

    Allowed within the project's lease time after answering, so a reopened item is held no longer than a lease.
    Returns the withdrawn ranking, no longer stored, so that its answer can be shown again.
    """
    with transaction.atomic():
        assignment_id = Ranking.objects.filter(pk=ranking_id, annotator=annotator).values_list(
            "assignment_id", flat=True
        ).first()
        if assignment_id is None:
            raise ValidationError(f"answer {ranking_id} is not yours or was already taken back")
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        # Read again under the prompt's lock: a second Back sent meanwhile may have withdrawn it already.
        ranking = Ranking.objects.filter(pk=ranking_id).first()
        if ranking is None:
            raise ValidationError(f"answer {ranking_id} was already taken back")
        project = prompt.project
        now = timezone.now()
        window = timedelta(minutes=project.lease_minutes)
        if now - ranking.created_at > window:
            age = int((now - ranking.created_at).total_seconds() // 60)
            raise ValidationError(
                f"an answer can be changed only within {counted(project.lease_minutes, 'minute')} (the project's "
                f"lease time); yours to {prompt.external_id!r} was given {counted(age, 'minute')} ago"
            )
        # A skip held no place in the overlap, so the item may have gone to someone else since.
        rankings_left = prompt.ranking_count - (0 if ranking.skipped else 1)
        if rankings_left + _others_holding(prompt, annotator, now) >= project.annotators_per_item:
            raise ValidationError(
                f"{prompt.external_id!r} has been given to someone else since you skipped it; it cannot be reopened"
            )
        ranking.delete()  # its preference pairs go with it (on_delete=CASCADE)
        if not ranking.skipped:
            Prompt.objects.filter(pk=prompt.pk).update(ranking_count=F("ranking_count") - 1)
        # leased_at stays: the queue shows a person's oldest lease first, so the reopened item comes before
        # the one they were on when they went back.
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.LEASED, expires_at=now + window)
    return ranking


def _store_pairs(ranking: Ranking, project: Project) -> None:
    """The ranking's pairs under the "all" strategy, as `preferences.ranking_pairs` decides them."""
    texts = response_texts(prompt_id=ranking.prompt_id)
    PreferencePair.objects.bulk_create(
        PreferencePair(
            project=project, prompt_id=ranking.prompt_id, ranking=ranking, chosen_id=pair.chosen,
            rejected_id=pair.rejected, weight=pair.weight, margin=pair.margin,
        )
        for pair in ranking_pairs(ranking.tiers, texts)
    )


@transaction.atomic
def preference_pairs_rebuild(*, project: Project) -> int:
    """Derive the pairs of every ranking again (imported pairs are kept); returns how many pairs exist."""
    PreferencePair.objects.filter(project=project, ranking__isnull=False).delete()
    for ranking in rankings_with_pairs(project_id=project.pk).iterator():
        _store_pairs(ranking, project)
    return PreferencePair.objects.filter(project=project).count()
