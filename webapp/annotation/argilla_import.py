"""Records in Argilla's exported column schema (Argilla 2.x `Dataset.records.to_datasets()`, `Dataset.to_hub`, and
so Preflab's argilla.parquet): one row a record, columns `id`, `status`, its fields, its metadata, and for each
question `<q>.responses`, `<q>.responses.users`, `<q>.responses.status` (lists, one entry per annotator) and
`<q>.suggestion`, `<q>.suggestion.score`, `<q>.suggestion.agent`. A row holding any such column is one.

The mapping (the README's «Argilla records»):
- prompt: the first text (or chat) field named prompt, instruction, input, question, query or text;
- responses: the fields named response, completion, generation or output, alone or numbered (response_1,
  response-2, response3, ...), in their numbers' order, or one list field of them (`responses`);
- a ranking question (a list of options naming responses: by field name, or by their number) -> preference pairs
  from each annotator's ranking, as a ranking's (`preferences.pairs_from_tiers`); Argilla's older {value, rank}
  entries keep their ties;
- a label question answering good/bad, yes/no, up/down, positive/negative, true/false... -> thumbs;
- a rating question (a number) -> ratings whose aspect is the question's name;
  a thumb or a rating is on the question's response: its name ends with the response's number (helpfulness_2 rates
  response 2, aspect "helpfulness"; thumb_1, label_1 ...), or the record has one response;
- each `<q>.suggestion` -> a Suggestion (question, value as given, score, agent; a list of scores, one per entry
  of a multi-label or ranking suggestion, stays with its value: {"value": ..., "score": [...]});
- only submitted answers count (`.responses.status` draft or discarded are left out); each answer's user id is its
  external annotator;
- answers to other questions (text, multi-label, spans) are kept in the prompt's metadata under `argilla_responses`;
  other columns are metadata, as in any import.
"""

import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from webapp.annotation.importing import (
    THUMB_ASPECT,
    ImportedLabel,
    ImportedPair,
    ImportedSuggestion,
    ImportFileError,
    ImportRecord,
    _bounded,
    _messages,
    _messages_text,
    _response_text,
    _text,
)
from webapp.annotation.preferences import pairs_from_tiers
from webapp.text_bounds import PROMPT_MAX_CHARS

QUESTION_SUFFIXES = (".responses.users", ".responses.status", ".responses", ".suggestion.score",
                     ".suggestion.agent", ".suggestion")
PROMPT_FIELDS = ("prompt", "instruction", "input", "question", "query", "text")
RESPONSE_FIELD = re.compile(r"^(?:response|completion|generation|output)s?(?:[-_ ]?(\d+))?$", re.IGNORECASE)
_PER_RESPONSE = re.compile(r"^(.+?)[-_](\d+)$")
GOOD = {"good", "yes", "up", "thumbs_up", "thumbs-up", "positive", "true", "accept", "accepted", "correct",
        "desirable", "👍", "1"}
BAD = {"bad", "no", "down", "thumbs_down", "thumbs-down", "negative", "false", "reject", "rejected", "incorrect",
       "undesirable", "👎", "0"}
_DROPPED = {"_server_id"}


def is_argilla_row(row: dict) -> bool:
    return any(key.endswith((".responses", ".suggestion")) for key in row)


def question_of(column: str) -> tuple[str, str] | None:
    """(question, suffix) of a question column, None for a field or metadata column."""
    for suffix in QUESTION_SUFFIXES:
        if column.endswith(suffix) and len(column) > len(suffix):
            return column[: -len(suffix)], suffix
    return None


def argilla_record(line: int, row: dict) -> ImportRecord:
    questions: dict[str, dict[str, Any]] = {}
    others: dict[str, Any] = {}
    for column, value in row.items():
        found = question_of(column)
        if found:
            questions.setdefault(found[0], {})[found[1]] = value
        elif column not in _DROPPED and value is not None:
            others[column] = value
    prompt_field = next((name for name in PROMPT_FIELDS if others.get(name) is not None), None)
    if prompt_field is None:
        raise ImportFileError(line, "prompt", f"an Argilla record needs its prompt in a field named one of "
                                              f"{', '.join(PROMPT_FIELDS)}")
    text, messages = _prompt(line, prompt_field, others.pop(prompt_field))
    names, responses = _responses(line, others)
    record_id = others.pop("id", None)

    labels: list[ImportedLabel] = []
    pairs: list[ImportedPair] = []
    suggestions: list[ImportedSuggestion] = []
    kept: dict[str, list[dict]] = {}
    for question, columns in sorted(questions.items()):
        answers = _answers(line, question, columns)
        kind = _question_kind([value for _, value in answers], names)
        for user, value in answers:
            if kind == "ranking":
                pairs += _ranking_pairs(line, question, value, names)
            elif kind in ("thumb", "rating"):
                response, aspect = _target(line, question, names)
                thumb = _thumb_value(value)
                labels.append(ImportedLabel(response, THUMB_ASPECT if kind == "thumb" else aspect,
                                            thumb if kind == "thumb" else float(value), user[:200]))
            else:
                kept.setdefault(question, []).append({"user": user, "value": value})
        if columns.get(".suggestion") is not None:
            suggestions.append(_suggestion(line, question, columns, names))

    metadata = dict(others)
    if kept:
        metadata["argilla_responses"] = kept
    if record_id is None:
        record_id = _content_id(text, responses)
    elif not isinstance(record_id, str | int) or not str(record_id).strip() or len(str(record_id)) > 200:
        raise ImportFileError(line, "id", "must be a non-empty string or number of at most 200 characters")
    return ImportRecord(line=line, external_id=str(record_id).strip(), text=text, messages=messages,
                        metadata=metadata, responses=tuple(responses), labels=tuple(labels), pairs=tuple(pairs),
                        suggestions=tuple(suggestions))


def _prompt(line: int, name: str, value: object) -> tuple[str, list[dict] | None]:
    if isinstance(value, list):  # a ChatField
        messages = _messages(line, name, value)
        return _bounded(line, name, _messages_text(messages), PROMPT_MAX_CHARS), messages
    return _text(line, name, value, max_chars=PROMPT_MAX_CHARS), None


def _responses(line: int, others: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The response fields' names (one per response; `responses_<n>` for the entries of a list field) and texts,
    taken out of `others`."""
    found = sorted(((int(match.group(1) or 0), column) for column in others
                    if (match := RESPONSE_FIELD.match(column))), key=lambda item: item)
    names: list[str] = []
    texts: list[str] = []
    for _, column in found:
        value = others.pop(column)
        if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
            for index, item in enumerate(value):
                names.append(f"{column}_{index + 1}")
                texts.append(_response_text(line, f"{column}[{index}]", item))
        else:
            names.append(column)
            texts.append(_response_text(line, column, value))
    return names, texts


def _answers(line: int, question: str, columns: dict[str, Any]) -> list[tuple[str, Any]]:
    """(user, value) of each submitted answer."""
    values = columns.get(".responses")
    if values is None:
        return []
    if not isinstance(values, list):
        raise ImportFileError(line, f"{question}.responses", "must be a list (one answer per annotator)")
    users = columns.get(".responses.users") or [""] * len(values)
    statuses = columns.get(".responses.status") or [None] * len(values)
    for suffix, listed in ((".responses.users", users), (".responses.status", statuses)):
        if not isinstance(listed, list) or len(listed) != len(values):
            raise ImportFileError(line, f"{question}{suffix}", f"must be a list as long as {question}.responses")
    return [("" if user is None else str(user), value) for value, user, status in zip(values, users, statuses,
                                                                                       strict=True)
            if value is not None and status in (None, "submitted")]


def _option_index(line: int, where: str, option: object, names: Sequence[str]) -> int | None:
    """The response an option names: by field name, else by its trailing number; None when it names none."""
    if not isinstance(option, str):
        return None
    if option in names:
        return names.index(option)
    number = re.search(r"(\d+)$", option)
    if number and 1 <= int(number.group(1)) <= len(names):
        return int(number.group(1)) - 1
    return None


def _ranking_entries(value: object) -> list[tuple[object, int | None]] | None:
    """(option, rank) of a ranking's entries: Argilla 2.x's list of options best first, or its older
    [{value, rank}]; None when the value is no list."""
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(item, dict) and "value" in item for item in value):
        return [(item["value"], item.get("rank")) for item in value]
    return [(item, None) for item in value]


def _is_ranking(value: object, names: Sequence[str]) -> bool:
    entries = _ranking_entries(value)
    return bool(entries) and len(names) >= 2 and all(
        _option_index(0, "", option, names) is not None for option, _ in entries)


def _ranking_pairs(line: int, question: str, value: object, names: Sequence[str]) -> list[ImportedPair]:
    entries = _ranking_entries(value) or []
    tiers: dict[int, list[int]] = {}
    for position, (option, rank) in enumerate(entries):
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
            raise ImportFileError(line, f"{question}.responses", f"rank {rank!r} is not a whole number")
        index = _option_index(line, question, option, names)
        tiers.setdefault(position if rank is None else rank, []).append(index)
    ordered = [tiers[rank] for rank in sorted(tiers)]
    if len({index for tier in ordered for index in tier}) != sum(len(tier) for tier in ordered):
        raise ImportFileError(line, f"{question}.responses", "a ranking names one response twice")
    return [ImportedPair(pair.chosen, pair.rejected, pair.weight, pair.margin) for pair in pairs_from_tiers(ordered)]


def _question_kind(values: list, names: Sequence[str]) -> str:
    """What a question's answers are, all of them alike: a ranking, thumbs, ratings, or other (kept as metadata).
    A label question answering "good" once and "neutral" once is not thumbs."""
    if values and all(_is_ranking(value, names) for value in values):
        return "ranking"
    if values and all(_thumb_value(value) is not None for value in values):
        return "thumb"
    if values and all(_is_rating(value) for value in values):
        return "rating"
    return "other"


def _thumb_value(value: object) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in GOOD:
            return 1.0
        if lowered in BAD:
            return 0.0
    return None


def _is_rating(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _target(line: int, question: str, names: Sequence[str]) -> tuple[int, str]:
    """The response a thumb or rating question is about, and the aspect its name leaves."""
    numbered = _PER_RESPONSE.match(question)
    if numbered and 1 <= int(numbered.group(2)) <= len(names):
        return int(numbered.group(2)) - 1, numbered.group(1)
    if len(names) == 1:
        return 0, question
    problem = (f"the record has {len(names)} responses and the question's name does not say which one it rates: "
               f"end it with the response's number (as {question}_1)") if names else "the record has no response field"
    raise ImportFileError(line, f"{question}.responses", problem)


def _suggestion(line: int, question: str, columns: dict[str, Any], names: Sequence[str]) -> ImportedSuggestion:
    value = columns[".suggestion"]
    score = columns.get(".suggestion.score")
    agent = columns.get(".suggestion.agent") or ""
    if not isinstance(agent, str):
        raise ImportFileError(line, f"{question}.suggestion.agent", "must be a string")
    response = None
    numbered = _PER_RESPONSE.match(question)
    if numbered and 1 <= int(numbered.group(2)) <= len(names) and not _is_ranking(value, names):
        response = int(numbered.group(2)) - 1
    elif len(names) == 1 and not _is_ranking(value, names):
        response = 0
    # a multi-label or ranking suggestion scores each entry: the list stays with the value
    if isinstance(score, list):
        value, score = {"value": value, "score": score}, None
    elif score is not None and not _is_rating(score):
        raise ImportFileError(line, f"{question}.suggestion.score", "must be a number")
    return ImportedSuggestion(question=question[:200], value=value, score=None if score is None else float(score),
                              agent=agent[:200], response=response)


def _content_id(text: str, responses: list[str]) -> str:
    payload = json.dumps(["argilla", text, responses], ensure_ascii=False)
    return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]
