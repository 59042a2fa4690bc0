"""Answers (Ranking rows): submit, skip, withdraw, and the preference pairs a ranking yields.

Every mode's answer goes through `ranking_submit`: a tiers mode's (ranking, pairwise) is its tiers, from which pairs
are derived; a labels mode's (thumbs, ratings) is a ResponseLabel per response (and aspect), the Ranking row being
the answer's envelope (lease, overlap, Back, rationale, time) with empty tiers and no pairs.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from webapp.annotation.models import (
    Assignment,
    GoldAnswer,
    PreferencePair,
    Project,
    Prompt,
    Ranking,
    ResponseLabel,
    Suggestion,
)
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Labels, Tiers
from webapp.annotation.preferences import ranking_pairs
from webapp.annotation.selectors import (
    annotator_pause_blocking,
    rankings_with_pairs,
    response_texts,
    responses_shown,
)
from webapp.annotation.services.quality import annotator_quality_check
from webapp.annotation.services.queue import _locked_assignment, _others_holding
from webapp.annotation.suggestions import ItemSuggestion, item_suggestion
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


def _reopened(assignment: Assignment, existing: Ranking | None) -> bool:
    """Whether `existing`, the annotator's answer to the assignment's item, was reopened by Back to be replaced."""
    return existing is not None and assignment.status == Assignment.Status.LEASED


def ranking_submit(
    *,
    assignment_id: int,
    annotator: AbstractBaseUser,
    tiers: Sequence[Sequence[int]] = (),
    all_bad: bool = False,
    labels: Labels | None = None,
    rationale: str = "",
    seconds_spent: float = 0.0,
    suggestion_id: int | None = None,
) -> Ranking:
    """Record an answer: a ranking (tiers of response ids, best first) in a tiers mode, labels ({response id:
    {aspect: value}}, checked by the project's mode) in a labels mode. On an item reopened by Back the new answer
    replaces the kept one (its pairs or labels too); otherwise submitting again returns the first answer and
    writes nothing.

    `suggestion_id`: the machine suggestion the annotator accepted (a row of this item's suggestion); the answer
    records it as its origin (Ranking.suggestion, and ResponseLabel.suggestion on each label) only when the answer
    is that suggestion unchanged."""
    if len(rationale) > RATIONALE_MAX_CHARS:
        raise ValidationError(
            f"rationale: {len(rationale):,} characters; at most {RATIONALE_MAX_CHARS:,} are kept. Shorten it and submit again."
        )
    if "\x00" in rationale:  # pasted binary: Postgres text cannot hold it
        raise ValidationError("rationale: holds a NUL character (\\u0000), which cannot be stored; remove it and submit again")
    with transaction.atomic():
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        existing = Ranking.objects.filter(prompt=prompt, annotator=annotator).first()
        if existing is not None and not _reopened(assignment, existing):
            return existing
        project = prompt.project
        if pause := annotator_pause_blocking(project=project, annotator=annotator):
            raise ValidationError(f"you are paused in this project ({pause.reason}): "
                                  f"{pause.get_decision_display().lower()}")
        mode = annotation_mode(project.mode)
        order = [response.pk for response in responses_shown(prompt=prompt, annotator=annotator)]
        shown = set(order)
        cleaned_labels: Labels = {}
        if mode.gives_labels:
            if any(tiers) or all_bad:
                raise ValidationError(f"this project's mode is {mode.name}: its answer is labels on the responses, "
                                      "not a ranking")
            cleaned_labels = mode.labels_check(labels or {}, project, order)
            cleaned = []
        elif labels:
            raise ValidationError(f"this project's mode is {mode.name}: its answer is a ranking, not labels")
        else:
            # All bad: whatever ranks were filled in are ignored, every shown response is one tier and gives no pair.
            cleaned = [sorted(shown)] if all_bad else _validated_tiers(tiers, shown)
        now = timezone.now()
        # A reopened ranking holds its place in the overlap already; a new ranking, or one replacing a skip, takes one.
        takes_a_place = existing is None or existing.skipped
        # every annotator answers a gold item: the overlap does not bound it
        is_gold = GoldAnswer.objects.filter(prompt=prompt).exists()
        if takes_a_place and not is_gold and prompt.ranking_count + _others_holding(prompt, annotator, now) >= project.annotators_per_item:
            raise ValidationError(
                "your lease expired and this item has all the rankings it needs; skip it (S) to take the next one"
            )
        lease_seconds = (now - assignment.leased_at).total_seconds()
        origin = _accepted_suggestion(project, prompt, order, suggestion_id, tiers=cleaned, labels=cleaned_labels,
                                      all_bad=all_bad) if suggestion_id is not None else None
        answer = {
            "tiers": cleaned, "all_bad": all_bad, "skipped": False, "rationale": rationale.strip(),
            "seconds_spent": max(0.0, min(float(seconds_spent), lease_seconds)),
            "suggestion_id": origin.newest_id if origin is not None else None,
        }
        ranking = _answer_store(assignment, prompt, annotator, existing, answer, now)
        if takes_a_place:
            Prompt.objects.filter(pk=prompt.pk).update(ranking_count=F("ranking_count") + 1)
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SUBMITTED)
        if mode.gives_labels:
            _store_labels(ranking, project, cleaned_labels, origin.parts if origin is not None else {})
        elif not all_bad:
            _store_pairs(ranking, project)
        if is_gold:
            annotator_quality_check(project=project, annotator=annotator)
    return ranking


def _accepted_suggestion(
    project: Project, prompt: Prompt, order: list[int], suggestion_id: int, *, tiers: Tiers, labels: Labels,
    all_bad: bool,
) -> ItemSuggestion | None:
    """The item's suggestion the annotator accepted, when the answer is exactly it; None when they changed it.
    A suggestion the annotator could not have been shown (another item's, or a project that does not show them
    while annotating) is refused."""
    if project.suggestions_display != Project.SuggestionDisplay.SHOWN:
        raise ValidationError(f"suggestion: this project does not show suggestions while annotating (its setting: "
                              f"{project.get_suggestions_display_display().lower()}); none can be accepted")
    row = Suggestion.objects.filter(pk=suggestion_id).first()
    if row is None or row.prompt_id != prompt.pk:
        raise ValidationError(f"suggestion: suggestion {suggestion_id} is not one of this item's (item "
                              f"{prompt.external_id!r})")
    suggestion = item_suggestion(project=project, prompt_id=prompt.pk, shown=order, source_of=row)
    if suggestion is None or not suggestion.complete or all_bad:
        return None
    unchanged = suggestion.labels == labels if labels else suggestion.tiers == [sorted(tier) for tier in tiers]
    return suggestion if unchanged else None


def _store_labels(ranking: Ranking, project: Project, labels: Labels,
                  origins: dict[tuple[int | None, str], int]) -> None:
    """`origins`: (response, aspect) -> the suggestion row a label was accepted from."""
    ResponseLabel.objects.bulk_create(
        ResponseLabel(project=project, prompt_id=ranking.prompt_id, response_id=response, ranking=ranking,
                      annotator_id=ranking.annotator_id, aspect=aspect, value=value,
                      suggestion_id=origins.get((response, aspect)))
        for response, given in labels.items() for aspect, value in given.items()
    )


def _answer_store(
    assignment: Assignment, prompt: Prompt, annotator: AbstractBaseUser, existing: Ranking | None, answer: dict,
    now: datetime,
) -> Ranking:
    """A new Ranking row, or the reopened one given the new answer in place (its old pairs and labels removed)."""
    if existing is None:
        return Ranking.objects.create(assignment=assignment, prompt=prompt, annotator=annotator, **answer)
    PreferencePair.objects.filter(ranking=existing).delete()
    ResponseLabel.objects.filter(ranking=existing).delete()
    # created_at is when the answer was given: Back offers the latest, within the lease time from it.
    Ranking.objects.filter(pk=existing.pk).update(created_at=now, **answer)
    existing.refresh_from_db()
    return existing


def ranking_skip(*, assignment_id: int, annotator: AbstractBaseUser) -> Ranking:
    """Give the item back for others; it is not offered to this annotator again. On an item reopened by Back the
    skip replaces the kept answer (its pairs or labels too)."""
    with transaction.atomic():
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        existing = Ranking.objects.filter(prompt=prompt, annotator=annotator).first()
        if existing is not None and not _reopened(assignment, existing):
            return existing
        frees_a_place = existing is not None and not existing.skipped
        answer = {"tiers": [], "all_bad": False, "skipped": True, "rationale": "", "seconds_spent": 0.0,
                  "suggestion_id": None}
        ranking = _answer_store(assignment, prompt, annotator, existing, answer, timezone.now())
        if frees_a_place:
            Prompt.objects.filter(pk=prompt.pk).update(ranking_count=F("ranking_count") - 1)
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.SKIPPED)
    return ranking


def ranking_withdraw(*, ranking_id: int, annotator: AbstractBaseUser) -> Ranking:
    """Reopen one's own answer (a ranking or a skip) to change it: the item is leased to its annotator again.

    The answer stays stored (with its pairs, in exports and training) until a new answer or a skip on the item
    replaces it, so a reopened item left alone loses nothing. Allowed within the project's lease time after
    answering, so a reopened item is held no longer than a lease. Reopening an answer already reopened returns it.
    """
    with transaction.atomic():
        assignment_id = Ranking.objects.filter(pk=ranking_id, annotator=annotator).values_list(
            "assignment_id", flat=True
        ).first()
        if assignment_id is None:
            raise ValidationError(f"answer {ranking_id} is not yours or does not exist")
        assignment, prompt = _locked_assignment(assignment_id, annotator)
        ranking = Ranking.objects.get(pk=ranking_id)
        if _reopened(assignment, ranking):  # a second Back sent meanwhile reopened it already
            return ranking
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
        if ranking.skipped and (
            prompt.ranking_count + _others_holding(prompt, annotator, now) >= project.annotators_per_item
        ):
            raise ValidationError(
                f"{prompt.external_id!r} has been given to someone else since you skipped it; it cannot be reopened"
            )
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
