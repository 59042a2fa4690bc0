"""API endpoints: the model registry (base models and the checkpoints runs wrote)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from webapp.api.auth import researcher_only
from webapp.api.schemas import NON_BLANK_TEXT, BodyIn, Detail, Page, PageQuery, page_of
from webapp.experiments import selectors, services

router = Router(tags=["registry"])


class ModelOut(Schema):
    id: int
    name: str
    path: str
    source: str = Field(..., description="local, hub or checkpoint")
    architecture: str = Field(..., description="causal_lm, classifier or unknown")
    run_id: int | None = Field(..., description="The run that wrote this checkpoint; null for a base model.")
    step: int | None


class ModelIn(BodyIn):
    path: str = Field(..., json_schema_extra=NON_BLANK_TEXT,
                      description="A directory under the model roots, a hub id (org/name), or a registered model's "
                                  "path or name: it must be one (else a 422).")
    name: str = ""


@router.get("", response=Page[ModelOut], summary="List models")
@researcher_only
def model_list(request: HttpRequest, paging: Query[PageQuery]) -> dict:
    return page_of(selectors.models_list(request.auth).order_by("-created_at", "-id"), paging=paging)


@router.post("", response={201: ModelOut, 422: Detail}, summary="Register a model (its row if registered already)")
@researcher_only
def model_register(request: HttpRequest, payload: ModelIn) -> Status:
    try:
        model = services.model_register(path=payload.path, name=payload.name, user=request.auth)
    except ValidationError as error:
        raise HttpError(422, _said(error)) from None
    return Status(201, model)


def _said(error: ValidationError) -> str:
    if hasattr(error, "error_dict"):
        return "; ".join(f"{field}: {' '.join(messages)}" for field, messages in error.message_dict.items())
    return " ".join(error.messages)
