"""Extracting and comparing final answers in model completions (verifiable rewards, task checkers)."""

import re
from fractions import Fraction

_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_BOXED = "\\boxed{"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def extract_answer(text: str, *, fallback_last_number: bool = False) -> str | None:
    """The final answer of a completion: the last non-empty <answer>...</answer>, else the last \\boxed{...};
    None when there is neither. `fallback_last_number` then takes the last number in the text instead, the
    lenient reading that lets a degenerate completion such as `<think>8 + 9 = 17</think><` score."""
    tagged = [answer.strip() for answer in _ANSWER_TAG.findall(text) if answer.strip()]
    if tagged:
        return _last_boxed(tagged[-1]) or tagged[-1]  # <answer>\boxed{14}</answer> answers 14
    boxed = _last_boxed(text)
    if boxed:
        return boxed
    if not fallback_last_number:
        return None
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


def has_final_answer(text: str) -> bool:
    """Whether a completion states its answer in the form strict answer checking reads (tag or \\boxed{})."""
    return extract_answer(text) is not None


def _last_boxed(text: str) -> str | None:
    # braces nest in LaTeX answers (\boxed{\frac{1}{2}}), which a regular expression cannot match
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, begin = 1, start + len(_BOXED)
    for index in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[begin:index].strip() or None
    return None


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
