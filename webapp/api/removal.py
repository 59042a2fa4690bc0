"""API endpoints: archive and delete runs, checkpoints and projects, and a run's disk usage.

They hang on the runs' and the projects' routers (a path that router answers already, e.g. DELETE /runs/{id}
beside GET /runs/{id}, must be on the same router). A run or a project the token's user does not reach is a
404, as one that does not exist; one they reach but did not launch or own (and they are no admin) is a 403;
a refusal of the state (a running run, a checkpoint in use, a busy project) is a 409 saying which.
"""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest
from ninja import Field, Schema
from ninja.errors import HttpError

from webapp.annotation.services.removal import project_archive, project_delete
from webapp.api.auth import researcher_only
from webapp.api.projects import project_or_404
from webapp.api.projects import router as projects_router
from webapp.api.runs import router as runs_router
from webapp.api.runs import run_or_404
from webapp.api.schemas import BodyIn, Detail
from webapp.experiments.selectors import disk_size_text, run_disk_bytes
from webapp.experiments.services.removal import (
    Freed,
    RemovalRefused,
    checkpoint_delete,
    run_archive,
    run_delete,
)

REFUSALS = {403: Detail, 404: Detail, 409: Detail}


class ArchiveIn(BodyIn):
    archived: bool = Field(True, description="false unarchives: the item shows in the lists again.")


class ArchivedOut(Schema):
    id: int
    archived_at: datetime | None = Field(description="When it was archived; null when it is not.")


class FreedOut(Schema):
    freed_bytes: int = Field(description="Bytes of the files removed (checkpoints, samples, data, logs).")
    freed: str = Field(description='The same in words: "1.9 GB".')


class DiskOut(Schema):
    bytes: int
    text: str


def _freed(freed: Freed) -> dict:
    return {"freed_bytes": freed.bytes, "freed": freed.text}


def _refused(error: RemovalRefused) -> HttpError:
    return HttpError(error.status, error.message)


@runs_router.post("/{int:run_id}/archive", response={200: ArchivedOut, **REFUSALS}, summary="Archive or unarchive a run")
@researcher_only
def run_archive_endpoint(request: HttpRequest, run_id: int, body: ArchiveIn) -> dict:
    """An archived run is left out of GET /runs unless `archived=only` or `archived=all` asks for it."""
    run = run_or_404(request, run_id)
    try:
        run = run_archive(run_id=run.pk, user=request.auth, archived=body.archived)
    except RemovalRefused as error:
        raise _refused(error) from None
    return {"id": run.pk, "archived_at": run.archived_at}


@runs_router.get("/{int:run_id}/disk", response={200: DiskOut, 404: Detail}, summary="A run's disk usage")
@researcher_only
def run_disk_endpoint(request: HttpRequest, run_id: int) -> dict:
    size = run_disk_bytes(run_or_404(request, run_id))
    return {"bytes": size, "text": disk_size_text(size)}


@runs_router.delete("/{int:run_id}", response={200: FreedOut, **REFUSALS}, summary="Delete a run and its files")
@researcher_only
def run_delete_endpoint(request: HttpRequest, run_id: int) -> dict:
    """Its rows (metrics, samples, checkpoints) and then its directory; a queued or running run is a 409."""
    run = run_or_404(request, run_id)
    try:
        return _freed(run_delete(run_id=run.pk, user=request.auth))
    except RemovalRefused as error:
        raise _refused(error) from None


@runs_router.delete("/{int:run_id}/checkpoints/{int:checkpoint_id}", response={200: FreedOut, **REFUSALS},
                    summary="Delete one checkpoint of a run")
@researcher_only
def checkpoint_delete_endpoint(request: HttpRequest, run_id: int, checkpoint_id: int) -> dict:
    """Refused (409) while the run is queued or running or while a run, a sampling job or a round scoring uses
    the checkpoint, naming them."""
    run = run_or_404(request, run_id)
    if not run.checkpoints.filter(pk=checkpoint_id).exists():
        raise HttpError(404, f"run {run.pk} has no checkpoint {checkpoint_id}")
    try:
        return _freed(checkpoint_delete(checkpoint_id=checkpoint_id, user=request.auth))
    except RemovalRefused as error:
        raise _refused(error) from None


@projects_router.post("/{project_id}/archive", response={200: ArchivedOut, **REFUSALS},
                      summary="Archive or unarchive a project")
@researcher_only
def project_archive_endpoint(request: HttpRequest, project_id: int, body: ArchiveIn) -> dict:
    project = project_or_404(request, project_id)
    try:
        project = project_archive(project_id=project.pk, user=request.auth, archived=body.archived)
    except RemovalRefused as error:
        raise _refused(error) from None
    return {"id": project.pk, "archived_at": project.archived_at}


@projects_router.delete("/{project_id}", response={200: FreedOut, **REFUSALS},
                        summary="Delete a project and its files")
@researcher_only
def project_delete_endpoint(request: HttpRequest, project_id: int) -> dict:
    """Its prompts, responses, rankings, pairs, rounds and jobs, then its uploads; the runs trained on it stay
    (each keeps its own copy of the data). Refused (409) while a job of it or a run on it is queued or running."""
    project = project_or_404(request, project_id)
    try:
        return _freed(project_delete(project_id=project.pk, user=request.auth))
    except RemovalRefused as error:
        raise _refused(error) from None

