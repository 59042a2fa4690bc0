"""Round scorings: a reward model's scores for every response of a round's items, computed on a GPU worker
(workers/scoring.py), from which the round's win rate by the reward model is read (selectors.round_rows)."""

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp import job_lifecycle as lifecycle
from webapp.annotation.models import Prompt, RewardScore, Round, RoundScoring
from webapp.celery_app import SCORE_ROUND
from webapp.experiments.models import Run
from webapp.queueing import publish_on_commit
from webapp.text import storable_text

SCORING_MESSAGE_KIND = "scoring"
REWARD_MODEL_KIND = "reward_model"


def reward_run_check(run: Run | None) -> str:
    """The checkpoint a round is scored with: that of a succeeded reward-model run; a ValidationError naming the
    reward_run field says why another run cannot score."""
    if run is None:
        raise ValidationError({"reward_run": "choose a reward-model run"})
    if run.kind != REWARD_MODEL_KIND:
        raise ValidationError({"reward_run": f"run #{run.pk} is a {run.get_kind_display()} run, not a reward model"})
    if run.status != Run.Status.SUCCEEDED:
        raise ValidationError({"reward_run": f"run #{run.pk} is {run.status}; only a succeeded run can score"})
    checkpoint = run.checkpoint_path.strip()
    if not checkpoint or not (Path(checkpoint) / "config.json").is_file():
        raise ValidationError({"reward_run": f"run #{run.pk} has no checkpoint to score with"
                                             f"{f' ({checkpoint} holds no config.json)' if checkpoint else ''}"})
    return checkpoint


def round_items(round_: Round):
    """The prompts whose responses a scoring scores: the round's items (a first round's prompts, a later round's
    new items with the compared response beside the new ones)."""
    return Prompt.objects.filter(round=round_)


def round_scoring_create(*, round_: Round, run: Run | None, created_by: AbstractBaseUser) -> RoundScoring:
    """Store a scoring of `round_` by the reward-model `run` and queue it on the gpu queue once committed; a
    scoring the broker cannot take is removed and QueueUnavailable (a ValidationError) says why."""
    checkpoint = reward_run_check(run)
    if not round_items(round_).exists():
        raise ValidationError({"round": f"round {round_.number} has no items to score"})
    with transaction.atomic():
        # the round's row locked: two requests at once cannot both queue a scoring of it
        Round.objects.select_for_update().filter(pk=round_.pk).first()
        if RoundScoring.objects.filter(round=round_, status__in=ROUND_SCORING.active).exists():
            raise ValidationError({"round": f"round {round_.number} is being scored already; wait for that scoring"})
        scoring = RoundScoring.objects.create(round=round_, reward_run=run, checkpoint_path=checkpoint,
                                              created_by=created_by, queued_at=timezone.now())
        scoring_id = scoring.pk
        publish_on_commit(SCORE_ROUND, kind=SCORING_MESSAGE_KIND, object_id=scoring_id,
                          on_failure=lambda reason: RoundScoring.objects.filter(
                              pk=scoring_id, status=RoundScoring.Status.QUEUED).delete())
    return scoring


def round_scoring_start(*, scoring_id: int) -> bool:
    return lifecycle.job_claim(ROUND_SCORING, scoring_id)


def round_scoring_heartbeat(*, scoring_id: int) -> None:
    lifecycle.job_heartbeat(ROUND_SCORING, scoring_id)


def round_scoring_progress(*, scoring_id: int, done: int, total: int | None = None) -> None:
    fields = {"progress_done": done} if total is None else {"progress_done": done, "progress_total": total}
    lifecycle.job_progress(ROUND_SCORING, scoring_id, **fields)


def round_scores_store(*, scoring_id: int, scores: Mapping[int, float]) -> None:
    """Store one batch's scores (response id -> score); a response scored before keeps its first score."""
    RewardScore.objects.bulk_create(
        [RewardScore(scoring_id=scoring_id, response_id=response_id, score=float(score))
         for response_id, score in scores.items()],
        ignore_conflicts=True,
    )


def round_scoring_succeed(*, scoring_id: int) -> bool:
    return lifecycle.job_succeed(ROUND_SCORING, scoring_id)


def round_scoring_fail(*, scoring_id: int, error: str) -> bool:
    return lifecycle.job_fail(ROUND_SCORING, scoring_id, error)


def round_scorings_fail_stale(*, now: datetime | None = None) -> list[int]:
    """Fail every running round scoring whose worker stopped sending heartbeats (killed or lost)."""
    return lifecycle.jobs_fail_stale(ROUND_SCORING, now=now)


def round_scorings_requeue_lost(*, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every round scoring queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    return lifecycle.jobs_requeue_lost(ROUND_SCORING, message_ids=message_ids, now=now)


def _stale_reason(scoring: RoundScoring) -> str:
    return (f"the worker stopped sending heartbeats (last at {lifecycle.last_heartbeat(scoring)}) after "
            f"{scoring.progress_done} of {scoring.progress_total} responses; score the round again")


ROUND_SCORING = lifecycle.JobKind(
    model=RoundScoring, noun="round scoring", message_kind=SCORING_MESSAGE_KIND, task_name=SCORE_ROUND,
    failed_fields=lambda reason: {"error": storable_text(reason)}, stale_reason=_stale_reason,
)
