"""Archive and delete projects, and what their files take on disk.

A project's own files are the uploads its import jobs still hold; the runs trained on it keep their own copy of
the data (their snapshot) and are not removed with it: each run is deleted on its own, and the project page
names them with their size. Only the project's owner or an admin may archive or delete it; a delete is refused
while one of its jobs (import, sampling, round scoring) or a run trained on it is queued or running.
"""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from webapp.accounts.roles import is_admin
from webapp.annotation.models import ImportJob, Project, RoundScoring, SamplingJob
from webapp.experiments.models import Run
from webapp.experiments.services.removal import Freed, RemovalRefused

ACTIVE_JOB = ("queued", "running")


def may_remove_project(user: AbstractBaseUser, project: Project) -> bool:
    return is_admin(user) or (project.owner_id is not None and project.owner_id == user.pk)


def _owner_check(user: AbstractBaseUser, project: Project) -> None:
    if not may_remove_project(user, project):
        raise RemovalRefused(f"project {project.name!r} is owned by someone else: only its owner or an admin may "
                             "archive or delete it", status=403)


def _upload_paths(project: Project) -> list[Path]:
    return [Path(path) for path in ImportJob.objects.filter(project=project).values_list("upload_path", flat=True)
            if path]


def project_disk_bytes(project: Project) -> int:
    """Bytes of the project's own files (uploads not yet removed by their import job)."""
    return sum(path.stat().st_size for path in _upload_paths(project) if path.is_file())


def project_runs(project: Project) -> list[Run]:
    """The runs trained on the project's data (and external runs logged into it)."""
    return list(Run.objects.filter(data_source__project_id=project.pk).order_by("pk"))


def project_archive(*, project_id: int, user: AbstractBaseUser, archived: bool = True) -> Project:
    """Hide the project from the lists (archived=False shows it again); its annotators no longer see it offered."""
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project_id)
        _owner_check(user, project)
        project.archived_at = timezone.now() if archived else None
        project.save(update_fields=["archived_at"])
    return project


def _busy(project: Project) -> list[str]:
    busy = [f"import job {pk}" for pk in ImportJob.objects.filter(project=project, status__in=ACTIVE_JOB)
            .values_list("pk", flat=True)]
    busy += [f"sampling job {pk}" for pk in SamplingJob.objects.filter(project=project, status__in=ACTIVE_JOB)
             .values_list("pk", flat=True)]
    busy += [f"round scoring {pk}" for pk in RoundScoring.objects.filter(round__project=project,
                                                                          status__in=ACTIVE_JOB).values_list("pk", flat=True)]
    busy += [f"run #{run.pk} ({run.status})" for run in project_runs(project)
             if run.status in (Run.Status.QUEUED, Run.Status.RUNNING)]
    return busy


def project_delete(*, project_id: int, user: AbstractBaseUser) -> Freed:
    """Remove the project with its prompts, responses, rankings, pairs, rounds and jobs, then its uploads."""
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project_id)
        _owner_check(user, project)
        busy = _busy(project)
        if busy:
            raise RemovalRefused(f"project {project.name!r} is in use by {', '.join(busy)}: wait for them to end or "
                                 "cancel them, then delete it")
        uploads = _upload_paths(project)
        freed = Freed(project_disk_bytes(project))
        project.delete()
        transaction.on_commit(lambda: [path.unlink(missing_ok=True) for path in uploads])
    return freed
