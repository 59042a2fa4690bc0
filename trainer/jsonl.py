"""Reading JSONL, one JSON object a line (blank lines skipped): training rows, uploads, metrics files.

A bad line is a JsonlError naming the file and the line. No torch at import: the web checks uploads with it.
"""

from __future__ import annotations

import json
from pathlib import Path


class JsonlError(ValueError):
    """A JSONL file cannot be read, or a line of it is not a JSON object; the message says where."""


def parse_jsonl(text: str, *, name: str) -> list[dict]:
    """The objects of JSONL `text`; `name` (a file name) is what the error messages call it."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise JsonlError(f"{name}, line {number}: not valid JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise JsonlError(f"{name}, line {number}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def read_jsonl_file(path: str | Path) -> list[dict]:
    """The objects of the JSONL file at `path`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise JsonlError(f"cannot read data file {path}: {error.strerror}") from error
    return parse_jsonl(text, name=str(path))
