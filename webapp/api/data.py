"""API endpoints: a project's data in (records, responses) and out (prompts, rankings, preference pairs).

Records are checked exactly as the page's import checks a file's rows (webapp.annotation.importing) and written
by the same service, all or nothing, idempotent by external id; a refused record is named by its 0-based index
in the body and its field. A JSON body is read whole (Django's DATA_UPLOAD_MAX_MEMORY_SIZE bounds it). An NDJSON
body, up to PREFLAB_UPLOAD_MAX_BYTES, is handled as the page's import job handles a file: copied as it arrives to
a temporary file under the data directory, every record read from it and checked, then read again and written in
one transaction. Memory holds a chunk, a line or a batch, never the body; a bad record is refused before anything
is locked or written; and a slow client never keeps a transaction open while it sends.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Annotated, Any, BinaryIO, Literal

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from trainer.config import SEED_MAX
from webapp.annotation import exporting, selectors, services
from webapp.annotation.aggregation import AGGREGATION_PATTERN, AggregationError, aggregation_check
from webapp.annotation.feedback import BINARIZATIONS, DEFAULT_BINARIZATION, DEFAULT_SEED
from webapp.annotation.importing import (
    ImportFileError,
    ImportRecord,
    checked_record,
    iter_import,
)
from webapp.annotation.models import Project, Prompt, Response
from webapp.annotation.preferences import STRATEGIES
from webapp.api.auth import researcher_only
from webapp.api.projects import project_or_404
from webapp.api.schemas import BodyIn, Detail, Page, PageQuery, page_of
from webapp.text_bounds import RESPONSE_MAX_CHARS
from webapp.uploads import body_left_unread, declared_length, size_text

router = Router(tags=["data"])

NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/jsonlines")
JSON_TYPE = "application/json"
SPOOL_CHUNK = 2**20


# Records in ---------------------------------------------------------------------------------------------------


class ImportResult(Schema):
    created: int = Field(..., description="Records written as new prompts.")
    skipped: int = Field(..., description="Records whose external id the project holds already.")


class RecordRefused(Exception):
    """A record of the body the import refuses; nothing is written."""

    def __init__(self, index: int, field: str, problem: str, *, line: int | None = None) -> None:
        where = f" (line {line})" if line else ""
        super().__init__(f'record {index}, field "{field}": {problem}{where}')


_RECORDS_BODY = {
    "required": True,
    "description": "Either a JSON object {\"records\": [...]} or, for large imports, NDJSON (one record a line, "
                   "Content-Type application/x-ndjson), read as a stream. A record is a row of the page's import: "
                   "{prompt, responses?}, {prompt, chosen, rejected}, {messages}, TRL's conversational and implicit "
                   "prompt formats; optional id (or external_id), answer (or reference_answer), metadata.",
    "content": {
        JSON_TYPE: {"schema": {"type": "object", "required": ["records"], "properties": {
            "records": {"type": "array", "items": {"type": "object"}}}}},
        NDJSON_TYPES[0]: {"schema": {"type": "string", "description": "one JSON object a line"}},
    },
}


@router.post("/projects/{project_id}/records",
             response={200: ImportResult, 400: Detail, 404: Detail, 413: Detail, 415: Detail, 422: Detail},
             openapi_extra={"requestBody": _RECORDS_BODY}, summary="Import records (JSON or NDJSON)")
@researcher_only
def records_import(request: HttpRequest, project_id: int) -> dict:
    project = project_or_404(request, project_id)
    if request.content_type in NDJSON_TYPES:
        with _spooled_body(request) as body:
            _refuse_none(_checked_count(body))
            body.seek(0)
            summary = _imported(project, _indexed(iter_import(body, file_format="jsonl"), lines=True))
    elif request.content_type == JSON_TYPE:
        records = _json_records(request)
        _refuse_none(len(records))
        summary = _imported(project, records)
    else:
        body_left_unread(request)
        raise HttpError(415, f"Content-Type {request.content_type or '(none)'!r}: send {JSON_TYPE} "
                             f"{{\"records\": [...]}} or {NDJSON_TYPES[0]}, one record a line")
    return {"created": summary.created, "skipped": summary.already_present}


def _imported(project: Project, records: Iterable[ImportRecord]) -> services.ImportSummary:
    try:
        return services.prompts_import(project=project, records=records)
    except ImportFileError as error:  # the service's own check of repeated ids: _indexed refuses them first
        raise HttpError(422, f'record {error.line}, field "{error.field}": {error.problem}; nothing was '
                             "imported") from None


def _refuse_none(count: int) -> None:
    if not count:
        raise HttpError(422, "records: the body holds no records")


def _json_records(request: HttpRequest) -> list[ImportRecord]:
    limit = min(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.PREFLAB_UPLOAD_MAX_BYTES)
    if declared_length(request) > limit:
        body_left_unread(request)
        raise HttpError(413, _too_large(limit) + f"; send more as {NDJSON_TYPES[0]}, read as a stream")
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError) as error:  # a decoding error is a ValueError too
        raise HttpError(400, f"the body is not JSON ({error})") from None
    if not isinstance(body, dict) or not isinstance(body.get("records"), list):
        raise HttpError(422, 'records: the body must be an object {"records": [<record>, ...]}')
    try:
        return list(_indexed(_checked(row, index) for index, row in enumerate(body["records"])))
    except RecordRefused as error:
        raise HttpError(422, f"{error}; nothing was imported") from None


def _checked(row: object, index: int) -> ImportRecord:
    if not isinstance(row, dict):
        raise ImportFileError(index, "record", f"expected a JSON object, got {type(row).__name__}")
    return checked_record(index, row)


@contextmanager
def _spooled_body(request: HttpRequest) -> Iterator[BinaryIO]:
    """The body in a temporary file (gone when closed), copied a chunk at a time; 413 past the upload limit,
    however the client declared the body's length."""
    limit = settings.PREFLAB_UPLOAD_MAX_BYTES
    if declared_length(request) > limit:
        body_left_unread(request)
        raise HttpError(413, _too_large(limit))
    with tempfile.TemporaryFile(dir=settings.FILE_UPLOAD_TEMP_DIR, prefix="api-records-") as spool:
        received = 0
        while chunk := request.read(SPOOL_CHUNK):
            received += len(chunk)
            if received > limit:
                body_left_unread(request)
                raise HttpError(413, _too_large(limit))
            spool.write(chunk)
        spool.seek(0)
        yield spool


def _checked_count(body: BinaryIO) -> int:
    """How many records the body holds, every one checked (RecordRefused, a 422, for the first bad one)."""
    try:
        return sum(1 for _ in _indexed(iter_import(body, file_format="jsonl"), lines=True))
    except RecordRefused as error:
        raise HttpError(422, f"{error}; nothing was imported") from None


def _indexed(records: Iterable[ImportRecord], *, lines: bool = False) -> Iterator[ImportRecord]:
    """Records numbered by their 0-based index in the body (their `line`, which the service's errors name),
    refusing an id that appears twice; a refusal of the parser is said with the index of the record it was
    reading (and the body's line, for NDJSON, where blank lines make the two differ)."""
    first_index: dict[str, int] = {}
    iterator = iter(records)
    index = 0
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return
        except ImportFileError as error:
            raise RecordRefused(index, error.field, error.problem, line=error.line if lines else None) from None
        # TRL's unpaired rows of one prompt share its id: the service joins them into one item
        if record.external_id in first_index and not record.joins_by_prompt:
            raise RecordRefused(index, "id", f"{record.external_id!r} already appears in record "
                                             f"{first_index[record.external_id]}", line=record.line if lines else None)
        first_index.setdefault(record.external_id, index)
        yield replace(record, line=index)
        index += 1


def _too_large(limit: int) -> str:
    return f"the body is larger than this server accepts: at most {size_text(limit)}; nothing was imported"


# Responses in -------------------------------------------------------------------------------------------------


class ResponsesIn(BodyIn):
    texts: list[Annotated[str, Field(max_length=RESPONSE_MAX_CHARS)]] = Field(..., min_length=1, max_length=1000)
    source: Literal[tuple(Response.Source.values)] = "api"  # type: ignore[valid-type]
    detail: dict[str, Any] = Field(default_factory=dict, description="How they were made: model, settings, ... "
                                   "(any JSON object; its text holds no NUL, as all text the API takes)")
    model: str = Field("", max_length=500, description="The model they came from. Responses added through the "
                       "API are a round of the project: successive calls naming one model join its round.")


class ResponseOut(Schema):
    id: int
    text: str
    prompt: int = Field(..., description="The item holding it: the prompt itself, or a new item made for the round "
                        "when the prompt held responses already.")
    round: int | None = Field(..., description="Its round's number in the project.")


@router.post("/prompts/{prompt_id}/responses", response={201: list[ResponseOut], 404: Detail, 422: Detail},
             summary="Add responses to a prompt")
@researcher_only
def responses_add(request: HttpRequest, prompt_id: int, payload: ResponsesIn) -> Status:
    visible = selectors.projects_visible_to(request.auth)
    prompt = Prompt.objects.filter(pk=prompt_id, project__in=visible).select_related("project").first()
    if prompt is None:
        raise HttpError(404, f"prompt {prompt_id} does not exist")
    created = services.api_responses_add(prompt=prompt, texts=payload.texts, source=payload.source,
                                         source_detail=payload.detail, model=payload.model)
    return Status(201, [{"id": response.pk, "text": response.text, "prompt": response.prompt_id,
                         "round": response.round.number} for response in created])


# Data out -----------------------------------------------------------------------------------------------------


class ResponseItem(Schema):
    id: int
    text: str
    source: str
    round: int | None = Field(..., description="Its round's number in the project; null for imported responses.")
    model: str = Field(..., description="The model it came from, when known; else empty.")


class PromptItem(Schema):
    id: int
    external_id: str
    prompt: str = Field(..., description="The prompt's text (a conversation's turns as text).")
    messages: list[dict[str, Any]] | None = Field(..., description="A conversation's messages, else null.")
    reference: str | None = Field(..., description="The reference answer, for verifiable rewards; else null.")
    metadata: dict[str, Any]
    responses: list[ResponseItem]


def _prompt_item(prompt: Prompt) -> dict[str, Any]:
    return {"id": prompt.pk, "external_id": prompt.external_id, "prompt": prompt.text, "messages": prompt.messages,
            "reference": prompt.reference_answer or None, "metadata": prompt.metadata,
            "responses": [{"id": response.pk, "text": response.text, "source": response.source,
                           "round": response.round.number if response.round_id else None,
                           "model": response.model_name} for response in prompt.responses.all()]}


@router.get("/projects/{project_id}/prompts", response={200: Page[PromptItem], 404: Detail},
            summary="A project's prompts with their responses")
@researcher_only
def prompt_list(request: HttpRequest, project_id: int, paging: Query[PageQuery]) -> dict:
    project = project_or_404(request, project_id)
    return page_of(selectors.project_prompts(project_id=project.pk), paging=paging, item=_prompt_item)


@router.get("/projects/{project_id}/rankings", response={200: Page[dict[str, Any]], 404: Detail},
            summary="A project's rankings, as the rankings export's rows")
@researcher_only
def ranking_list(request: HttpRequest, project_id: int, paging: Query[PageQuery]) -> dict:
    project = project_or_404(request, project_id)
    return page_of(selectors.ranking_rows(project_id=project.pk), paging=paging,
                   count=selectors.ranking_count(project_id=project.pk))


class PairsQuery(PageQuery):
    format: Literal["standard", "conversational"] | None = Field(
        None, description="Omitted: as the page's export (conversational when the project holds a conversation)."
    )
    strategy: Literal[STRATEGIES] = "all"  # type: ignore[valid-type]
    aggregation: str = Field("all", pattern=AGGREGATION_PATTERN, description="How disagreeing annotators' pairs combine: all, majority, "
                             "drop_conflicts, resolved or annotator:<username> (the README, «Annotators who disagree»).")
    stream: Literal["jsonl"] | None = Field(None, description="jsonl: every row as JSON lines, paging ignored.")
    binarization: Literal[BINARIZATIONS] = Field(  # type: ignore[valid-type]
        DEFAULT_BINARIZATION, description="How ratings become pairs: chosen is the best mean rating, rejected a "
                                          "seeded random lower-rated response (random) or the worst one (worst).")
    seed: int = Field(DEFAULT_SEED, ge=0, le=SEED_MAX, description="The seed of the random binarization.")


def _format_and_aggregation(project: Project, query: PairsQuery | UnpairedQuery, *,
                            rows_named: str) -> tuple[bool, str]:
    """(conversational, aggregation) of an export query: conversational when asked or when the project holds a
    conversation (a standard format is then refused), the aggregation checked; a 422 naming the field otherwise."""
    conversational = selectors.project_has_conversations(project_id=project.pk)
    if query.format == "standard" and conversational:
        raise HttpError(422, f"format: the project holds conversations, so its {rows_named} are conversational only "
                             "(format=conversational, or leave format out)")
    try:
        return conversational or query.format == "conversational", aggregation_check(query.aggregation)
    except AggregationError as error:
        raise HttpError(422, f"aggregation: {error}") from None


def streamed_rows_schema(rows: str) -> dict[str, Any]:
    """The OpenAPI description of an export's stream=jsonl answer, beside its JSON page."""
    return {"responses": {200: {"content": {NDJSON_TYPES[0]: {"schema": {
        "type": "string", "description": f"With stream=jsonl: every {rows}, one JSON object a line."}}}}}}


@router.get("/projects/{project_id}/pairs", response={200: Page[dict[str, Any]], 404: Detail, 422: Detail},
            openapi_extra=streamed_rows_schema("pair"),
            summary="A project's preference pairs in TRL's format, as the page's JSONL export")
@researcher_only
def pair_list(request: HttpRequest, project_id: int, query: Query[PairsQuery]) -> dict | StreamingHttpResponse:
    project = project_or_404(request, project_id)
    conversational, aggregation = _format_and_aggregation(project, query, rows_named="pairs")
    ratings = {"binarization": query.binarization, "seed": query.seed}
    rows = selectors.pair_export_rows(project_id=project.pk, strategy=query.strategy, aggregation=aggregation,
                                      conversational=conversational, **ratings)
    if query.stream == "jsonl":
        return StreamingHttpResponse(exporting.jsonl_lines(rows), content_type="application/x-ndjson; charset=utf-8")
    count = selectors.pair_count(project_id=project.pk, strategy=query.strategy, aggregation=aggregation, **ratings)
    return page_of(rows, paging=query, count=count)


class UnpairedQuery(PageQuery):
    format: Literal["standard", "conversational"] | None = Field(
        None, description="Omitted: as the page's export (conversational when the project holds a conversation)."
    )
    aggregation: str = Field("all", pattern=AGGREGATION_PATTERN, description="How annotators combine: all, majority "
                             "(one row a response, ties dropped), drop_conflicts, resolved (unresolved items left "
                             "out) or annotator:<username>.")
    binarization: Literal[BINARIZATIONS] = DEFAULT_BINARIZATION  # type: ignore[valid-type]
    seed: int = Field(DEFAULT_SEED, ge=0, le=SEED_MAX)
    stream: Literal["jsonl"] | None = Field(None, description="jsonl: every row as JSON lines, paging ignored.")


@router.get("/projects/{project_id}/unpaired", response={200: Page[dict[str, Any]], 404: Detail, 422: Detail},
            openapi_extra=streamed_rows_schema("row"),
            summary="A project's unpaired (KTO) rows in TRL's format, as the page's unpaired JSONL export")
@researcher_only
def unpaired_list(request: HttpRequest, project_id: int, query: Query[UnpairedQuery]) -> dict | StreamingHttpResponse:
    project = project_or_404(request, project_id)
    conversational, aggregation = _format_and_aggregation(project, query, rows_named="rows")
    options = {"aggregation": aggregation, "binarization": query.binarization, "seed": query.seed}
    rows = selectors.unpaired_export_rows(project_id=project.pk, conversational=conversational, **options)
    if query.stream == "jsonl":
        return StreamingHttpResponse(exporting.jsonl_lines(rows), content_type="application/x-ndjson; charset=utf-8")
    return page_of(rows, paging=query, count=selectors.unpaired_count(project_id=project.pk, **options))
