"""API endpoints: external runs — runs a program outside Preflab logs into the same dashboards.

An external run is created running (POST /runs/external), takes rows, samples and heartbeats from its program
while it runs, and ends when the program finishes it; the reconcile task fails it when the heartbeats stop.
Writes are idempotent, so a client may retry any request: rows by (run, step) — a row for a stored step merges
its metrics in, and a row equal to the stored one writes nothing (`written` counts the steps that changed) —
and samples by the client's batch id. A write to a run that is no longer running is a 409, except a replay
(rows equal to the stored ones, a batch id already applied, the same finish again), which answers as the first
time did, with `written: 0`.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError

from webapp.api import runs
from webapp.api.auth import researcher_only
from webapp.api.schemas import (
    NON_BLANK_TEXT_PATTERN,
    PYTHON_WHITESPACE,
    BodyIn,
    Detail,
    WholeNumber,
    bounded_whole_number,
)
from webapp.experiments import services

router = Router(tags=["external runs"])


# The rows and samples are checked by the services, which name the row (or sample) and its field in a refusal;
# the schema describes them exactly as the services take them.
STEP = {"type": "integer", "minimum": 0, "maximum": services.STEP_MAX}
METRIC_NAME = {"type": "string", "minLength": 1, "maxLength": services.METRIC_NAME_MAX_LENGTH,
               "pattern": NON_BLANK_TEXT_PATTERN}
# A non-finite number's words (services.NONFINITE_WORDS), in any case, with blanks around them.
_BLANK = f"[{PYTHON_WHITESPACE}]*"
NON_FINITE_WORD = f"^{_BLANK}([nN][aA][nN]|[+-]?[iI][nN][fF]([iI][nN][iI][tT][yY])?){_BLANK}$"
METRIC_VALUE = {"anyOf": [{"type": "number", "minimum": -sys.float_info.max, "maximum": sys.float_info.max},
                          {"type": "null"}, {"type": "string", "pattern": NON_FINITE_WORD}]}
METRICS = {"type": "object", "propertyNames": METRIC_NAME, "additionalProperties": METRIC_VALUE}
ROW = {"type": "object", "additionalProperties": False, "required": ["step", "metrics"], "properties": {
    "step": STEP, "metrics": METRICS,
    "wall_time": {"type": ["number", "null"], "minimum": -sys.float_info.max, "maximum": sys.float_info.max},
    "tokens_seen": {"type": ["integer", "null"], "minimum": 0, "maximum": services.TOKENS_MAX},
}}
SAMPLE = {"type": "object", "additionalProperties": False, "required": ["step", "prompt", "completion"],
          "properties": {"step": STEP, "prompt": {"type": "string"}, "completion": {"type": "string"},
                         "rewards": {"anyOf": [METRICS, {"type": "null"}]}, "advantage": METRIC_VALUE}}

TAGS = {"items": {"type": "string", "minLength": 1, "maxLength": services.TAG_MAX_CHARS,
                  "pattern": NON_BLANK_TEXT_PATTERN}, "maxItems": services.TAGS_MAX}


class ExternalRunIn(BodyIn):
    name: str = Field(max_length=runs.RUN_NAME_MAX_CHARS)
    config: dict[str, Any] = Field(default_factory=dict, description="Any JSON object: shown and compared, "
                                   "never validated.")
    project_id: WholeNumber | None = Field(None, description="The project whose data the run trains on, if any: it must "
                                                     "exist (else a 422).")
    total_steps: bounded_whole_number(ge=1, le=services.STEP_MAX) | None = Field(  # type: ignore[valid-type]
        None, description="For the progress bar and the ETA.")
    tags: list[str] = Field(default_factory=list, description="Labels to find the run by (GET /runs?tag=).",
                            json_schema_extra=TAGS)
    group: str = Field("", max_length=services.GROUP_MAX_CHARS, description="Runs belonging together, e.g. a sweep "
                       "(GET /runs?group=).")


class UpdateIn(BodyIn):
    summary: dict[str, Any] | None = Field(None, description="Merged into the run's summary, key by key.")
    config: dict[str, Any] | None = Field(None, description="Merged into the run's config, key by key.")
    tags: list[str] | None = Field(None, description="Replace the run's tags.", json_schema_extra=TAGS)


class LogIn(BodyIn):
    takes_non_finite_numbers = True
    rows: list[Any] = Field(
        description='[{"step": int, "metrics": {name: float | null | "nan" | "inf" | "-inf"}, "wall_time"?: float, '
                    '"tokens_seen"?: int}]; null: no value at this step',
        json_schema_extra={"items": ROW, "maxItems": services.EXTERNAL_ROWS_MAX})


class SamplesIn(BodyIn):
    takes_non_finite_numbers = True
    batch_id: str = Field(min_length=1, max_length=services.BATCH_ID_MAX_LENGTH,
                          json_schema_extra={"pattern": NON_BLANK_TEXT_PATTERN},
                          description="An id the client makes (a UUID): a batch sent again is written once.")
    samples: list[Any] = Field(
        description='[{"step": int, "prompt": str, "completion": str, "rewards"?: {name: float}, "advantage"?: '
                    "float}]",
        json_schema_extra={"items": SAMPLE, "maxItems": services.EXTERNAL_SAMPLES_MAX})


class FinishIn(BodyIn):
    status: Literal[tuple(status.value for status in services.FINISHED_STATUSES)]  # type: ignore[valid-type]
    error: str = ""


class WrittenOut(Schema):
    written: int


def _written(write: Any) -> dict[str, int]:
    """Run a service write: its refusals as the API's answers (422 for the input, 409 for the run's state)."""
    try:
        return {"written": write()}
    except ValidationError as error:
        raise runs.refusal(error) from None
    except services.RunWriteRefused as error:
        raise HttpError(409, str(error)) from None


@router.post("/external", response={201: runs.RunOut}, summary="Create an external run",
             openapi_extra={"responses": {422: {"description": "A field is refused, named in the detail; besides "
                                                               "the schema, project_id must name a project."}}})
@researcher_only
def external_run_create(request: HttpRequest, body: ExternalRunIn) -> Status:
    """Running from now, with its heartbeat; never queued to a worker."""
    try:
        run = services.external_run_create(name=body.name, config=body.config, created_by=request.user,
                                           project_id=body.project_id, total_steps=body.total_steps,
                                           tags=body.tags, group=body.group)
    except ValidationError as error:
        raise runs.refusal(error) from None
    return Status(201, runs.run_out(request, run))


WRITE_REFUSED = {200: WrittenOut, 404: Detail, 409: Detail}


@router.post("/{int:run_id}/log", response=WRITE_REFUSED, summary="Log metric rows of an external run")
@researcher_only
def external_metrics_log(request: HttpRequest, run_id: int, body: LogIn) -> dict[str, int]:
    run = runs.run_or_404(request, run_id)
    return _written(lambda: services.external_metrics_log(run_id=run.pk, rows=body.rows))


# On the runs router: GET /runs/{id}/samples is there, and one path's methods must share one router (a second
# router's pattern for the same path would never be reached).
@runs.router.post("/{int:run_id}/samples", response=WRITE_REFUSED, tags=["external runs"],
                  summary="Log a batch of samples of an external run")
@researcher_only
def external_samples_log(request: HttpRequest, run_id: int, body: SamplesIn) -> dict[str, int]:
    run = runs.run_or_404(request, run_id)
    return _written(lambda: services.external_samples_log(run_id=run.pk, batch_id=body.batch_id,
                                                          samples=body.samples))


@router.post("/{int:run_id}/update", response=WRITE_REFUSED, summary="Update an external run's summary, config "
             "or tags")
@researcher_only
def external_run_update(request: HttpRequest, run_id: int, body: UpdateIn) -> dict[str, int]:
    """`written` is 1 when something changed, 0 for an update already applied (a replay)."""
    run = runs.run_or_404(request, run_id)
    return _written(lambda: services.external_run_update(run_id=run.pk, summary=body.summary, config=body.config,
                                                         tags=body.tags))


@router.post("/{int:run_id}/heartbeat", response={204: None, 404: Detail, 409: Detail},
             summary="The external run's program is alive")
@researcher_only
def external_run_heartbeat(request: HttpRequest, run_id: int) -> HttpResponse:
    """Logging rows or samples beats too; a program that logs seldom beats in between, within
    PREFLAB_HEARTBEAT_TIMEOUT_S."""
    run = runs.run_or_404(request, run_id)
    try:
        services.external_run_heartbeat(run_id=run.pk)
    except services.RunWriteRefused as error:
        raise HttpError(409, str(error)) from None
    return HttpResponse(status=204)


@router.post("/{int:run_id}/reattach", response={200: runs.RunOut, 403: Detail, 404: Detail, 409: Detail},
             summary="Reattach to an external run of yours")
@researcher_only
def external_run_reattach(request: HttpRequest, run_id: int) -> dict[str, Any]:
    """Resume by id (the client's `init_run(..., run_id=N)`): the run is running again, whatever its end was; its
    rows, samples and config are kept and later rows for its steps merge. 403 for another user's run, 409 for a
    run Preflab runs itself."""
    run = runs.run_or_404(request, run_id)
    try:
        run = services.external_run_reattach(run_id=run.pk, user=request.user)
    except services.RunNotYours as error:
        raise HttpError(403, str(error)) from None
    except services.RunWriteRefused as error:
        raise HttpError(409, str(error)) from None
    return runs.run_out(request, run)


@router.post("/{int:run_id}/finish", response={200: runs.RunOut, 404: Detail, 409: Detail},
             summary="Finish an external run")
@researcher_only
def external_run_finish(request: HttpRequest, run_id: int, body: FinishIn) -> dict[str, Any]:
    run = runs.run_or_404(request, run_id)
    try:
        run = services.external_run_finish(run_id=run.pk, status=body.status, error=body.error)
    except ValidationError as error:
        raise runs.refusal(error) from None
    except services.RunWriteRefused as error:
        raise HttpError(409, str(error)) from None
    return runs.run_out(request, run)
