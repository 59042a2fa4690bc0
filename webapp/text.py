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
