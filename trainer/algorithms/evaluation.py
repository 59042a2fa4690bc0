"""Held-out evaluation by greedy generation: exact-match accuracy on rows that carry a reference `answer`,
and the samples a run records so people can read what the model writes; avg@k by sampling (DAPO's metric)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.decoding.generation import HFGenerationBackend, SamplingParams
from trainer.formats.answers import answers_match, extract_answer, has_final_answer
from trainer.formats.chat import TextOrConversation, display_text, normalize_record
from trainer.sink import Sink, sample_row

SAMPLES_PER_STEP = 4


def has_answers(rows: Sequence[dict] | None) -> bool:
    return bool(rows) and all(isinstance(row.get("answer"), str | int | float) for row in rows)


def prompts_of(rows: Sequence[dict], *, name: str = "eval data") -> list[TextOrConversation]:
    """Each row's prompt, text or conversation, in any of TRL's formats (`messages`, implicit prompt...)."""
    return [normalize_record(row, index=index, name=name, unpaired=True)["prompt"] for index, row in enumerate(rows)]


@torch.no_grad()
def greedy_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[TextOrConversation],
    *,
    max_new_tokens: int,
    batch_size: int = 64,
    decoding: str = "auto",
) -> list[str]:
    was_training = model.training
    model.eval()
    backend = HFGenerationBackend(model, tokenizer, decoding=decoding)
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
    completions = greedy_completions(model, tokenizer, prompts_of(rows), max_new_tokens=max_new_tokens)
    return answer_accuracy(completions, [row["answer"] for row in rows])


def answer_accuracy(completions: Sequence[str], answers: Sequence[object]) -> float:
    """Fraction of completions whose final answer (strict: answer tag or \\boxed{}) matches its reference."""
    correct = sum(answers_match(extract_answer(text), str(answer)) for text, answer in zip(completions, answers, strict=True))
    return correct / len(completions)


def format_rate(completions: Sequence[str]) -> float:
    """Fraction of completions that state a final answer in a form strict answer checking reads."""
    return sum(map(has_final_answer, completions)) / len(completions)


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
    prompts = prompts_of(shown, name="sample rows")
    completions = greedy_completions(model, tokenizer, prompts, max_new_tokens=max_new_tokens)
    for row, prompt, text in zip(shown, prompts, completions, strict=True):
        rewards = {}
        if "answer" in row:
            rewards["correct"] = float(answers_match(extract_answer(text), str(row["answer"])))
        sink.sample(sample_row(step, display_text(prompt), text, rewards))


def sample_writer(
    sink: Sink, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: Sequence[dict], *, max_new_tokens: int
) -> Callable[[int], None]:
    """The `write_samples(step)` callback of a loop whose policy generates."""
    return lambda step: record_samples(sink, step, model, tokenizer, rows, max_new_tokens=max_new_tokens)


def accuracy_evaluator(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    eval_data: Sequence[dict] | None,
    max_new_tokens: int,
    *,
    decoding: str = "auto",
) -> Callable[[], dict[str, float]] | None:
    if not has_answers(eval_data):
        return None

    def evaluate() -> dict[str, float]:
        completions = greedy_completions(
            model, tokenizer, prompts_of(eval_data), max_new_tokens=max_new_tokens, decoding=decoding
        )
        return {
            "eval/accuracy": answer_accuracy(completions, [row["answer"] for row in eval_data]),
            "eval/format_rate": format_rate(completions),
        }

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
    completions = sampled_completions(
        model, tokenizer, rows, samples_per_prompt=samples_per_prompt, temperature=temperature,
        max_new_tokens=max_new_tokens,
    )
    return answer_accuracy(completions, [row["answer"] for row in rows for _ in range(samples_per_prompt)])


@torch.no_grad()
def sampled_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[dict],
    *,
    samples_per_prompt: int,
    temperature: float,
    max_new_tokens: int,
) -> list[str]:
    """k sampled completions per row, row by row (the completions avg@k is measured on)."""
    backend = HFGenerationBackend(model, tokenizer)
    params = SamplingParams(group_size=samples_per_prompt, max_new_tokens=max_new_tokens, temperature=temperature)
    return backend.generate(prompts_of(rows), params).texts
