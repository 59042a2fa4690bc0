"""The NinjaAPI instance mounted at /api/v1/ and the routers of each area.

Each area's endpoints live in their own module (projects, data, registry, runs, external) as a ninja Router;
views stay thin: parse with a schema, authorise, call a service or a selector.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException
from django.urls import URLPattern, re_path
from django.utils.encoding import escape_uri_path
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from pydantic import BaseModel

from webapp.api import (
    annotations,
    artifacts,
    data,
    external,
    projects,
    registry,
    removal,  # noqa: F401  its endpoints hang on the runs' and the projects' routers
    runs,
)
from webapp.api.auth import TokenAuth
from webapp.api.openapi import declared_as_it_answers
from webapp.api.schemas import BodyIn, refusal_text
from webapp.text import UnstorableValue, unstorable_value_check
from webapp.uploads import body_left_unread, size_text


class PreflabApi(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix: str | None = None,
                           path_params: dict[str, Any] | None = None) -> dict[str, Any]:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        return declared_as_it_answers(schema)


api = PreflabApi(
    title="Preflab API",
    version="1",
    urls_namespace="api-v1",
    auth=TokenAuth(),
    docs_url="/docs",
)


@api.exception_handler(ValidationError)
def refused_input(request: HttpRequest, error: ValidationError) -> HttpResponse:
    """A 422 says what was refused and where in one string, as every refusal of the API does."""
    return api.create_response(request, {"detail": refusal_text(error.errors)}, status=422)


@api.exception_handler(RawPostDataException)
def body_not_json(request: HttpRequest, error: RawPostDataException) -> HttpResponse:
    """A form (multipart) body was parsed already, by webapp.uploads' size check: the endpoint reads JSON."""
    return api.create_response(
        request, {"detail": f"body: send JSON (Content-Type: application/json), not {request.content_type}"},
        status=415,
    )


@api.exception_handler(RequestDataTooBig)
def body_too_large(request: HttpRequest, error: RequestDataTooBig) -> HttpResponse:
    """A JSON body past what Django reads into memory (DATA_UPLOAD_MAX_MEMORY_SIZE): the API's 413, not Django's
    HTML page for a bad request."""
    body_left_unread(request)
    limit = size_text(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return api.create_response(
        request, {"detail": f"body: larger than the {limit} a JSON body may hold; nothing was stored"}, status=413,
    )


def storable_input(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """Every value an endpoint is given (its path, query and body parameters, as parsed) follows the rule an
    imported file follows (webapp.text.unstorable_value_check: no NUL, no lone surrogate, no NaN or Infinity
    except in a body that takes them, no deep nesting): else a 422 naming the field, before the endpoint reads or
    writes anything."""

    @wraps(endpoint)
    def checked(request: HttpRequest, *args: Any, **values: Any) -> Any:
        for name, value in values.items():
            fields = value.model_dump() if isinstance(value, BaseModel) else {name: value}
            non_finite = isinstance(value, BodyIn) and value.takes_non_finite_numbers
            try:
                for field, item in fields.items():
                    unstorable_value_check(item, field, non_finite_numbers=non_finite)
            except UnstorableValue as error:
                raise HttpError(422, f"{error.field}: {error.problem}") from None
        return endpoint(request, *args, **values)

    return checked


# after parsing ("operation"): the values are those the endpoint would be given
api.add_decorator(storable_input, mode="operation")

api.add_router("/projects", projects.router)
api.add_router("/", data.router)
api.add_router("/models", registry.router)
api.add_router("/runs", runs.router)
api.add_router("/runs", external.router)
api.add_router("/", annotations.router)
api.add_router("/", artifacts.router)


def api_urls() -> tuple[list[URLPattern], str, str]:
    """The API's URL patterns, exempt from the pages' login redirect: a program is authenticated by its token
    (a missing or bad one is a 401, not a redirect to the login page). An address none of them matches (a run id
    that is not a number) is a 404 in the API's format, not the pages' HTML one."""
    patterns, app_name, namespace = api.urls
    patterns = [*patterns, re_path(r"", no_such_address)]
    for pattern in patterns:
        pattern.callback.login_required = False
    return patterns, app_name, namespace


@csrf_exempt  # as the API's own views: a program sends a token, not a session's CSRF cookie
def no_such_address(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"detail": f"{escape_uri_path(request.path)}: there is no such address in the API"},
                        status=404)
