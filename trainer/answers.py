"""Extracting and comparing final answers in model completions (verifiable rewards, task checkers)."""

import re
from fractions import Fraction

_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def extract_answer(text: str) -> str | None:
    """The final answer of a completion: the last <answer>...</answer> if any, else the last number."""
    tagged = _ANSWER_TAG.findall(text)
    if tagged:
        return tagged[-1].strip()
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


def _as_number(text: str) -> Fraction | None:
    cleaned = text.strip().replace(",", "").rstrip(".")
    if not _NUMBER.fullmatch(cleaned):
        return None
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(predicted: str | None, reference: str) -> bool:
    """Numeric equality when both sides are numbers (so "14.0" matches "14"), else exact string match."""
    if predicted is None:
        return False
    predicted_number, reference_number = _as_number(predicted), _as_number(reference)
    if predicted_number is not None and reference_number is not None:
        return predicted_number == reference_number
    return predicted.strip() == reference.strip()
