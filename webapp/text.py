"""Text written by a model, made storable in Postgres.

Postgres text and jsonb columns cannot hold the NUL character, and a model can write one: a byte-level
tokenizer decodes any byte, and a young policy samples any token. Such text is stored with each NUL
replaced by U+FFFD, the Unicode replacement character, so a reader still sees that something was there
instead of the whole batch of samples failing to save. (Imported files are refused instead, naming the line:
there the user can fix the source.)
"""

from __future__ import annotations

NUL = "\x00"
REPLACEMENT = "\ufffd"


def storable_text(text: str) -> str:
    return text.replace(NUL, REPLACEMENT)


def typed_text_problem(value: str, *, max_length: int) -> str | None:
    """Why a short text a person typed (a name, a path) cannot be stored as is, or None when it can."""
    if NUL in value:
        return "holds a NUL character"
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
