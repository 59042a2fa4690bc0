"""Parsing import files (JSONL, CSV, Parquet or a zipped `datasets` directory) into validated records; writing them
is `services.prompts_import`.

Accepted shapes, one per line or row:
- {"prompt": "...", "responses": ["...", "..."]}           responses to rank
- {"prompt": "..."}                                        responses to be sampled from a model
- {"prompt": "...", "chosen": "...", "rejected": "..."}    an existing preference (TRL / HH-RLHF pairs)
- {"messages": [{"role": ..., "content": ...}, ...]}       chat; a final assistant message is a response
- {"chosen": [...], "rejected": [...]}                     TRL's implicit prompt: two whole conversations sharing
                                                           their first turns, each ending with its own answer
- {"prompt": "...", "completion": "...", "label": true}   TRL's unpaired format: a response with an imported thumb
                                                           (up for true, down for false); rows sharing a prompt
                                                           join one item (webapp.annotation.dataset_import)
- Argilla's exported record columns (`<question>.responses`, `.suggestion`, ...): webapp.annotation.argilla_import
`prompt`, `chosen`, `rejected` and `completion` may also be chat message lists (TRL's conversational format); a
conversational prompt is kept as its messages.
Optional: "id" (or "external_id"), "answer" (or "reference_answer"), "metadata" (an object); any other
field is kept in metadata. In CSV, `responses`, `messages` and `metadata` cells hold JSON, and columns
response_1, response_2, ... may replace `responses`.

Parquet files and `datasets` directories hold the same rows as columns (webapp.annotation.dataset_import): a null
cell is an absent field, and errors name the row instead of the line.

Every row is checked before anything is written; the first bad one raises ImportFileError naming the line
and the field. An empty (or whitespace-only) prompt, response, chosen or rejected is refused: it carries no
preference. Without an id, a row's id is a hash of its content, so importing a file twice adds nothing.

`iter_import` reads a file a line at a time (an import job's file may be as large as the upload limit), so
memory holds one row, and a line longer than IMPORT_LINE_MAX_BYTES is refused; it cannot see an id repeated
far apart in the file without keeping every id, which services.prompts_import finds instead as it writes.
`parse_import` reads bytes already in memory and checks repeated ids itself.
"""

import csv
import hashlib
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from trainer.formats.chat import ChatFormatError, is_conversation, normalize_record
from trainer.formats.jsonl import JsonlError, UnreadableLine, numbered_jsonl_lines, text_lines
from webapp.text import UnstorableValue, is_blank, unstorable_value_check, whole_number
from webapp.text_bounds import PROMPT_MAX_CHARS, RESPONSE_MAX_CHARS, length_problem

FORMATS = ("jsonl", "csv", "parquet", "dataset")
# formats whose rows are columns: errors name a row, and a null cell is an absent field
COLUMNAR_FORMATS = ("parquet", "dataset")
# Python's csv module stops at 131,072 characters a cell by default; a long-context prompt may hold more.
CSV_CELL_MAX_CHARS = 16 * 2**20
csv.field_size_limit(CSV_CELL_MAX_CHARS)
# One JSONL line (or one physical CSV line) at most: what a single row may make an import hold in memory.
IMPORT_LINE_MAX_BYTES = 64 * 2**20
FIELD_MAX_CHARS = 200
_KNOWN_FIELDS = {"id", "external_id", "prompt", "messages", "responses", "chosen", "rejected", "answer",
                 "reference_answer", "metadata"}
# Columns of Preflab's own pair export that name things of the project it came from (its rankings, rounds, users):
# a pair row's weight and margin are kept, these are left out rather than kept as metadata.
_PAIR_EXPORT_FIELDS = {"weight", "margin", "ranking_id", "annotator", "chosen_round", "rejected_round",
                       "chosen_model", "rejected_model"}
_ROLES = {"system", "user", "assistant", "tool"}


class ImportFileError(ValueError):
    def __init__(self, line: int, field_name: str, problem: str, *, unit: str = "line") -> None:
        self.line = line
        self.unit = unit
        # a field named after a key of the file can be as long as a line
        self.field = field_name if len(field_name) <= FIELD_MAX_CHARS else field_name[: FIELD_MAX_CHARS - 1] + "…"
        self.problem = problem
        super().__init__(f"{unit} {line}, field '{self.field}': {problem}")

    def as_row(self) -> "ImportFileError":
        """The same refusal naming a row of a columnar file (Parquet, datasets) instead of a line."""
        return ImportFileError(self.line, self.field, self.problem, unit="row")


@dataclass(frozen=True)
class ImportedLabel:
    """A thumb (aspect "", value 1.0 up / 0.0 down) or a rating given outside Preflab on one of the record's
    responses (an index into `ImportRecord.answers`)."""

    response: int
    aspect: str
    value: float
    annotator: str = ""


@dataclass(frozen=True)
class ImportedPair:
    """A preference between two of the record's responses (indices into `ImportRecord.answers`)."""

    chosen: int
    rejected: int
    weight: float = 1.0
    margin: float = 1.0


@dataclass(frozen=True)
class ImportedSuggestion:
    """A machine's answer to one question (Argilla's `<question>.suggestion`), on one response when the question is
    about one."""

    question: str
    value: Any
    score: float | None = None
    agent: str = ""
    response: int | None = None


@dataclass(frozen=True)
class ImportRecord:
    line: int
    external_id: str
    text: str
    messages: list[dict] | None = None
    reference_answer: str | None = None
    metadata: dict = field(default_factory=dict)
    responses: tuple[str, ...] = ()
    chosen: str | None = None
    rejected: str | None = None
    labels: tuple[ImportedLabel, ...] = ()
    pairs: tuple[ImportedPair, ...] = ()
    suggestions: tuple[ImportedSuggestion, ...] = ()
    # TRL's unpaired rows: rows with the same id (by default, the same prompt) join one item
    joins_by_prompt: bool = False
    # an imported {prompt, chosen, rejected} pair's weight and margin (its row's, else 1)
    pair_weight: float = 1.0
    pair_margin: float = 1.0

    @property
    def is_pair(self) -> bool:
        return self.chosen is not None

    @property
    def answers(self) -> tuple[str, ...]:
        """The responses to write, in order: chosen then rejected for a pair."""
        return (self.chosen, self.rejected) if self.chosen is not None and self.rejected is not None else self.responses

    @property
    def judged(self) -> bool:
        """Whether the record carries its judgement already (a pair, labels): its item is not for annotators."""
        return self.is_pair or bool(self.pairs) or bool(self.labels)


def format_from_name(filename: str) -> str:
    lowered = filename.lower()
    if lowered.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if lowered.endswith(".csv"):
        return "csv"
    if lowered.endswith(".parquet"):
        return "parquet"
    if lowered.endswith(".zip"):
        return "dataset"
    raise ImportFileError(0, "file", f"cannot tell the format of {filename!r}: name it .jsonl, .csv, .parquet or "
                                     f".zip (a zipped datasets directory)")


def iter_import(stream: BinaryIO, *, file_format: str) -> Iterator[ImportRecord]:
    """Each record of a file as it is read, or ImportFileError for the first bad line (ids are not checked for
    repeats: see the module's docstring)."""
    if file_format not in FORMATS:
        raise ImportFileError(0, "file", f"unknown format {file_format!r}; use one of {', '.join(FORMATS)}")
    if file_format in COLUMNAR_FORMATS:
        from webapp.annotation.dataset_import import columnar_rows

        for line, row in columnar_rows(stream, file_format=file_format):
            try:
                yield checked_record(line, row)
            except ImportFileError as error:
                raise error.as_row() from None
        return
    rows = _jsonl_rows(stream) if file_format == "jsonl" else _csv_rows(stream)
    for line, row in rows:
        yield checked_record(line, row)


def checked_record(line: int, row: dict) -> ImportRecord:
    """One row (a JSON object, or a CSV row read as one) checked as a file's row is: its record, or
    ImportFileError naming `line` and the field. The API checks the records of a JSON body with it."""
    refuse_unstorable(line, row)
    return _record(line, row)


def parse_import(data: bytes, *, file_format: str) -> list[ImportRecord]:
    """All records of a file, or ImportFileError for the first bad line (an id seen twice included)."""
    records: list[ImportRecord] = []
    seen: dict[str, int] = {}
    for record in iter_import(io.BytesIO(data), file_format=file_format):
        if record.external_id in seen:
            first = seen[record.external_id]
            if not (record.joins_by_prompt and records[first].joins_by_prompt):
                raise repeated_id(record, records[first].line)
            records[first] = joined_records(records[first], record)
            continue
        seen[record.external_id] = len(records)
        records.append(record)
    if not records:
        raise no_rows()
    return records


def repeated_id(record: ImportRecord, first_line: int) -> ImportFileError:
    return ImportFileError(record.line, "id", f"{record.external_id!r} already appears on line {first_line}")


class IdRepeatedInFile(ImportFileError):
    """An id met again far from where it first appears, found by services.prompts_import as it writes; where it
    first appears is found by reading the file again (`naming_first_line`)."""

    def __init__(self, record: ImportRecord) -> None:
        super().__init__(record.line, "id", f"{record.external_id!r} already appears earlier in the file")
        self.record = record


def naming_first_line(error: IdRepeatedInFile, path: Path, *, file_format: str) -> ImportFileError:
    with path.open("rb") as stream:
        first = first_line_of_id(stream, file_format=file_format, external_id=error.record.external_id)
    return repeated_id(error.record, first)


def count_checked_rows(stream: BinaryIO, *, file_format: str, progress: Callable[[int], None] | None = None) -> int:
    """How many rows a file holds, each read and checked (ImportFileError for the first bad one, or for none);
    `progress` is called with the count so far after each row."""
    rows = 0
    for rows, _ in enumerate(iter_import(stream, file_format=file_format), start=1):
        if progress is not None:
            progress(rows)
    if not rows:
        raise no_rows()
    return rows


def no_rows() -> ImportFileError:
    return ImportFileError(0, "file", "the file holds no rows")


def first_line_of_id(stream: BinaryIO, *, file_format: str, external_id: str) -> int:
    """The line where `external_id` first appears in a file already read once without error (0 if it does not)."""
    return next((record.line for record in iter_import(stream, file_format=file_format)
                 if record.external_id == external_id), 0)


def refuse_unstorable(line: int, value: object, field_name: str = "") -> None:
    """The rule every text sent to Preflab follows (webapp.text.unstorable_value_check: no NUL, no lone surrogate, no
    NaN or Infinity, bounded nesting), as ImportFileError naming `line` and the field."""
    try:
        unstorable_value_check(value, field_name)
    except UnstorableValue as error:
        raise ImportFileError(line, error.field, error.problem) from None


def _numbered_lines(stream: BinaryIO) -> Iterator[tuple[int, str]]:
    try:
        yield from text_lines(stream, name="the file", max_line_bytes=IMPORT_LINE_MAX_BYTES)
    except UnreadableLine as error:
        raise ImportFileError(error.line, "file", error.problem) from None


def _jsonl_rows(stream: BinaryIO) -> Iterator[tuple[int, dict]]:
    try:
        yield from numbered_jsonl_lines(_numbered_lines(stream), name="the file")
    except JsonlError as error:
        raise ImportFileError(error.line, "json", error.problem) from None


def _csv_rows(stream: BinaryIO) -> Iterator[tuple[int, dict]]:
    # one physical line at a time, so the reader's line_num counts lines of the file
    reader = csv.DictReader(text for _, text in _numbered_lines(stream))
    try:
        if not reader.fieldnames:
            raise ImportFileError(1, "header", "the CSV file has no header row")
        for row in reader:
            line = reader.line_num
            if None in row:
                raise ImportFileError(line, "row", "more cells than header columns")
            yield line, _csv_row_to_object(line, row)
    except csv.Error as error:
        # the reader fails on the line after the last one it counted (a cell over CSV_CELL_MAX_CHARS, a NUL)
        problem = f"not readable as CSV ({error})"
        if "new-line character seen in unquoted field" in str(error):
            problem = ("a line ends in a bare carriage return (\\r, an old Mac line end): save the file with "
                       "\\n or \\r\\n line ends")
        raise ImportFileError(reader.line_num + 1, "row", problem) from None


def _csv_row_to_object(line: int, row: dict[str, str | None]) -> dict:
    values: dict[str, Any] = {key.strip(): value for key, value in row.items() if value not in (None, "")}
    for name in ("prompt", "chosen", "rejected", "completion"):
        # a conversation's cell holds its messages as JSON (exporting.csv_lines)
        if name in values and values[name].startswith('[{"role"'):
            values[name] = _json_conversation(values[name])
    if "completion" in values and "label" in values:
        values["label"] = _CSV_BOOLEANS.get(values["label"].strip().lower(), values["label"])
    for name in ("responses", "messages", "metadata"):
        if name in values:
            try:
                values[name] = json.loads(values[name])
            except json.JSONDecodeError as error:
                raise ImportFileError(line, name, f"the cell must hold JSON ({error.msg})") from None
            except (ValueError, RecursionError) as error:  # an integer of thousands of digits, deep nesting
                raise ImportFileError(line, name, f"the cell must hold JSON Python can read ({error})") from None
    numbered = sorted((key for key in values if key.startswith("response_")), key=_response_column_number)
    if numbered:
        if "responses" in values:
            raise ImportFileError(line, "responses", "give either a responses column or response_N columns")
        values["responses"] = [values.pop(key) for key in numbered]
    return values


_CSV_BOOLEANS = {"true": True, "false": False, "1": True, "0": False}


def _json_conversation(cell: str) -> object:
    """A cell's chat messages, or the cell's text when it is not a conversation after all."""
    try:
        value = json.loads(cell)
    except (ValueError, RecursionError):
        return cell
    return value if is_conversation(value) else cell


def _response_column_number(name: str) -> int:
    number = whole_number(name.removeprefix("response_"))
    return 10**9 if number is None else number


def _record(line: int, row: dict) -> ImportRecord:
    from webapp.annotation.argilla_import import argilla_record, is_argilla_row

    if is_argilla_row(row):
        return argilla_record(line, row)
    if "completion" in row or ("label" in row and isinstance(row["label"], bool)):
        return _unpaired_record(line, row)
    if "prompt" not in row and "messages" not in row and is_conversation(row.get("chosen")):
        row = _explicit_prompt(line, row)
    messages = None
    if "messages" in row:
        if "prompt" in row:
            raise ImportFileError(line, "messages", "give either prompt or messages, not both")
        messages = _messages(line, "messages", row["messages"])
        responses: list[str] = []
        if messages[-1]["role"] == "assistant":
            responses.append(_text(line, f"messages[{len(messages) - 1}].content", messages[-1]["content"],
                                   max_chars=RESPONSE_MAX_CHARS))
            messages = messages[:-1]
            if not messages:
                raise ImportFileError(line, "messages", "there is no message before the assistant's answer")
        text = _bounded(line, "messages", _messages_text(messages), PROMPT_MAX_CHARS)
    elif "prompt" in row:
        prompt = row["prompt"]
        if isinstance(prompt, list):
            messages = _messages(line, "prompt", prompt)
            text = _bounded(line, "prompt", _messages_text(messages), PROMPT_MAX_CHARS)
        else:
            text = _text(line, "prompt", prompt, max_chars=PROMPT_MAX_CHARS)
        responses = []
    else:
        raise ImportFileError(line, "prompt", "missing: every row needs a prompt (or chat messages)")

    if "responses" in row:
        value = row["responses"]
        if not isinstance(value, list):
            raise ImportFileError(line, "responses", "must be a list of strings")
        responses += [_response_text(line, f"responses[{index}]", item) for index, item in enumerate(value)]

    chosen = rejected = None
    if "chosen" in row or "rejected" in row:
        if responses:
            raise ImportFileError(line, "chosen", "a row has either responses or chosen/rejected, not both")
        for name in ("chosen", "rejected"):
            if name not in row:
                raise ImportFileError(line, name, "missing: chosen and rejected come together")
        chosen = _response_text(line, "chosen", row["chosen"])
        rejected = _response_text(line, "rejected", row["rejected"])
        if chosen == rejected:
            raise ImportFileError(line, "rejected", "is the same text as chosen")
        row = {key: value for key, value in row.items() if key not in _PAIR_EXPORT_FIELDS or key in ("weight",
                                                                                                     "margin")}
    pair_weight = _pair_number(line, row, "weight") if chosen is not None else 1.0
    pair_margin = _pair_number(line, row, "margin") if chosen is not None else 1.0
    if chosen is not None:
        row = {key: value for key, value in row.items() if key not in ("weight", "margin")}

    metadata = row.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ImportFileError(line, "metadata", "must be an object")
    metadata = {**{key: value for key, value in row.items() if key not in _KNOWN_FIELDS}, **metadata}

    answer = row.get("answer", row.get("reference_answer"))
    if answer is not None and not isinstance(answer, str | int | float):
        raise ImportFileError(line, "answer", "must be a string or a number")
    if answer is not None:
        _bounded(line, "answer", str(answer), RESPONSE_MAX_CHARS)

    external_id = row.get("id", row.get("external_id"))
    if external_id is None:
        external_id = _content_id(text, responses, chosen, rejected)
    elif not isinstance(external_id, str | int) or not str(external_id).strip():
        raise ImportFileError(line, "id", "must be a non-empty string or number")
    elif len(str(external_id)) > 200:
        raise ImportFileError(line, "id", "is longer than 200 characters")

    return ImportRecord(
        line=line,
        external_id=str(external_id).strip(),
        text=text,
        messages=messages,
        reference_answer=None if answer is None else str(answer),
        metadata=metadata,
        responses=tuple(responses),
        chosen=chosen,
        rejected=rejected,
        pair_weight=pair_weight,
        pair_margin=pair_margin,
    )


def _pair_number(line: int, row: dict, name: str) -> float:
    """A pair row's weight or margin: a positive (margin: non-negative) number, 1 when absent."""
    value = row.get(name)
    if value is None:
        return 1.0
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ImportFileError(line, name, f"must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0 or (
            name == "weight" and value == 0):
        raise ImportFileError(line, name, "must be a positive number" if name == "weight" else
                              "must be a number of at least 0")
    return float(value)


def _unpaired_record(line: int, row: dict) -> ImportRecord:
    """TRL's unpaired row {prompt, completion, label}: the completion with an imported thumb. Its id, unless given,
    is its prompt's, so that rows sharing a prompt join one item."""
    for name in ("prompt", "completion", "label"):
        if name not in row:
            raise ImportFileError(line, name, "missing: TRL's unpaired format has prompt, completion and label")
    if not isinstance(row["label"], bool):
        raise ImportFileError(line, "label", f"must be true or false, got {row['label']!r}")
    base = _record(line, {key: value for key, value in row.items() if key not in _UNPAIRED_ROW_FIELDS})
    completion = _response_text(line, "completion", row["completion"])
    annotator = row.get("annotator") or ""
    if not isinstance(annotator, str):
        raise ImportFileError(line, "annotator", "must be a string")
    external_id = base.external_id if ("id" in row or "external_id" in row) else _prompt_id(base.text)
    return replace(base, external_id=external_id, responses=(completion,),
                   labels=(ImportedLabel(0, THUMB_ASPECT, 1.0 if row["label"] else 0.0, annotator[:200]),),
                   joins_by_prompt=True)


THUMB_ASPECT = ""  # ResponseLabel.THUMB (models import nothing from here)
# An unpaired row's own fields, and the columns of Preflab's unpaired export that name things of the project it came
# from (its response, round and model, where the row came from): not the item's metadata.
_UNPAIRED_ROW_FIELDS = {"completion", "label", "annotator", "response_id", "source", "round", "model"}


def joined_records(first: ImportRecord, other: ImportRecord) -> ImportRecord:
    """Two unpaired records of one item as one: the responses of both (a text given twice is one response, labelled
    twice) and the labels of both; ImportFileError when they carry the same id but not the same prompt."""
    if (other.text, other.messages) != (first.text, first.messages):
        raise ImportFileError(other.line, "id", f"{other.external_id!r} is the id of line {first.line}, whose prompt "
                                                f"is another one")
    responses = list(first.responses)
    moved = {}
    for index, text in enumerate(other.responses):
        if text not in responses:
            responses.append(text)
        moved[index] = responses.index(text)
    labels = first.labels + tuple(replace(label, response=moved[label.response]) for label in other.labels)
    return replace(first, responses=tuple(responses), labels=labels)


def _prompt_id(text: str) -> str:
    payload = json.dumps(["unpaired", text], ensure_ascii=False)
    return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def _explicit_prompt(line: int, row: dict) -> dict:
    """TRL's implicit prompt made explicit the way the trainer does it (trainer.formats.chat): the turns chosen and
    rejected share are the prompt, and what follows in each must be one assistant answer to rank."""
    if "rejected" not in row:
        raise ImportFileError(line, "rejected", "missing: chosen and rejected come together")
    try:
        explicit = normalize_record({"chosen": row["chosen"], "rejected": row["rejected"]}, index=line, name="file")
    except ChatFormatError as error:
        field_name = "rejected" if "field 'rejected'" in error.problem else "chosen"
        raise ImportFileError(line, field_name, error.problem) from None
    for name in ("chosen", "rejected"):
        if len(explicit[name]) != 1:
            raise ImportFileError(line, name, "after the turns it shares with the other answer, there must be "
                                              "exactly one assistant message")
    return {**row, **explicit}


def _text(line: int, name: str, value: object, *, max_chars: int) -> str:
    if not isinstance(value, str):
        raise ImportFileError(line, name, f"must be a string, got {type(value).__name__}")
    if is_blank(value):
        raise ImportFileError(line, name, "is empty (or only whitespace)")
    return _bounded(line, name, value, max_chars)


def _bounded(line: int, name: str, text: str, max_chars: int) -> str:
    """`text`, or ImportFileError when it is over its kind's bound (webapp.text_bounds)."""
    problem = length_problem(text, max_chars)
    if problem:
        raise ImportFileError(line, name, problem)
    return text


def _response_text(line: int, name: str, value: object) -> str:
    """A response is a string, {"text": ...}, or chat messages whose last assistant message is the answer."""
    if isinstance(value, dict) and "text" in value:
        return _text(line, name, value["text"], max_chars=RESPONSE_MAX_CHARS)
    if isinstance(value, list):
        answers = [message["content"] for message in _messages(line, name, value) if message["role"] == "assistant"]
        if not answers:
            raise ImportFileError(line, name, "these messages hold no assistant message")
        return _text(line, name, answers[-1], max_chars=RESPONSE_MAX_CHARS)
    return _text(line, name, value, max_chars=RESPONSE_MAX_CHARS)


def _messages(line: int, name: str, value: object) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ImportFileError(line, name, "must be a non-empty list of {role, content} messages")
    messages = []
    for index, message in enumerate(value):
        where = f"{name}[{index}]"
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise ImportFileError(line, where, "each message needs a role and a content")
        if not isinstance(message["role"], str) or message["role"] not in _ROLES:
            raise ImportFileError(line, f"{where}.role", f"unknown role {message['role']!r}")
        if not isinstance(message["content"], str):
            raise ImportFileError(line, f"{where}.content", "must be a string")
        messages.append({"role": message["role"], "content": message["content"]})
    return messages


def _messages_text(messages: Iterable[dict]) -> str:
    return "\n\n".join(f"{message['role']}: {message['content']}" for message in messages)


def _content_id(text: str, responses: list[str], chosen: str | None, rejected: str | None) -> str:
    payload = json.dumps([text, responses, chosen, rejected], ensure_ascii=False)
    return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]
