"""Schemas shared by the API's areas: the request body's base, the page envelope and its query parameters.

A page is `{"items": [...], "count": <total>, "next": <next offset, or null on the last page>}`, asked for with
`?limit=` (default 100, at most 1000) and `?offset=` (at most OFFSET_MAX).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sized
from itertools import islice
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from django.db.models import QuerySet
from ninja import Field, Schema
from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from webapp.text import LONE_SURROGATE_PROBLEM, NUMBER_MAX_DIGITS

# What the schema says of text, as the server decides it. No text holds a NUL (webapp.text.unstorable_problem; a
# lone surrogate is not a JSON Schema string at all). Blank is what Python's str.strip() removes: str.isspace's
# characters, written out (a pattern's \\s is another set in each regex engine).
PYTHON_WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
STORABLE_TEXT_PATTERN = "^[^\x00]*$"
NON_BLANK_TEXT_PATTERN = f"^[^\x00]*[^\x00{PYTHON_WHITESPACE}][^\x00]*$"
NON_BLANK_TEXT = {"pattern": NON_BLANK_TEXT_PATTERN}

PAGE_LIMIT_DEFAULT = 100
PAGE_LIMIT_MAX = 1000
# The largest 18-digit number, as the pages take in an address (webapp.text.whole_number): with a page's limit
# added it still fits a 64-bit integer, which Postgres's OFFSET and Python's islice take.
OFFSET_MAX = 10**NUMBER_MAX_DIGITS - 1

Item = TypeVar("Item")


class Page(Schema, Generic[Item]):
    items: list[Item]
    count: int
    next: int | None = Field(None, description="The offset of the next page; null on the last one.")


class PageQuery(Schema):
    limit: int = Field(PAGE_LIMIT_DEFAULT, ge=1, le=PAGE_LIMIT_MAX)
    offset: int = Field(0, ge=0, le=OFFSET_MAX)


class BodyIn(BaseModel):
    """A request's JSON body: an object of the declared fields, each of its JSON type. A plain pydantic model,
    not a ninja Schema (which reads attributes off any value, so `5` or `[]` passed as an object of defaults),
    and strict, so that "5" is not taken for 5 nor 1 for true. Fields it does not declare are ignored.
    `takes_non_finite_numbers`: the body's numbers may be NaN or Infinity (metrics; Python's json module writes
    them as bare words), which no other body may hold (webapp.api.api.storable_input)."""

    model_config = ConfigDict(strict=True)
    takes_non_finite_numbers: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def an_object(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise PydanticCustomError("json_object", "expected a JSON object; got {got}", {"got": _json_type(data)})
        return data


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A whole number in a body: JSON has one type of number, and 617.0 is the whole number 617 (JSON Schema's
# "integer" says so too); a string or a boolean is refused, as the strict body refuses them elsewhere.
WholeNumber = Annotated[int, BeforeValidator(_integral)]


def bounded_whole_number(*, ge: int, le: int) -> Any:
    """A WholeNumber from `ge` to `le`, as a type (the bounds come before the validator: after it, in an optional
    field, pydantic writes them into the schema as "ge" and "le" instead of JSON Schema's minimum and maximum)."""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_integral)]


def _json_type(value: Any) -> str:
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "an array"}
    return names.get(type(value), type(value).__name__)


class Detail(Schema):
    """Every refusal: what was refused and where."""

    detail: str


def next_offset(*, offset: int, shown: int, count: int) -> int | None:
    return offset + shown if offset + shown < count else None


def page_of(
    rows: QuerySet | Iterable[Any],
    *,
    paging: PageQuery,
    count: int | None = None,
    item: Callable[[Any], Any] = lambda row: row,
) -> dict[str, Any]:
    """One page of `rows`: a queryset is sliced in the database; an iterator (the export's rows, read from the
    database as they are yielded) is skipped to the offset, and `count` must then be given."""
    if isinstance(rows, QuerySet):
        total = rows.count() if count is None else count
        chosen: Iterable[Any] = rows[paging.offset:paging.offset + paging.limit]
    else:
        if count is None:
            if not isinstance(rows, Sized):
                raise TypeError("page_of: give the count of an iterator's rows")
            count = len(rows)
        total = count
        chosen = islice(rows, paging.offset, paging.offset + paging.limit)
    items = [item(row) for row in chosen]
    return {"items": items, "count": total, "next": next_offset(offset=paging.offset, shown=len(items), count=total)}


def refusal_text(errors: list[dict[str, Any]]) -> str:
    """ninja's validation errors as one sentence naming each field, as every other refusal's detail is:
    'name: Field required; limit: Input should be less than or equal to 1000'. A body's fields are named
    without ninja's prefix (its location and the endpoint's parameter name)."""
    said = []
    for error in errors:
        location = list(error.get("loc", ()))
        if location[:1] == ["body"]:
            location = location[2:] or ["body"]
        elif location[:1] in (["query"], ["path"], ["header"]):
            location = location[1:]
        # pydantic's own check of a string's length meets a lone surrogate first: say it as the text rule does
        message = (LONE_SURROGATE_PROBLEM if error.get("type") == "string_unicode"
                   else str(error.get("msg", "refused")).removeprefix("Value error, "))
        said.append(f"{field_path(location) or 'request'}: {message}")
    return "; ".join(said)


def field_path(location: list[Any]) -> str:
    """A field as the text rule names it (webapp.text.unstorable_value_check): `config.targets[2]`."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path
