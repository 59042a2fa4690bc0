"""Held-out evaluation by greedy generation: exact-match accuracy on rows that carry a reference `answer`,
and the samples a run records so people can read what the model writes; avg@k by sampling (DAPO's metric)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.answers import answers_match, extract_answer
from trainer.generation import HFGenerationBackend, SamplingParams
from trainer.sink import Sink

SAMPLES_PER_STEP = 4


def has_answers(rows: Sequence[dict] | None) -> bool:
    return bool(rows) and all(isinstance(row.get("answer"), str | int | float) for row in rows)


@torch.no_grad()
def greedy_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    batch_size: int = 64,
) -> list[str]:
    was_training = model.training
    model.eval()
    backend = HFGenerationBackend(model, tokenizer)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        texts.extend(backend.generate(list(prompts[start : start + batch_size]), params).texts)
    model.train(was_training)
    return texts


def generation_accuracy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: Sequence[dict], *, max_new_tokens: int
) -> float:
    """Fraction of rows whose greedy completion's final answer matches the row's `answer`."""
    completions = greedy_completions(model, tokenizer, [row["prompt"] for row in rows], max_new_tokens=max_new_tokens)
    correct = sum(answers_match(extract_answer(text), str(row["answer"])) for text, row in zip(completions, rows, strict=True))
    return correct / len(rows)


def record_samples(
    sink: Sink,
    step: int,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[dict],
    *,
    max_new_tokens: int,
) -> None:
    """Greedy completions of the first few rows, with a `correct` reward when the row has an answer."""
    shown = list(rows[:SAMPLES_PER_STEP])
    completions = greedy_completions(model, tokenizer, [row["prompt"] for row in shown], max_new_tokens=max_new_tokens)
    for row, text in zip(shown, completions, strict=True):
        rewards = {}
        if "answer" in row:
            rewards["correct"] = float(answers_match(extract_answer(text), str(row["answer"])))
        sink.sample(step, row["prompt"], text, rewards)


def sample_writer(
    sink: Sink, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: Sequence[dict], *, max_new_tokens: int
) -> Callable[[int], None]:
    """The `write_samples(step)` callback of a loop whose policy generates."""
    return lambda step: record_samples(sink, step, model, tokenizer, rows, max_new_tokens=max_new_tokens)


def accuracy_evaluator(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, eval_data: Sequence[dict] | None, max_new_tokens: int
) -> Callable[[], dict[str, float]] | None:
    if not has_answers(eval_data):
        return None

    def evaluate() -> dict[str, float]:
        return {"eval/accuracy": generation_accuracy(model, tokenizer, eval_data, max_new_tokens=max_new_tokens)}

    return evaluate


@torch.no_grad()
def sampled_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[dict],
    *,
    samples_per_prompt: int,
    temperature: float,
    max_new_tokens: int,
) -> float:
    """avg@k (the DAPO paper's metric): exact-answer accuracy over k sampled completions per row."""
    backend = HFGenerationBackend(model, tokenizer)
    params = SamplingParams(group_size=samples_per_prompt, max_new_tokens=max_new_tokens, temperature=temperature)
    samples = backend.generate([row["prompt"] for row in rows], params)
    correct = sum(
        answers_match(extract_answer(text), str(rows[i // samples_per_prompt]["answer"]))
        for i, text in enumerate(samples.texts)
    )
    return correct / len(samples.texts)
