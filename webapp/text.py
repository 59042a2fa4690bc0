"""Text made storable in Postgres, and the one rule for text that people and programs send.

Postgres text and jsonb columns cannot hold the NUL character, nor half of a UTF-16 surrogate pair (JSON's
"\\ud800" alone decodes to one; it is not text and cannot even be encoded as UTF-8), and jsonb holds no NaN or
Infinity. What a person or a program sends (an imported file, any request to the API) is refused where it holds
one, naming the field (`unstorable_value_check`): there the sender can fix the source.

A model can write a NUL too: a byte-level tokenizer decodes any byte, and a young policy samples any token. What
our own workers store from a model is kept with each NUL replaced by U+FFFD, the Unicode replacement character
(`storable_text`), so a reader still sees that something was there instead of the whole batch of samples failing
to save.
"""

from __future__ import annotations

import math
import re

NUL = "\x00"
REPLACEMENT = "\ufffd"
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# JSON this deep is no one's data; Python's own limit on nesting is about 1,000.
MAX_NESTING = 64


def storable_text(text: str) -> str:
    return text.replace(NUL, REPLACEMENT)


NUL_PROBLEM = "contains a NUL character (\\u0000), which cannot be stored"
LONE_SURROGATE_PROBLEM = "contains a lone UTF-16 surrogate (such as \\ud800), which is not text"


def unstorable_problem(text: str) -> str | None:
    """Why `text` cannot be stored, or None when it can: the one rule for text the API and the import take."""
    if NUL in text:
        return NUL_PROBLEM
    if LONE_SURROGATE.search(text):
        return LONE_SURROGATE_PROBLEM
    return None


class UnstorableValue(ValueError):
    def __init__(self, field: str, problem: str, *, non_finite: bool = False) -> None:
        self.field = field
        self.problem = problem
        self.non_finite = non_finite
        super().__init__(f"{field or 'value'}: {problem}")


def unstorable_value_check(
    value: object, field_name: str = "", depth: int = 0, *, non_finite_numbers: bool = False,
) -> None:
    """UnstorableValue naming the field (`a.b[2]`) of JSON-like `value` that holds text `unstorable_problem`
    refuses (keys included), a float JSON cannot hold (NaN, Infinity: Python's reader takes them, and 1e999; unless
    `non_finite_numbers`, for a value that stores them its own way, as metrics do), or nesting deeper than
    MAX_NESTING (well below what json.loads and the database's JSON parser take)."""
    if depth > MAX_NESTING:
        raise UnstorableValue(field_name, f"is nested more than {MAX_NESTING} levels deep")
    if isinstance(value, str):
        problem = unstorable_problem(value)
        if problem:
            raise UnstorableValue(field_name, problem)
    elif isinstance(value, float) and not math.isfinite(value) and not non_finite_numbers:
        raise UnstorableValue(field_name, f"is {value}, which JSON cannot hold: give a finite number",
                              non_finite=True)
    elif isinstance(value, dict):
        for key, item in value.items():
            unstorable_value_check(key, field_name or "key", depth + 1)
            name = _key_name(key)
            unstorable_value_check(item, f"{field_name}.{name}" if field_name else name, depth + 1,
                                   non_finite_numbers=non_finite_numbers)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            unstorable_value_check(item, f"{field_name}[{index}]", depth + 1, non_finite_numbers=non_finite_numbers)


def _key_name(key: object) -> str:
    key = str(key)
    if not key.strip():
        return "(a key or column with no name)"
    return key if len(key) <= 60 else f"{key[:40]}… ({len(key):,} characters)"


def typed_text_problem(value: str, *, max_length: int) -> str | None:
    """Why a short text a person typed (a name, a path) cannot be stored as is, or None when it can."""
    problem = unstorable_problem(value)
    if problem:
        return problem
    if len(value) > max_length:
        return f"is {len(value):,} characters long; at most {max_length:,} are allowed"
    return None


# A number typed into an address or a form (an id, a step): str.isdigit() takes "²", which int() refuses, and int()
# refuses more than 4,300 digits; 18 digits fit a 64-bit column.
NUMBER_MAX_DIGITS = 18


def whole_number(text: str) -> int | None:
    """The non-negative whole number `text` spells in ASCII digits, or None when it spells none."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= NUMBER_MAX_DIGITS else None


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """'1 preference pair', '2 preference pairs': the noun agrees with its number."""
    return f"{count} {singular if count == 1 else plural or singular + 's'}"


# Whitespace-only text, as a database regex (Postgres and SQLite alike) and in Python: such a response carries
# no preference, so it is left out of pairs and refused in training data.
BLANK_TEXT_REGEX = r"^\s*$"


def is_blank(text: str) -> bool:
    return not text.strip()
