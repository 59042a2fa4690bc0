"""What a model name given by a user is: a local directory or a hub id. One rule for the web and the trainer.

No torch at import: the web resolves model names with it.
"""

from __future__ import annotations

import re
from pathlib import Path

# Hub ids are org/name: legacy bare names ("gpt2") now redirect to an org on the hub, and accepting a bare
# word would let a typo of a registered name pass as a hub id and fail only on the GPU worker.
# Each part is at most 96 characters, as the Hub's own validate_repo_id says.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
ACCEPTED = "an absolute or ./relative directory holding config.json, or a hub id org/name"


def looks_local(value: str) -> bool:
    """A path rather than a hub id: written as one, or naming something that exists here."""
    if value.startswith(("/", ".", "~")):
        return True
    try:
        return Path(value).expanduser().exists()
    except OSError:  # a part over 255 characters (ENAMETOOLONG) names nothing here
        return False


def is_hub_id(value: str) -> bool:
    """org/name, with no `.` or `..` part (those are paths)."""
    return bool(HUB_ID.fullmatch(value)) and {".", ".."}.isdisjoint(value.split("/"))
