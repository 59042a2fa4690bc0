"""Checking, tokenising and collating training rows.

Rows are dicts in TRL's formats (trainer.formats.chat): standard (text fields), conversational (message lists;
`messages` for SFT) or implicit prompt. SFT: {prompt, completion[, answer]}; reward model / DPO: {prompt, chosen,
rejected[, weight, margin, answer]}. `answer` (a reference answer) is only read by evaluation. Bad rows raise
DataError naming the row index and the field; an empty or whitespace-only completion, chosen or rejected is a bad
row. Token ids are exactly those TRL 1.16's SFT, DPO and reward trainers build for the same row (see
trainer.formats.chat.encode_completions). Batches are padded on the right to the longest sequence in the batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from trainer.devices import HOST
from trainer.formats import chat
from trainer.formats.chat import (
    LABEL_FIELD,
    ChatFormatError,
    TextOrConversation,
    conversation_text,
    normalize_record,
)
from trainer.formats.jsonl import JsonlError, read_jsonl_file

SFT_FIELDS = ("prompt", "completion")
PAIR_FIELDS = ("prompt", "chosen", "rejected")
UNPAIRED_FIELDS = ("prompt", "completion", LABEL_FIELD)
# A model learns nothing from an empty answer but "stop at once": such rows are refused, not trained on.
ANSWER_FIELDS = ("completion", "chosen", "rejected")


class DataError(ValueError):
    """Training or evaluation data is unusable; the message says which row and field."""


def read_jsonl_rows(path: str | Path) -> list[dict]:
    """Rows of a JSONL file; a line that is not a JSON object is a DataError naming file and line."""
    try:
        return read_jsonl_file(path)
    except JsonlError as error:
        raise DataError(str(error)) from error


def check_rows(
    rows: Sequence[dict], required: Sequence[str], *, name: str = "training data", unpaired: bool | None = None
) -> list[dict]:
    """The rows with an explicit prompt (trainer.formats.chat.normalize_record), or a DataError naming row and field.

    Rows in TRL's unpaired format are taken where `required` holds `label` (or `unpaired` says so), its label true
    or false."""
    if not rows:
        raise DataError(f"{name} is empty")
    if unpaired is None:
        unpaired = LABEL_FIELD in required
    normalized = []
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{name} row {index}: expected a dict, got {type(row).__name__}")
        try:
            row = normalize_record(row, index=index, name=name, unpaired=unpaired)
        except ChatFormatError as error:
            raise DataError(str(error)) from error
        normalized.append(row)
        for field in required:
            if field not in row:
                raise DataError(f"{name} row {index}: missing field {field!r}")
            if field == LABEL_FIELD:
                continue  # normalize_record checked it is true or false
            if not isinstance(row[field], str | list):
                raise DataError(f"{name} row {index}: field {field!r} must be text, got {type(row[field]).__name__}")
            if field in ANSWER_FIELDS and not conversation_text(row[field]).strip():
                raise DataError(
                    f"{name} row {index}: field {field!r} is empty (or only whitespace); remove the row or give "
                    "it a response"
                )
        for field in ("weight", "margin"):
            value = row.get(field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise DataError(f"{name} row {index}: field {field!r} must be a number, got {value!r}")
        if row.get("weight") is not None and row["weight"] < 0:
            raise DataError(f"{name} row {index}: field 'weight' must be >= 0, got {row['weight']}")
    return normalized


@dataclass(frozen=True)
class Limits:
    max_length: int
    max_prompt_length: int


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, prompt: TextOrConversation, limits: Limits, *, index: int, name: str
) -> list[int]:
    """The ids a model is prompted with, for sampling and training alike (trainer.formats.chat.encode_prompt)."""
    try:
        ids = chat.encode_prompt(tokenizer, prompt, index=index, name=name)
    except ChatFormatError as error:
        raise DataError(str(error)) from error
    return checked_prompt_ids(ids, limits, index=index, name=name)


def checked_prompt_ids(ids: list[int], limits: Limits, *, index: int, name: str) -> list[int]:
    if not ids:
        # the first completion token would have nothing before it to be predicted from
        raise DataError(f"{name} row {index}: prompt is empty (0 tokens, and the tokenizer adds no BOS token)")
    if len(ids) > limits.max_prompt_length:
        raise DataError(
            f"{name} row {index}: prompt is {len(ids)} tokens, longer than max_prompt_length={limits.max_prompt_length}"
        )
    return ids


def encode_row(
    tokenizer: PreTrainedTokenizerBase,
    prompt: TextOrConversation,
    completions: Sequence[TextOrConversation],
    limits: Limits,
    *,
    add_eos: bool,
    index: int,
    name: str,
) -> tuple[list[int], list[list[int]]]:
    """(prompt ids, [completion ids]) as TRL tokenises the row (trainer.formats.chat.encode_completions), each
    completion cut to the room max_length leaves after the prompt."""
    try:
        prompt_ids, completion_ids = chat.encode_completions(
            tokenizer, prompt, completions, add_eos=add_eos, index=index, name=name
        )
    except ChatFormatError as error:
        raise DataError(str(error)) from error
    checked_prompt_ids(prompt_ids, limits, index=index, name=name)
    room = limits.max_length - len(prompt_ids)
    return prompt_ids, [ids[:room] for ids in completion_ids]


@dataclass(frozen=True)
class SequenceExample:
    """prompt + completion tokens; completion tokens start at `prompt_length`."""

    input_ids: list[int]
    prompt_length: int


@dataclass(frozen=True)
class PairExample:
    chosen: SequenceExample
    rejected: SequenceExample
    weight: float
    margin: float


def encode_completion_rows(
    rows: Sequence[dict], fields: Sequence[str], tokenizer: PreTrainedTokenizerBase, limits: Limits, *, name: str
) -> Iterator[tuple[dict, list[int], list[int]]]:
    """Each checked row of one completion with its prompt ids and completion ids (EOS after a text completion), as
    TRL's SFT and KTO trainers tokenise it."""
    for index, row in enumerate(check_rows(rows, fields, name=name)):
        prompt, (completion,) = encode_row(
            tokenizer, row["prompt"], [row["completion"]], limits, add_eos=True, index=index, name=name
        )
        yield row, prompt, completion


def tokenize_sft(
    rows: Sequence[dict], tokenizer: PreTrainedTokenizerBase, limits: Limits, *, name: str = "training data"
) -> list[SequenceExample]:
    return [
        SequenceExample(prompt + completion, len(prompt))
        for _, prompt, completion in encode_completion_rows(rows, SFT_FIELDS, tokenizer, limits, name=name)
    ]


def tokenize_pairs(
    rows: Sequence[dict],
    tokenizer: PreTrainedTokenizerBase,
    limits: Limits,
    *,
    add_eos: bool,
    name: str = "training data",
) -> list[PairExample]:
    rows = check_rows(rows, PAIR_FIELDS, name=name)
    examples = []
    for index, row in enumerate(rows):
        prompt, (chosen, rejected) = encode_row(
            tokenizer, row["prompt"], [row["chosen"], row["rejected"]], limits, add_eos=add_eos, index=index, name=name
        )
        examples.append(
            PairExample(
                chosen=SequenceExample(prompt + chosen, len(prompt)),
                rejected=SequenceExample(prompt + rejected, len(prompt)),
                weight=float(row.get("weight", 1.0) if row.get("weight") is not None else 1.0),
                margin=float(row.get("margin") or 0.0),
            )
        )
    return examples


@dataclass(frozen=True)
class UnpairedExample:
    """A prompt, one completion (cut to the room max_length leaves) and whether it is desirable."""

    prompt_ids: list[int]
    completion_ids: list[int]
    label: bool


def tokenize_unpaired(
    rows: Sequence[dict], tokenizer: PreTrainedTokenizerBase, limits: Limits, *, name: str = "training data"
) -> list[UnpairedExample]:
    """KTO's rows (TRL's unpaired format), tokenised as TRL 1.16's KTOTrainer does (EOS after a text completion)."""
    return [
        UnpairedExample(prompt, completion, row[LABEL_FIELD])
        for row, prompt, completion in encode_completion_rows(rows, UNPAIRED_FIELDS, tokenizer, limits, name=name)
    ]


def mismatched_pairs(examples: Sequence[UnpairedExample], *, max_length: int) -> list[PairExample]:
    """Each example's own sequence (as `chosen`) beside its prompt with the previous example's completion (as
    `rejected`; the first takes the last one's): KTO's KL sequences, built as TRL's KTOTrainer builds them within a
    batch. The mismatched sequence is cut to max_length, as TRL's collator cuts it."""
    pairs = []
    for position, example in enumerate(examples):
        other = examples[position - 1].completion_ids[: max_length - len(example.prompt_ids)]
        pairs.append(
            PairExample(
                chosen=SequenceExample(example.prompt_ids + example.completion_ids, len(example.prompt_ids)),
                rejected=SequenceExample(example.prompt_ids + other, len(example.prompt_ids)),
                weight=1.0,
                margin=0.0,
            )
        )
    return pairs


@dataclass
class SequenceBatch:
    """input_ids, attention_mask, completion_mask: [N, T], right-padded to the longest row.

    completion_mask is 1 on completion tokens (by position in input_ids); `prompt_start` is the smallest
    prompt length, so logits before it are never needed.
    """

    input_ids: Tensor
    attention_mask: Tensor
    completion_mask: Tensor
    min_prompt_length: int

    @property
    def tokens(self) -> int:
        return int(self.attention_mask.sum())

    def to(self, device: torch.device) -> SequenceBatch:
        return SequenceBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.completion_mask.to(device),
            self.min_prompt_length,
        )


def collate(examples: Sequence[SequenceExample], *, pad_token_id: int) -> SequenceBatch:
    width = max(len(example.input_ids) for example in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long, device=HOST)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long, device=HOST)
    completion_mask = torch.zeros((len(examples), width), dtype=torch.long, device=HOST)
    for row, example in enumerate(examples):
        length = len(example.input_ids)
        input_ids[row, :length] = torch.tensor(example.input_ids, dtype=torch.long, device=HOST)
        attention_mask[row, :length] = 1
        completion_mask[row, example.prompt_length : length] = 1
    return SequenceBatch(input_ids, attention_mask, completion_mask, min(e.prompt_length for e in examples))


def collate_pairs(pairs: Sequence[PairExample], *, pad_token_id: int) -> SequenceBatch:
    """Chosen rows 0..B-1, then rejected rows B..2B-1, in one batch so one forward scores both."""
    return collate([pair.chosen for pair in pairs] + [pair.rejected for pair in pairs], pad_token_id=pad_token_id)
