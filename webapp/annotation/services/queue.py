"""The assignment queue: who is leased which item next.

The queue's promise (never past the overlap, never twice to one person, with many people asking at once)
rests on one rule: a prompt's leases and rankings change only while its row is locked. `assignment_lease_next`
locks a candidate with SELECT ... FOR UPDATE SKIP LOCKED (on SQLite, IMMEDIATE transactions serialise
writers instead) and counts again after locking; `ranking_submit` (services.rankings) locks the same row and
checks the overlap once more, since a lease may have expired and been handed to someone else meanwhile.
"""

import math
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp.annotation.models import Assignment, Project, Prompt, Ranking
from webapp.annotation.selectors import annotator_pause_blocking
from webapp.annotation.suggestions import by_uncertainty, item_confidence

_LEASE_ATTEMPTS = 20

# A lease holds a place in the overlap unless its item is reopened over a ranking, which holds that place already
# (Back keeps the answer until a new one replaces it); a reopened skip held no place, so its lease does.
_HOLDS_A_PLACE = Q(ranking__isnull=True) | Q(ranking__skipped=True)


def _active_leases(now, *, excluding: AbstractBaseUser | None = None) -> Subquery:
    leases = Assignment.objects.filter(
        _HOLDS_A_PLACE, prompt=OuterRef("pk"), status=Assignment.Status.LEASED, expires_at__gt=now
    )
    if excluding is not None:
        leases = leases.exclude(annotator=excluding)
    return Subquery(leases.values("prompt").annotate(count=Count("pk")).values("count"), output_field=IntegerField())


def _others_holding(prompt: Prompt, annotator: AbstractBaseUser, now) -> int:
    return (
        Assignment.objects.filter(_HOLDS_A_PLACE, prompt=prompt, status=Assignment.Status.LEASED, expires_at__gt=now)
        .exclude(annotator=annotator)
        .count()
    )


def _in_queue_order(candidates: QuerySet[Prompt], project: Project) -> QuerySet[Prompt]:
    """The candidates (annotated with `load`) in the project's queue order: the least loaded first, then by id; in
    the uncertainty order, the least confident suggestion first among equally loaded items."""
    if project.queue_order == Project.QueueOrder.UNCERTAINTY:
        return by_uncertainty(candidates.annotate(confidence=item_confidence(project)))
    return candidates.order_by("load", "id")


def assignment_lease_next(*, project: Project, annotator: AbstractBaseUser) -> Assignment | None:
    """The annotator's current lease in `project`, else nothing while a pause holds them, else a gold item when one
    is due (`gold_is_due`), else a new lease on the least-annotated open item."""
    now = timezone.now()
    overlap = project.annotators_per_item
    if annotator_pause_blocking(project=project, annotator=annotator) is not None:
        return None
    with transaction.atomic():
        current = (
            Assignment.objects.filter(
                prompt__project=project, annotator=annotator, status=Assignment.Status.LEASED, expires_at__gt=now
            )
            .select_related("prompt")
            .order_by("leased_at")
            .first()
        )
        if current is not None:
            return current
        # Every answer (ranking or skip) is a Ranking row, kept while its item is reopened, so an item whose
        # reopened lease ran out is not offered to its annotator again as a new one.
        finished = Ranking.objects.filter(annotator=annotator, prompt__project=project)
        gold = _gold_item_due(project, finished)
        if gold is not None:
            return _lease(gold, annotator, project, now)
        refused: list[int] = []
        for _ in range(_LEASE_ATTEMPTS):
            candidates = (
                Prompt.objects.filter(
                    project=project, annotatable=True, response_count__gte=2, ranking_count__lt=overlap,
                    gold__isnull=True,
                )
                .exclude(pk__in=finished.values("prompt_id"))
                .exclude(pk__in=refused)
                .annotate(load=F("ranking_count") + Coalesce(_active_leases(now, excluding=annotator), Value(0)))
                .filter(load__lt=overlap)
            )
            prompt = _in_queue_order(candidates, project).select_for_update(skip_locked=True, of=("self",)).first()
            if prompt is None:
                return None
            # Counted again under the lock: the candidate query's snapshot may predate a lease just committed.
            prompt.refresh_from_db(fields=["ranking_count"])
            if prompt.ranking_count + _others_holding(prompt, annotator, now) >= overlap:
                refused.append(prompt.pk)
                continue
            return _lease(prompt, annotator, project, now)
    return None


def _lease(prompt: Prompt, annotator: AbstractBaseUser, project: Project, now) -> Assignment:
    assignment, _ = Assignment.objects.update_or_create(
        prompt=prompt,
        annotator=annotator,
        defaults={
            "status": Assignment.Status.LEASED,
            "leased_at": now,
            "expires_at": now + timedelta(minutes=project.lease_minutes),
        },
    )
    return assignment


def gold_is_due(item_number: int, *, onboarding: int, rate: float) -> bool:
    """Whether an annotator's `item_number`-th item in a project (1 for their first; answers and skips both count)
    is a gold one: the first `onboarding` are, then one whenever ⌊k·rate⌋ grows, so a rate of 0.1 makes every tenth
    item gold. It depends on k alone, so the same annotator sees the same mix on any replay; an empty normal queue
    does not bring gold forward (gold checks work, it is not work of its own)."""
    if item_number <= onboarding:
        return True
    return math.floor(item_number * rate + 1e-9) > math.floor((item_number - 1) * rate + 1e-9)


def _gold_item_due(project: Project, finished) -> Prompt | None:
    """The gold item to lease next when one is due (`gold_is_due`): the oldest gold item the annotator has not
    answered or skipped. Gold items are given to every annotator, outside the overlap, and never by the normal
    queue; when none is left for them, the due place goes to a normal item."""
    if not project.gold_onboarding and not project.gold_rate:
        return None
    if not gold_is_due(finished.count() + 1, onboarding=project.gold_onboarding, rate=project.gold_rate):
        return None
    return (
        Prompt.objects.filter(project=project, annotatable=True, response_count__gte=2, gold__isnull=False)
        .exclude(pk__in=finished.values("prompt_id"))
        .order_by("id")
        .first()
    )


def _locked_assignment(assignment_id: int, annotator: AbstractBaseUser) -> tuple[Assignment, Prompt]:
    try:
        assignment = Assignment.objects.select_related("prompt__project").get(pk=assignment_id, annotator=annotator)
    except Assignment.DoesNotExist:
        raise ValidationError(f"assignment {assignment_id} is not yours or does not exist") from None
    prompt = Prompt.objects.select_for_update().select_related("project").get(pk=assignment.prompt_id)
    return assignment, prompt
