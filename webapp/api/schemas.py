"""Schemas shared by the API's areas: the page envelope and its query parameters.

A page is `{"items": [...], "count": <total>, "next": <next offset, or null on the last page>}`, asked for with
`?limit=` (default 100, at most 1000) and `?offset=`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sized
from itertools import islice
from typing import Any, Generic, TypeVar

from django.db.models import QuerySet
from ninja import Field, Schema

PAGE_LIMIT_DEFAULT = 100
PAGE_LIMIT_MAX = 1000

Item = TypeVar("Item")


class Page(Schema, Generic[Item]):
    items: list[Item]
    count: int
    next: int | None = Field(None, description="The offset of the next page; null on the last one.")


class PageQuery(Schema):
    limit: int = Field(PAGE_LIMIT_DEFAULT, ge=1, le=PAGE_LIMIT_MAX)
    offset: int = Field(0, ge=0)


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
        location = [str(part) for part in error.get("loc", ())]
        if location[:1] == ["body"]:
            location = location[2:] or ["body"]
        elif location[:1] in (["query"], ["path"], ["header"]):
            location = location[1:]
        said.append(f"{'.'.join(location) or 'request'}: {error.get('msg', 'refused')}")
    return "; ".join(said)
