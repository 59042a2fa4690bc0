"""API endpoints: what a run made and where it came from — files an external run logs (artifacts), a checkpoint of a Preflab-trained run downloaded as a
tar built while it is sent (never whole in memory), and a run's lineage (data source → run → checkpoints →
annotation rounds sampled from them). Every endpoint is a researcher's; a run and its checkpoints are reached as
the run itself is (selectors.runs_visible_to), anything else is a 404.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import FileResponse, HttpRequest, StreamingHttpResponse
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from webapp.api.auth import researcher_only
from webapp.api.runs import run_or_404
from webapp.api.schemas import Detail
from webapp.experiments import selectors
from webapp.experiments.artifacts import (
    KIND_PATTERN,
    ArtifactError,
    artifact_path,
    artifact_store,
    run_artifact,
    run_artifacts,
)
from webapp.experiments.checkpoint_archive import archive_chunks, archive_members, archive_size
from webapp.experiments.lineage import run_lineage
from webapp.experiments.models import ModelRef
from webapp.uploads import body_left_unread, declared_length, size_text

router = Router(tags=["artifacts"])


@router.get("/checkpoints/{int:checkpoint_id}/archive", response={200: None, 404: Detail},
            openapi_extra={"responses": {200: {"content": {"application/x-tar": {"schema": {
                "type": "string", "format": "binary",
                "description": "The checkpoint's directory as a tar (files at its top level)."}}}}}},
            summary="Download a checkpoint of a run as a tar")
@researcher_only
def checkpoint_archive(request: HttpRequest, checkpoint_id: int) -> StreamingHttpResponse:
    """Every file of the checkpoint's directory (weights, config, tokenizer; the optimizer state where the
    checkpoint kept it), streamed as it is read, with its length. `Client.download_checkpoint` unpacks it into a
    directory `from_pretrained` loads."""
    checkpoint = (selectors.models_visible_to(request.auth)
                  .filter(pk=checkpoint_id, source=ModelRef.Source.CHECKPOINT).select_related("run").first())
    if checkpoint is None:
        raise HttpError(404, f"there is no checkpoint {checkpoint_id}")
    directory = Path(checkpoint.path)
    if not directory.is_dir():
        raise HttpError(404, f"checkpoint {checkpoint_id} ({checkpoint.name}): its directory is gone from the server")
    members = archive_members(directory)
    response = StreamingHttpResponse(archive_chunks(members), content_type="application/x-tar")
    response["Content-Length"] = str(archive_size(members))
    name = f"run-{checkpoint.run_id}-step-{checkpoint.step}.tar"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


class ProjectRef(Schema):
    id: int
    name: str


class LineageData(Schema):
    type: str = Field(description="arithmetic, project_pairs, project_prompts, upload, or external.")
    source: dict[str, Any] = Field(description="The data source as the run was launched with it.")
    project: ProjectRef | None
    aggregation: str | None = Field(None, description="A project's pairs: how disagreeing annotators combined.")
    rows: int | None = Field(description="Rows of the training data frozen at launch (GET /runs/{id}/data).")
    sha256: str = Field(description="SHA-256 of that file; empty where none was frozen.")


class LineageCheckpoint(Schema):
    id: int = Field(description="GET /checkpoints/{id}/archive downloads it.")
    step: int | None
    name: str
    architecture: str
    has_optimizer_state: bool
    created_at: datetime


class LineageRound(Schema):
    project: ProjectRef
    round: int = Field(description="The round's number in its project.")
    checkpoint_id: int
    step: int | None
    model: str
    sampling_status: str
    responses: int
    created_at: datetime


class LineageRun(Schema):
    id: int
    name: str
    kind: str
    status: str


class LineageOut(Schema):
    run: LineageRun
    parent_id: int | None = Field(description="The run it was forked from, if any.")
    data: LineageData
    checkpoints: list[LineageCheckpoint]
    rounds: list[LineageRound] = Field(description="Annotation rounds sampled from the run's checkpoints.")


@router.get("/runs/{int:run_id}/lineage", response={200: LineageOut, 404: Detail}, summary="A run's lineage")
@researcher_only
def lineage(request: HttpRequest, run_id: int) -> dict[str, Any]:
    """Data source → run → checkpoints → the annotation rounds sampled from those checkpoints."""
    return run_lineage(run_or_404(request, run_id))


class ArtifactOut(Schema):
    name: str
    kind: str
    size: int = Field(description="Bytes.")
    sha256: str
    created_at: datetime


class ArtifactQuery(Schema):
    kind: str = Field("file", pattern=KIND_PATTERN, description="What it is: file, table, model, dataset, ...")


ARTIFACT_BODY = {"requestBody": {"required": True, "description": "The file's bytes, sent with their length "
                                 "(Content-Length), as application/octet-stream.",
                                 "content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                     "format": "binary"}}}}}


@router.put("/runs/{int:run_id}/artifacts/{name}",
            response={201: ArtifactOut, 404: Detail, 409: Detail, 413: Detail, 422: Detail},
            openapi_extra={**ARTIFACT_BODY, "responses": {422: {"description": (
                "Besides the schema: the name is letters, digits, '.', '_' and '-', starting with a letter or a "
                "digit, at most 200 characters. Nothing is stored.")}}},
            summary="Upload a file of an external run (an artifact)")
@researcher_only
def artifact_upload(request: HttpRequest, run_id: int, name: str, query: Query[ArtifactQuery]) -> Status:
    """Kept under the run's directory, written whole or not at all; the same name again replaces it. At most
    PREFLAB_UPLOAD_MAX_BYTES (1 GiB unless set), else a 413. A Preflab-trained run's files are its checkpoints:
    a 409."""
    run = run_or_404(request, run_id)
    limit = settings.PREFLAB_UPLOAD_MAX_BYTES
    try:
        if not run.is_external:
            raise ArtifactError(f"run {run.pk} is trained by Preflab: its files are its checkpoints "
                                "(GET /api/v1/runs/{id}/lineage lists them)", status=409)
        if declared_length(request) > limit:
            raise ArtifactError(f"the file is larger than this server keeps: at most {size_text(limit)} "
                                "(PREFLAB_UPLOAD_MAX_BYTES); nothing was stored", status=413)
        artifact = artifact_store(run_id=run.pk, name=name, kind=query.kind, body=request, limit=limit)
    except ArtifactError as error:
        body_left_unread(request)
        raise HttpError(error.status, str(error)) from None
    return Status(201, artifact.__dict__)


@router.get("/runs/{int:run_id}/artifacts", response={200: list[ArtifactOut], 404: Detail},
            summary="A run's artifacts")
@researcher_only
def artifact_list(request: HttpRequest, run_id: int) -> list[dict[str, Any]]:
    run = run_or_404(request, run_id)
    return [artifact.__dict__ for artifact in run_artifacts(run.pk)]


@router.get("/runs/{int:run_id}/artifacts/{name}", response={200: None, 404: Detail},
            openapi_extra={"responses": {200: {"content": {"application/octet-stream": {"schema": {
                "type": "string", "format": "binary"}}}}}},
            summary="Download an artifact of a run")
@researcher_only
def artifact_download(request: HttpRequest, run_id: int, name: str) -> FileResponse:
    """The file's bytes, streamed, with its length and its name (Content-Disposition)."""
    run = run_or_404(request, run_id)
    artifact = run_artifact(run.pk, name)
    if artifact is None:
        raise HttpError(404, f"run {run.pk} has no artifact {name!r}")
    return FileResponse(artifact_path(run.pk, name).open("rb"), as_attachment=True, filename=artifact.name,
                        content_type="application/octet-stream")
