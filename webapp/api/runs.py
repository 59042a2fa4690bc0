"""API endpoints: runs — list, launch, read, cancel, resume, fork, the whole metric history and the samples.

Every endpoint is a researcher's. A launch or a fork is validated and queued as the launch form's launch is
(services.run_launch, run_fork, both through run_create); a refusal is a 422 naming the field as the other areas
do ("config.lr: must be > 0", "data_source.level: ...") and creates nothing; a queue that cannot be reached is a
503.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import FileResponse, HttpRequest
from django.urls import reverse
from ninja import Body, Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from webapp.api.auth import researcher_only
from webapp.api.schemas import BodyIn, Detail, Page, PageQuery, WholeNumber, page_of
from webapp.experiments import selectors, services
from webapp.experiments.data_snapshot import NO_SNAPSHOT, snapshot_download_name, snapshot_path
from webapp.experiments.models import EXTERNAL_KIND, Run

router = Router(tags=["runs"])

# The services name a refused field as the launch form does; the API names it as its body does.
FORM_FIELD_NAMES = {
    "kind": "kind", "name": "name", "config": "config", "data_source": "data_source",
    "level": "data_source.level", "size": "data_source.size", "project": "data_source.project_id",
    "aggregation": "data_source.aggregation", "binarization": "data_source.binarization",
    "binarization_seed": "data_source.binarization_seed",
    "upload": "data_source", "project_id": "project_id", "total_steps": "total_steps",
    "checkpoint": "checkpoint_id", "status": "status", "batch_id": "batch_id", "error": "error",
    "summary": "summary", "tags": "tags", "group": "group",
}


class RunOut(Schema):
    id: int
    name: str
    kind: str
    status: str
    config: dict[str, Any]
    data_source: dict[str, Any]
    current_step: int
    total_steps: int | None
    tokens_seen: int
    error: str
    alerts: list[dict[str, Any]]
    cancel_requested: bool = Field(description="Set by a cancel: an external run's program should stop and "
                                               "finish the run as canceled.")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    parent_id: int | None
    data_rows: int | None = Field(description="Rows in the training data frozen at launch (GET /runs/{id}/data); "
                                              "null where none was frozen (arithmetic, an external run).")
    data_sha256: str = Field(description="SHA-256 of the frozen training data's bytes; empty where none.")
    summary: dict[str, Any] = Field(description="An external run's final or latest figures, {name: value}.")
    tags: list[str]
    group: str
    url: str = Field(description="The run's page.")


RUN_KINDS = tuple(Run.Kind.values)
RUN_STATUSES = tuple(Run.Status.values)
RUN_NAME_MAX_CHARS = Run._meta.get_field("name").max_length


class RunCreateIn(BodyIn):
    kind: Literal[RUN_KINDS] = Field(  # type: ignore[valid-type]
        description='A trainer kind (reward_model, sft, dpo, kto, grpo, ppo), or "external".')
    name: str = Field("", max_length=RUN_NAME_MAX_CHARS)
    config: dict[str, Any] = Field(default_factory=dict, description="The launch form's fields (the trainer's "
                                   'config for the kind); "preset" names a starting point, e.g. "dapo".')
    data_source: dict[str, Any] | None = Field(None, description='{"type": "arithmetic", "level": 1, "size": 64}, '
                                               '{"type": "project_pairs" | "project_prompts", "project_id": 3}')


class RunsQuery(PageQuery):
    status: Literal[("", *RUN_STATUSES)] = Field("", description="Empty or left out: any.")  # type: ignore[valid-type]
    kind: Literal[("", *RUN_KINDS)] = Field("", description="Empty or left out: any.")  # type: ignore[valid-type]
    q: str = Field("", description="A part of the run's name.")
    tag: str = Field("", description="Runs with this tag.")
    group: str = Field("", description="Runs of this group.")
    archived: Literal["", "only", "all"] = Field("", description="Empty: runs not archived; only: archived runs; all.")


class ResumeIn(BodyIn):
    checkpoint_id: WholeNumber
    remove_later: bool = Field(False, description="Confirms removing the run's checkpoints after the chosen one.")


class ForkIn(BodyIn):
    name: str = Field("", max_length=RUN_NAME_MAX_CHARS)
    config: dict[str, Any] = Field(default_factory=dict, description="Fields set over the parent's config.")


class MetricRowOut(Schema):
    step: int
    wall_time: float
    tokens_seen: int
    metrics: dict[str, float | str] = Field(description='Non-finite values as "nan", "inf", "-inf".')


class MetricRowsOut(Schema):
    rows: list[MetricRowOut]
    next_after_step: int | None = Field(description="Ask again with this after_step; null after the last row.")


class MetricRowsQuery(Schema):
    after_step: int | None = Field(None, ge=0, le=services.STEP_MAX,
                                   description="Rows after this step (from the first when left out).")
    limit: int = Field(selectors.METRIC_ROWS_PAGE_MAX, ge=1, le=selectors.METRIC_ROWS_PAGE_MAX)


class SampleOut(Schema):
    step: int
    prompt: str
    completion: str
    rewards: dict[str, float | str]
    advantage: float | str | None


class SamplesQuery(PageQuery):
    step: int | None = Field(None, ge=0, le=services.STEP_MAX)


def run_out(request: HttpRequest, run: Run) -> dict[str, Any]:
    fields = {name: getattr(run, name) for name in RunOut.model_fields if name not in ("url",)}
    return {**fields, "id": run.pk, "url": request.build_absolute_uri(reverse("experiments:run_detail", args=[run.pk]))}


def run_data_response(run: Run) -> FileResponse:
    """The run's frozen training data as a download (the API's and the page's), 404 where it has none."""
    path = snapshot_path(run.pk)
    if not run.data_sha256 or not path.is_file():
        raise HttpError(404, NO_SNAPSHOT.format(run_id=run.pk))
    return FileResponse(path.open("rb"), as_attachment=True, filename=snapshot_download_name(run.pk),
                        content_type="application/x-ndjson; charset=utf-8")


def run_or_404(request: HttpRequest, run_id: int) -> Run:
    """A run the token's user reaches (selectors.runs_visible_to); any other is answered as one that does not
    exist."""
    run = selectors.runs_visible_to(request.auth).filter(pk=run_id).first()
    if run is None:
        raise HttpError(404, f"there is no run {run_id}")
    return run


def refusal(error: ValidationError, *, conflict_fields: tuple[str, ...] = ()) -> HttpError:
    """A service's ValidationError as the API's answer: 422 naming each field, 409 when one of
    `conflict_fields` is at fault (the run's state refuses the request), 503 when the queue is unreachable."""
    if not hasattr(error, "error_dict"):
        status = 503 if getattr(error, "code", None) == "queue_unavailable" else 422
        return HttpError(status, "; ".join(error.messages))
    status = 409 if any(field in conflict_fields for field in error.error_dict) else 422
    return HttpError(status, "; ".join(
        f'{FORM_FIELD_NAMES.get(field, f"config.{field}")}: {message}'
        for field, messages in error.message_dict.items() for message in messages
    ))


@router.get("", response=Page[RunOut], summary="List runs")
@researcher_only
def runs_list(request: HttpRequest, filters: Query[RunsQuery]) -> dict[str, Any]:
    """Newest first; `status`, `kind`, `q` (a part of the name), `tag` and `group` narrow the list; archived runs
    only with `archived`."""
    runs = selectors.runs_list(user=request.auth, status=filters.status, kind=filters.kind, query=filters.q.strip(),
                               tag=filters.tag.strip(), group=filters.group.strip(), archived=filters.archived)
    return page_of(runs, paging=filters, item=lambda run: run_out(request, run))


# What the schema cannot say of a launch, a fork or a resume (tests/webapp/api/test_schema_fuzz.py allows these
# operations a 422 for a request the schema allows).
CHECKED_AS_A_LAUNCH = {"responses": {422: {"description": (
    "Refused as the launch form refuses it, naming the field: besides the schema, the config is the trainer's for "
    "the kind (its fields, their bounds against each other and against the data), the data source must exist "
    "(a project, an arithmetic level), the model must be registered or under the model roots, and a resume's "
    "checkpoint must be one of the run's. Nothing is created.")},
    503: {"description": "The job queue (the broker) cannot be reached; nothing was created."}}}


@router.post("", response={201: RunOut, 503: Detail}, openapi_extra=CHECKED_AS_A_LAUNCH, summary="Launch a run")
@researcher_only
def run_create(request: HttpRequest, body: RunCreateIn) -> Status:
    """Validated and queued as the launch form's launch; `kind: "external"` creates an external run (as POST
    /runs/external, with `data_source.project_id` as its project)."""
    try:
        if body.kind == EXTERNAL_KIND:
            run = services.external_run_create(name=body.name, config=body.config, created_by=request.user,
                                               project_id=(body.data_source or {}).get("project_id"))
        elif body.data_source is None:
            raise ValidationError({"data_source": "give the data to train on, e.g. "
                                                  '{"type": "arithmetic", "level": 1, "size": 64}'})
        else:
            run = services.run_launch(kind=body.kind, config=body.config, data_source=body.data_source,
                                      created_by=request.user, name=body.name)
    except ValidationError as error:
        raise refusal(error) from None
    return Status(201, run_out(request, run))


@router.get("/{int:run_id}", response={200: RunOut, 404: Detail}, summary="Read a run")
@researcher_only
def run_read(request: HttpRequest, run_id: int) -> dict[str, Any]:
    return run_out(request, run_or_404(request, run_id))


@router.post("/{int:run_id}/cancel", response={200: RunOut, 404: Detail, 409: Detail}, summary="Cancel a run")
@researcher_only
def run_cancel(request: HttpRequest, run_id: int) -> dict[str, Any]:
    """A queued run is canceled at once; a running one stops at its next step (an external run's program reads
    `cancel_requested` and finishes it). Canceling a canceled run changes nothing; a run that ended otherwise is
    a 409."""
    run = run_or_404(request, run_id)
    if run.status in (Run.Status.SUCCEEDED, Run.Status.FAILED):
        raise HttpError(409, f"run {run.pk} is {run.status}; there is nothing to cancel")
    services.run_cancel(run_id=run.pk)
    run.refresh_from_db()
    return run_out(request, run)


@router.post("/{int:run_id}/resume", response={200: RunOut, 404: Detail, 409: Detail, 503: Detail},
             openapi_extra=CHECKED_AS_A_LAUNCH, summary="Resume a finished run from one of its checkpoints")
@researcher_only
def run_resume(request: HttpRequest, run_id: int, body: ResumeIn) -> dict[str, Any]:
    """Later checkpoints are removed only with `remove_later: true` (else a 422 listing them); an active or an
    external run is a 409."""
    run = run_or_404(request, run_id)
    try:
        with transaction.atomic():
            run = services.run_resume(run_id=run.pk, checkpoint_id=body.checkpoint_id, remove_later=body.remove_later)
    except ValidationError as error:
        raise refusal(error, conflict_fields=("status", "kind")) from None
    return run_out(request, run)


@router.post("/{int:run_id}/fork", response={201: RunOut, 404: Detail, 409: Detail, 503: Detail},
             openapi_extra=CHECKED_AS_A_LAUNCH, summary="Fork a run")
@researcher_only
def run_fork(request: HttpRequest, run_id: int, body: ForkIn = Body(ForkIn())) -> Status:  # noqa: B008
    """A new run from the parent's config and data with `config` set over it, validated and queued as a launch.
    The body may be left out (the parent's config and name as they are); if sent, it is an object."""
    parent = run_or_404(request, run_id)
    if parent.is_external:
        raise HttpError(409, f"run {parent.pk} is an external run, logged by its own program; it cannot be forked here")
    try:
        run = services.run_fork(parent_id=parent.pk, created_by=request.user, name=body.name, config=body.config)
    except ValidationError as error:
        raise refusal(error) from None
    return Status(201, run_out(request, run))


@router.get("/{int:run_id}/metrics", response={200: MetricRowsOut, 404: Detail},
            summary="Every logged row of a run, in step order")
@researcher_only
def run_metrics(request: HttpRequest, run_id: int, query: Query[MetricRowsQuery]) -> dict[str, Any]:
    """Every row, not downsampled (the run page's charts are): ask again with `after_step=next_after_step` until
    it is null."""
    run = run_or_404(request, run_id)
    page = selectors.metric_rows_page(run_id=run.pk, after_step=query.after_step, limit=query.limit)
    return {"rows": page.rows, "next_after_step": page.next_after_step}


@router.get("/{int:run_id}/data", response={200: None, 404: Detail},
            openapi_extra={"responses": {200: {"content": {"application/x-ndjson": {"schema": {
                "type": "string", "description": "The training rows, one JSON object a line."}}}}}},
            summary="The training rows a run trained on, frozen at its launch")
@researcher_only
def run_data(request: HttpRequest, run_id: int) -> FileResponse:
    """The snapshot's exact bytes: their SHA-256 is the run's `data_sha256`, their lines its `data_rows`."""
    return run_data_response(run_or_404(request, run_id))


@router.get("/{int:run_id}/samples", response={200: Page[SampleOut], 404: Detail},
            summary="A run's samples, in step order")
@researcher_only
def run_samples(request: HttpRequest, run_id: int, query: Query[SamplesQuery]) -> dict[str, Any]:
    run = run_or_404(request, run_id)
    return page_of(selectors.run_samples_list(run_id=run.pk, step=query.step), paging=query,
                   item=selectors.sample_api_row)
