"""The seeds' arithmetic task ("Calculate 2 + 2 * 6"): problems by level, a fixed train/test split, SFT
targets `<think>steps</think><answer>14</answer>`, an answer checker, preference pairs and a tiny model.

No torch at import: the web lists these data sets. `build_tiny_model` loads torch when it is called.

Levels: 1 = a + b with one-digit numbers (100 problems); 2 = two operations on one-digit numbers with
precedence (2 + 2 * 6); 3 = three operations on numbers up to 20.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainer.formats.answers import answers_match, extract_answer
from trainer.kinds import run_kind

Split = Literal["train", "test"]
LEVELS = (1, 2, 3)
TEST_PERCENT = 20
_OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@dataclass(frozen=True)
class Problem:
    expression: str
    answer: int
    steps: tuple[str, ...]

    @property
    def prompt(self) -> str:
        return f"Calculate {self.expression}\n"

    @property
    def completion(self) -> str:
        """The SFT target: short reasoning steps, then the tagged answer."""
        return format_completion(self.steps, self.answer)

    @property
    def split(self) -> Split:
        return split_of(self.expression)


def format_completion(steps: tuple[str, ...], answer: int) -> str:
    return f"<think>{'; '.join(steps)}</think><answer>{answer}</answer>"


def split_of(expression: str) -> Split:
    """A pure function of the text, so a problem is in train or in test on every machine and every run."""
    digest = hashlib.sha256(expression.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:4], "big") % 100 < TEST_PERCENT else "train"


def solve(expression: str, *, precedence: bool = True) -> Problem:
    """Evaluate `a op b op c ...` (+, -, *; * first, then left to right), recording each step.

    With precedence=False everything goes left to right: the classic mistake (2 + 2 * 6 = 24).
    """
    tokens = expression.split()
    if len(tokens) % 2 == 0 or any(op not in _OPERATORS for op in tokens[1::2]):
        raise ValueError(f"not an arithmetic expression of the task: {expression!r}")
    values = [int(token) for token in tokens[0::2]]
    operators = tokens[1::2]
    steps: list[str] = []
    for wanted in ("*", "+-") if precedence else ("*+-",):
        index = 0
        while index < len(operators):
            operator = operators[index]
            if operator not in wanted:
                index += 1
                continue
            left, right = values[index], values[index + 1]
            result = _OPERATORS[operator](left, right)
            steps.append(f"{left} {operator} {right} = {result}")
            values[index : index + 2] = [result]
            del operators[index]
    return Problem(expression=expression, answer=values[0], steps=tuple(steps))


def is_correct(completion: str, answer: int | str) -> bool:
    return answers_match(extract_answer(completion), str(answer))


def problems(level: int, split: Split, count: int | None = None, *, seed: int = 0) -> list[Problem]:
    """`count` distinct problems of `level` in `split` (all of them for level 1 when count is None)."""
    if level not in LEVELS:
        raise ValueError(f"unknown arithmetic level {level}; choose one of {LEVELS}")
    if level == 1:
        every = [solve(f"{a} + {b}") for a in range(10) for b in range(10)]
        chosen = [problem for problem in every if problem.split == split]
        random.Random(seed).shuffle(chosen)
        return chosen if count is None else chosen[:count]
    if count is None:
        raise ValueError(f"level {level} has too many problems to list; pass a count")
    rng = random.Random(f"{level}-{split}-{seed}")
    operations, largest = (2, 9) if level == 2 else (3, 20)
    found: dict[str, Problem] = {}
    for _ in range(count * 50):
        if len(found) == count:
            break
        numbers = [rng.randint(1, largest) for _ in range(operations + 1)]
        operators = [rng.choice("+-*") for _ in range(operations)]
        expression = " ".join(
            token for pair in zip(map(str, numbers), [*operators, ""], strict=True) for token in pair if token
        )
        if split_of(expression) == split:
            found.setdefault(expression, solve(expression))
    if len(found) < count:
        raise ValueError(f"could not find {count} distinct level-{level} {split} problems")
    return list(found.values())


# The most level-3 training problems a run may ask for: 4.3 million expressions exist, and 100,000 take a second to
# generate and a few tens of MB in the worker's memory.
LEVEL_3_TRAIN_MAX = 100_000


@functools.cache
def train_problem_limit(level: int) -> int:
    """The most training problems of `level` a run may ask for: all there are of levels 1 (85) and 2 (5,225),
    which `problems` finds, and LEVEL_3_TRAIN_MAX of level 3."""
    if level == 1:
        return len(problems(1, "train"))
    if level == 2:
        digits = range(1, 10)
        return sum(split_of(f"{a} {x} {b} {y} {c}") == "train"
                   for a in digits for x in "+-*" for b in digits for y in "+-*" for c in digits)
    return LEVEL_3_TRAIN_MAX


def sft_rows(level: int, split: Split, count: int | None = None, *, seed: int = 0) -> list[dict]:
    """{prompt, completion, answer} rows; `answer` lets the SFT loop measure eval/accuracy."""
    return [
        {"prompt": p.prompt, "completion": p.completion, "answer": str(p.answer)}
        for p in problems(level, split, count, seed=seed)
    ]


Mistake = Literal["final_answer", "last_step", "precedence"]
MISTAKES: tuple[Mistake, ...] = ("final_answer", "last_step", "precedence")


def wrong_completion(problem: Problem, rng: random.Random, mistakes: tuple[Mistake, ...] = MISTAKES) -> str:
    """A plausible wrong completion, by one of `mistakes`: a final answer that contradicts correct steps
    ("final_answer"), a slip in the last step carried into the answer ("last_step"), or working left to
    right, ignoring that * goes first ("precedence"; where that gives the right answer, "final_answer")."""
    wrong = problem.answer + rng.choice([-3, -2, -1, 1, 2, 3])
    mistake = rng.choice(mistakes)
    if mistake == "precedence":
        naive = solve(problem.expression, precedence=False)
        if naive.answer != problem.answer:
            return naive.completion
        mistake = "final_answer"
    if mistake == "final_answer":
        return format_completion(problem.steps, wrong)
    last = problem.steps[-1].rsplit("=", 1)[0]
    return format_completion((*problem.steps[:-1], f"{last}= {wrong}"), wrong)


def preference_rows(
    level: int,
    split: Split,
    count: int | None = None,
    *,
    pairs_per_problem: int = 1,
    mistakes: tuple[Mistake, ...] = MISTAKES,
    seed: int = 0,
) -> list[dict]:
    """{prompt, chosen, rejected, answer} rows: chosen is the correct completion, rejected a wrong one."""
    rng = random.Random(f"pairs-{level}-{split}-{seed}")
    rows = []
    for problem in problems(level, split, count, seed=seed):
        for _ in range(pairs_per_problem):
            rows.append(
                {
                    "prompt": problem.prompt,
                    "chosen": problem.completion,
                    "rejected": wrong_completion(problem, rng, mistakes),
                    "answer": str(problem.answer),
                }
            )
    return rows


def thumbs_rows(
    level: int, split: Split, count: int | None = None, *, mistakes: tuple[Mistake, ...] = MISTAKES, seed: int = 0
) -> list[dict]:
    """KTO's unpaired {prompt, completion, label, answer} rows, two a problem: the correct completion and a wrong one
    (wrong_completion), each labelled by the task's checker (is_correct): thumbs up for the first, down for the
    second, so desirable and undesirable rows are balanced (KTO's default weights assume it)."""
    rng = random.Random(f"thumbs-{level}-{split}-{seed}")
    rows = []
    for problem in problems(level, split, count, seed=seed):
        for completion in (problem.completion, wrong_completion(problem, rng, mistakes)):
            rows.append({"prompt": problem.prompt, "completion": completion,
                         "label": is_correct(completion, problem.answer), "answer": str(problem.answer)})
    return rows


def sampled_thumbs_rows(
    model_dir: str | Path,
    level: int,
    split: Split,
    count: int | None = None,
    *,
    samples: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 24,
    seed: int = 0,
) -> list[dict]:
    """KTO rows from a model's own answers: `samples` completions sampled per problem, each labelled by the task's
    checker (thumbs up when its final answer is right), as thumbs on a chat product's answers are. Empty completions
    are left out (nothing to learn from them)."""
    # imported here: listing the task's data sets (the web process) must not load torch
    import torch

    from trainer.decoding.generation import HFGenerationBackend, SamplingParams
    from trainer.modeling.models import load_reference, load_tokenizer

    torch.manual_seed(seed)
    chosen = problems(level, split, count, seed=seed)
    backend = HFGenerationBackend(load_reference(str(model_dir)), load_tokenizer(str(model_dir)))
    params = SamplingParams(group_size=samples, max_new_tokens=max_new_tokens, temperature=temperature)
    texts = backend.generate([problem.prompt for problem in chosen], params).texts
    return [
        {"prompt": problem.prompt, "completion": text, "label": is_correct(text, problem.answer),
         "answer": str(problem.answer)}
        for problem, text in zip((p for p in chosen for _ in range(samples)), texts, strict=True)
        if text.strip()
    ]


def rows_for_kind(kind: str, level: int, split: Split, count: int | None = None) -> list[dict]:
    """The rows run kind `kind` trains on (its registered row shape), from `count` problems of `level`."""
    shape = run_kind(kind).rows
    if shape == "pairs":
        return preference_rows(level, split, count)
    if shape == "unpaired":
        return thumbs_rows(level, split, count)
    if shape == "completions":
        return sft_rows(level, split, count)
    return [{"prompt": p.prompt, "answer": str(p.answer)} for p in problems(level, split, count)]


def corpus(*, seed: int = 0) -> list[str]:
    """Task text to train the tiny model's tokenizer on (every level, both splits: only the vocabulary)."""
    texts = []
    for level, count in ((1, None), (2, 400), (3, 400)):
        for split in ("train", "test"):
            for problem in problems(level, split, count if level > 1 else None, seed=seed):
                texts.append(problem.prompt + problem.completion)
    return texts


# SFT of the tiny model on all level-1 training problems that reaches about 0.87 held-out exact match in
# 300 steps (tests/trainer/test_sft_learns.py); the tests' and the demo's starting point for RL.
TINY_MODEL_SFT_SETTINGS: dict[str, object] = {
    "lr": 3e-3,
    "lr_scheduler": "cosine",
    "warmup_steps": 10,
    "max_steps": 300,
    "batch_size": 32,
    "max_length": 64,
    "max_prompt_length": 24,
    "eval_max_new_tokens": 24,
}


def build_tiny_model(
    directory: str | Path,
    *,
    vocab_size: int = 384,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
) -> Path:
    """A small random Llama and a byte-level BPE tokenizer trained on the task, saved with save_pretrained."""
    # imported here so that importing the task (web process) does not load torch
    from trainer.modeling.models import build_tiny_causal_lm

    return build_tiny_causal_lm(
        directory,
        corpus(seed=seed),
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        layers=layers,
        heads=heads,
        seed=seed,
    )
