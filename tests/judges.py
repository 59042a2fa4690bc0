"""Tiny judge models built for real: the tiny Llama trained for a few CPU steps to answer the judge's questions
(trainer.judging) with the letter a rule gives, then saved with save_pretrained as a judge directory."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.judging import (
    COMPARE_WORDS,
    Comparison,
    answer_token_ids,
    comparison_question,
    left_padded,
    question_ids,
)

# marks the better response for a judge that reads content (train_judge's `content_judge` rule)
GOOD_MARK = "good"


def always_first(_comparison: Comparison) -> str:
    """The judge of pure position bias: the response shown as A, whatever it says."""
    return "A"


def marked_response(comparison: Comparison) -> str:
    """The judge of content: the response holding GOOD_MARK, in either position."""
    return "A" if GOOD_MARK in comparison.first else "B"


def train_judge(base: Path, directory: Path, *, guidelines: str, comparisons: Sequence[Comparison],
                rule: Callable[[Comparison], str], steps: int = 200, seed: int = 0) -> Path:
    """Copy the tiny model to `directory` and train it until it answers each of `comparisons` as `rule` says
    (every comparison is trained in both orders); AssertionError if it does not after `steps`."""
    threads = torch.get_num_threads()
    # one thread: several at once on a busy machine make these small steps many times slower
    torch.set_num_threads(1)
    try:
        return _train(base, directory, guidelines=guidelines, comparisons=comparisons, rule=rule, steps=steps, seed=seed)
    finally:
        torch.set_num_threads(threads)


def _train(base: Path, directory: Path, *, guidelines: str, comparisons: Sequence[Comparison],
           rule: Callable[[Comparison], str], steps: int, seed: int) -> Path:
    torch.manual_seed(seed)
    shutil.copytree(base, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    letters = dict(zip(COMPARE_WORDS, answer_token_ids(tokenizer, COMPARE_WORDS), strict=True))
    shown = [order for c in comparisons for order in (c, Comparison(c.prompt, c.second, c.first))]
    examples = [(question_ids(tokenizer, comparison_question(guidelines, c)), letters[rule(c)]) for c in shown]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = _loss(model, examples, tokenizer.pad_token_id or 0)
        if loss.item() < 0.02:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _loss(model, examples: list[tuple[list[int], int]], pad: int) -> torch.Tensor:
    input_ids, mask, positions = left_padded([ids for ids, _ in examples], pad)
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits[:, -1, :]
    return torch.nn.functional.cross_entropy(logits, torch.tensor([target for _, target in examples]))
