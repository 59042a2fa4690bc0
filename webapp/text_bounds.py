"""How long each kind of text people and programs write may be, in characters: one bound per kind, here (names
stored in a column have the column's length, which their forms and the API's schemas read). The README's "Text
bounds" table lists them all. Forms, the API (422), the import (its line) and the services check the same number,
and name the field.

A bound keeps what one write makes every later page carry small: the guidelines are on every annotate page (25 MB
of them made each one weigh 25 MB), a run's config and samples are on its page.
"""

from __future__ import annotations

# Names: projects, runs, models, metrics and rewards, external ids (their columns hold 200).
NAME_MAX_CHARS = 200
# Markdown shown to annotators on every annotate page (and on the project page): 100,000 characters is a long
# handbook (about 100 KB of English, 15,000 words) and keeps that page light.
GUIDELINES_MAX_CHARS = 100_000
# A prompt (a conversation's turns together), imported or logged with a sample: a long-context window of about
# 250,000 tokens.
PROMPT_MAX_CHARS = 1_000_000
# A response (imported, posted through the API, chosen or rejected, a reference answer) or a sample's completion:
# about 50,000 tokens, ten times the longest the sampling form generates.
RESPONSE_MAX_CHARS = 200_000
# A note on one ranking: pages of text; the cap keeps a pasted file out of the database.
RATIONALE_MAX_CHARS = 10_000
# What an external run's program says when it fails (a traceback fits).
RUN_ERROR_MAX_CHARS = 20_000
# An external run's config as JSON (a transformers TrainingArguments is about 5,000), shown on its page.
EXTERNAL_CONFIG_MAX_CHARS = 100_000
# A text value of a run's config (the launch form's text fields, e.g. lora_target_modules): as long as a model path.
CONFIG_TEXT_MAX_CHARS = 1_000


def length_problem(text: str, max_chars: int) -> str | None:
    """Why `text` is too long for its field ('is 25,000,000 characters long; at most 100,000 are allowed'), or None."""
    if len(text) > max_chars:
        return f"is {len(text):,} characters long; at most {max_chars:,} are allowed"
    return None
