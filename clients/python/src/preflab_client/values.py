"""Values as the API takes them: JSON has no NaN or Infinity, so non-finite numbers travel as the strings
"nan", "inf" and "-inf" (the API contract's spelling) and come back from the server as floats again."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

# what the server may send back for a non-finite value (its storage spells them as JavaScript does)
_NON_FINITE = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "Infinity": math.inf, "-inf": -math.inf,
               "-Infinity": -math.inf}


# The server refuses text holding either (Postgres cannot store them), naming the field.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class NotANumber(ValueError):
    pass


def number_text(value: float) -> float | str:
    """A float, or its API spelling when it is not finite."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def storable_text(text: str) -> str:
    """What a model wrote, as the server stores it: a NUL or a lone surrogate (a byte-level tokenizer decodes any
    byte) replaced by U+FFFD, as Preflab's own workers store a model's text, instead of the batch being refused."""
    return _UNSTORABLE.sub("\ufffd", text)


def metric_value(value: Any) -> float | str | None:
    """A logged value as the API takes it: None stays null; numbers of any kind (numpy, a 0-d tensor) become
    floats; anything else raises NotANumber."""
    if value is None:
        return None
    if isinstance(value, str):
        raise NotANumber(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise NotANumber(repr(value)) from None
    return number_text(number)


def plain_json(value: Any) -> Any:
    """`value` made JSON-safe: non-finite floats spelled out, tuples as lists, numpy and torch scalars as
    numbers, keys as strings, anything else unknown as its str()."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, Mapping):
        return {str(key): plain_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain_json(item) for item in value]
    if hasattr(value, "item") and getattr(value, "shape", None) in ((), None):  # numpy / torch scalars
        try:
            return plain_json(value.item())
        except (TypeError, ValueError):
            pass
    return str(value)


def decode_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _NON_FINITE.get(value, value) if isinstance(value, str) else value
            for name, value in metrics.items()}
