"""Reading JSONL, one JSON object a line (blank lines skipped): training rows, uploads, metrics files.

A bad line is a JsonlError naming the file and the line. No torch at import: the web checks uploads with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO


class JsonlError(ValueError):
    """A JSONL file cannot be read, or a line of it is not a JSON object; the message says where.

    `line` is the 1-based line number (0 when the file as a whole is at fault) and `problem` the message
    without the file and line, for callers that report places their own way."""

    def __init__(self, message: str, *, line: int = 0, problem: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.problem = problem or message


_JSON_ARRAY = ("this is a JSON array (one document for the whole file), not JSON Lines: put one object on each "
               "line, e.g. with `jq -c '.[]' file.json > file.jsonl`")


class UnreadableLine(JsonlError):
    """A line that cannot be read as text at all (not UTF-8, or longer than the reader accepts)."""


def numbered_jsonl(text: str, *, name: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of JSONL `text`; `name` is what errors call the file."""
    # Lines end at "\n" only: JSON text may hold U+2028, U+0085 and the like raw inside a string (json.dumps with
    # ensure_ascii=False writes them so), which str.splitlines would take for line ends.
    return numbered_jsonl_lines(enumerate(text.split("\n"), start=1), name=name)


def numbered_jsonl_lines(lines: Iterable[tuple[int, str]], *, name: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of numbered JSONL lines (text_lines reads them from a file)."""
    first = True
    for number, line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            problem = f"not valid JSON ({error.msg} at column {error.colno})"
            if first and line.lstrip().startswith("["):
                problem = _JSON_ARRAY
            raise JsonlError(f"{name}, line {number}: {problem}", line=number, problem=problem) from None
        except RecursionError:
            problem = "JSON nested too deeply to read (arrays or objects inside each other thousands of levels deep)"
            raise JsonlError(f"{name}, line {number}: {problem}", line=number, problem=problem) from None
        except ValueError as error:  # json.loads turns an integer over 4,300 digits into a ValueError of int()
            problem = f"not readable as JSON ({error})"
            raise JsonlError(f"{name}, line {number}: {problem}", line=number, problem=problem) from None
        if not isinstance(row, dict):
            problem = f"expected a JSON object, got {type(row).__name__}"
            if first and isinstance(row, list):
                problem = _JSON_ARRAY
            raise JsonlError(f"{name}, line {number}: {problem}", line=number, problem=problem)
        first = False
        yield number, row


def text_lines(stream: BinaryIO, *, name: str, max_line_bytes: int) -> Iterator[tuple[int, str]]:
    """(line number, text with its line end) for each line of a UTF-8 byte stream, read one line at a time, so
    that memory holds one line however large the file; a byte order mark before the first line is dropped."""
    number = 0
    while raw := stream.readline(max_line_bytes + 1):
        number += 1
        if len(raw) > max_line_bytes:
            problem = f"the line is longer than {max_line_bytes:,} bytes"
            raise UnreadableLine(f"{name}, line {number}: {problem}", line=number, problem=problem)
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            problem = f"not UTF-8 text (byte {error.start + 1} of the line)"
            raise UnreadableLine(f"{name}, line {number}: {problem}", line=number, problem=problem) from None
        yield number, text


def parse_jsonl(text: str, *, name: str) -> list[dict]:
    """The objects of JSONL `text`; `name` (a file name) is what the error messages call it."""
    return [row for _, row in numbered_jsonl(text, name=name)]


def read_jsonl_file(path: str | Path) -> list[dict]:
    """The objects of the JSONL file at `path`."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as error:
        raise JsonlError(f"cannot read data file {path}: {error.strerror}") from error
    return parse_jsonl(text, name=str(path))
