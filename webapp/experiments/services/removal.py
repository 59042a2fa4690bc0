"""Archive and delete runs and checkpoints, and what their files take on disk.

Archiving only hides (archived_at); deleting removes the rows and, once the transaction has committed, the files
(the run's directory under RUNS_DIR: its checkpoints, samples, training data snapshot and logs), and says how many
bytes that freed. Only the run's creator or an admin may do either. A run that is queued or running is refused
(cancel it first), and so is a checkpoint that a queued or running run, sampling job or round scoring uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from webapp.accounts.roles import is_admin
from webapp.experiments.models import ModelRef, Run
from webapp.experiments.selectors import directory_size, disk_size_text, run_paths
from webapp.experiments.services.runs import _remove_run_directories


class RemovalRefused(Exception):
    """Why an archive or a delete was refused, in words for the page and the API."""

    def __init__(self, message: str, *, status: int = 409) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class Freed:
    """What a delete removed from disk."""

    bytes: int

    @property
    def text(self) -> str:
        return disk_size_text(self.bytes)


def may_remove_run(user: AbstractBaseUser, run: Run) -> bool:
    return is_admin(user) or (run.created_by_id is not None and run.created_by_id == user.pk)


def _owner_check(user: AbstractBaseUser, run: Run) -> None:
    if not may_remove_run(user, run):
        raise RemovalRefused(f"run #{run.pk} was launched by someone else: only they or an admin may archive or "
                             "delete it", status=403)


def run_archive(*, run_id: int, user: AbstractBaseUser, archived: bool = True) -> Run:
    """Hide the run from the lists (archived=False shows it again). A running run may be archived too: it runs on."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        _owner_check(user, run)
        run.archived_at = timezone.now() if archived else None
        run.save(update_fields=["archived_at"])
    return run


def checkpoint_users(paths: list[str]) -> dict[str, list[str]]:
    """For each checkpoint path, what still needs it: queued or running runs whose config names it, and queued or
    running sampling jobs and round scorings that read it."""
    from webapp.annotation.models import RoundScoring, SamplingJob
    from webapp.experiments.selectors import runs_using_models

    users: dict[str, list[str]] = {}
    for path, runs in runs_using_models(paths).items():
        for run in runs:
            if run.status in (Run.Status.QUEUED, Run.Status.RUNNING):
                users.setdefault(path, []).append(f"run #{run.pk} ({run.status})")
    active = (SamplingJob.Status.QUEUED, SamplingJob.Status.RUNNING)
    for job_id, path in SamplingJob.objects.filter(model_path__in=paths, status__in=active).values_list("pk", "model_path"):
        users.setdefault(path, []).append(f"sampling job {job_id}")
    scorings = RoundScoring.objects.filter(checkpoint_path__in=paths, status__in=active)
    for scoring_id, path, round_number in scorings.values_list("pk", "checkpoint_path", "round__number"):
        users.setdefault(path, []).append(f"the scoring of round {round_number} (job {scoring_id})")
    return users


def _in_use_check(checkpoints: list[ModelRef]) -> None:
    users = checkpoint_users([model.path for model in checkpoints])
    named = [f"step {model.step}: {', '.join(users[model.path])}" for model in checkpoints if model.path in users]
    if named:
        raise RemovalRefused("its checkpoints are in use, " + "; ".join(named) + ": wait for them to end or cancel them")


def run_delete(*, run_id: int, user: AbstractBaseUser) -> Freed:
    """Remove the run (its metric rows, samples, checkpoints' rows) and then its files; refused while it is queued
    or running, or while something else uses one of its checkpoints."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        _owner_check(user, run)
        if run.status in (Run.Status.QUEUED, Run.Status.RUNNING):
            raise RemovalRefused(f"run #{run.pk} is {run.status}: cancel it first, then delete it")
        checkpoints = list(ModelRef.objects.filter(run=run))
        _in_use_check(checkpoints)
        paths = run_paths(run)
        freed = Freed(sum(directory_size(str(path)) for path in paths))
        ModelRef.objects.filter(run=run).delete()
        run.delete()
        transaction.on_commit(lambda: _remove_run_directories(paths))
    return freed


def checkpoint_delete(*, checkpoint_id: int, user: AbstractBaseUser) -> Freed:
    """Remove one checkpoint of a run (its row, then its directory); refused while its run is queued or running
    (the run writes and rotates its checkpoints) or while a run, a sampling job or a round scoring uses it."""
    with transaction.atomic():
        checkpoint = ModelRef.objects.select_for_update().filter(pk=checkpoint_id, run__isnull=False).first()
        if checkpoint is None:
            raise RemovalRefused(f"checkpoint {checkpoint_id}: no such checkpoint of a run", status=404)
        run = Run.objects.select_for_update().get(pk=checkpoint.run_id)
        _owner_check(user, run)
        if run.status in (Run.Status.QUEUED, Run.Status.RUNNING):
            raise RemovalRefused(f"checkpoint at step {checkpoint.step}: its run #{run.pk} is {run.status}; "
                                 "delete its checkpoints once it has ended")
        _in_use_check([checkpoint])
        freed = Freed(directory_size(checkpoint.path))
        path = Path(checkpoint.path)
        checkpoint.delete()
        if run.checkpoint_path == str(path):
            latest = ModelRef.objects.filter(run=run).order_by("-step").values_list("path", flat=True).first()
            run.checkpoint_path = latest or ""
            run.save(update_fields=["checkpoint_path"])
        transaction.on_commit(lambda: _remove_run_directories([path]))
    return freed

