"""Reading JSONL, one JSON object a line (blank lines skipped): training rows, uploads, metrics files.

A bad line is a JsonlError naming the file and the line. No torch at import: the web checks uploads with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


class JsonlError(ValueError):
    """A JSONL file cannot be read, or a line of it is not a JSON object; the message says where.

    `line` is the 1-based line number (0 when the file as a whole is at fault) and `problem` the message
    without the file and line, for callers that report places their own way."""

    def __init__(self, message: str, *, line: int = 0, problem: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.problem = problem or message


def numbered_jsonl(text: str, *, name: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of JSONL `text`; `name` is what errors call the file."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            problem = f"not valid JSON ({error.msg} at column {error.colno})"
            raise JsonlError(f"{name}, line {number}: {problem}", line=number, problem=problem) from None
        except RecursionError:
            problem = "JSON nested too deeply to read (arrays or objects inside each other thousands of levels deep)"
            raise JsonlError(f"{name}, line {number}: {problem}", line=number, problem=problem) from None
        if not isinstance(row, dict):
            problem = f"expected a JSON object, got {type(row).__name__}"
            raise JsonlError(f"{name}, line {number}: {problem}", line=number, problem=problem)
        yield number, row


def parse_jsonl(text: str, *, name: str) -> list[dict]:
    """The objects of JSONL `text`; `name` (a file name) is what the error messages call it."""
    return [row for _, row in numbered_jsonl(text, name=name)]


def read_jsonl_file(path: str | Path) -> list[dict]:
    """The objects of the JSONL file at `path`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise JsonlError(f"cannot read data file {path}: {error.strerror}") from error
    return parse_jsonl(text, name=str(path))
