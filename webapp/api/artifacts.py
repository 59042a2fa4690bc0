"""API endpoints: what a run made and where it came from — a checkpoint of a Preflab-trained run downloaded as a
tar built while it is sent (never whole in memory), and a run's lineage (data source → run → checkpoints →
annotation rounds sampled from them). Every endpoint is a researcher's; a run and its checkpoints are reached as
the run itself is (selectors.runs_visible_to), anything else is a 404.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from webapp.api.auth import researcher_only
from webapp.api.runs import run_or_404
from webapp.api.schemas import Detail
from webapp.experiments import selectors
from webapp.experiments.checkpoint_archive import archive_chunks, archive_members, archive_size
from webapp.experiments.lineage import run_lineage
from webapp.experiments.models import ModelRef

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
