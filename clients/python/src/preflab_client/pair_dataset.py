"""Preference rows into a `datasets.Dataset`, chunk by chunk, with a schema fixed by the first row: inference
per chunk would type a column that happens to be empty in one chunk (no margins, say) as null, and the chunks
would not concatenate."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

CHUNK_ROWS = 10_000
TEXT_COLUMNS = ("prompt", "chosen", "rejected")
# the columns of the page's pairs export besides the texts
KNOWN_TYPES = {"weight": "float64", "margin": "float64", "ranking_id": "int64", "annotator": "string"}


def dataset_from_rows(datasets: Any, rows: Iterable[dict]) -> Any:
    iterator = iter(rows)
    first = next(iterator, None)
    if first is None:
        return datasets.Dataset.from_list([])
    features = _features(datasets, first)
    chunks = [datasets.Dataset.from_list(chunk, features=features)
              for chunk in _chunks(_chain(first, iterator), CHUNK_ROWS)]
    return chunks[0] if len(chunks) == 1 else datasets.concatenate_datasets(chunks)


def _features(datasets: Any, row: dict) -> Any:
    """The schema of every row, from the first; None (inference) when a column is not one we know."""
    columns: dict[str, Any] = {}
    for name, value in row.items():
        if name in TEXT_COLUMNS:
            columns[name] = datasets.Value("string") if isinstance(value, str) else datasets.List(
                {"role": datasets.Value("string"), "content": datasets.Value("string")})
        elif name in KNOWN_TYPES:
            columns[name] = datasets.Value(KNOWN_TYPES[name])
        else:
            return None
    return datasets.Features(columns)


def _chain(first: dict, rest: Iterator[dict]) -> Iterator[dict]:
    yield first
    yield from rest


def _chunks(rows: Iterator[dict], size: int) -> Iterator[list[dict]]:
    while chunk := list(islice(rows, size)):
        yield chunk
