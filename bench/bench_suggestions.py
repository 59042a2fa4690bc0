"""Suggestions job throughput on SmolLM2-135M-Instruct: items per second of the job's model work, for both sources,
against a plain Hugging Face loop (one item at a time, `model(**inputs)`) doing the same scoring.

    python bench/bench_suggestions.py [--items 16 --response-tokens 100 --rounds 2 --threads 2]

- Reward model: SmolLM2 with a one-label sequence-classification head (an untrained head: the speed is the same),
  saved as a reward-model run saves its checkpoint. Ours: trainer.algorithms.rollout.RewardModelScorer on the
  job's batches (workers/suggesting.py: 8 items, their 16 responses in one forward pass) and the tiers with their
  confidence (trainer.suggestions.tiers_by_score). Peer: each response tokenised as text prompt + response + EOS and
  scored alone.
- Judge: the instruct model itself. Ours: trainer.judging.Judge on the job's batches (8 items, each pair in both
  orders, 8 questions per forward pass) and the verdicts (trainer.suggestions.pair_verdict). Peer: each question
  (the same text through the chat template) alone, P(A) from the last position's logits.
Items hold two responses of about `--response-tokens` tokens. Model loading is outside the timed window; one item
is run on each side first as warm-up. The two sides are timed in turn, `--rounds` times, and each side's best
round is kept, so a burst of other work on a shared machine does not fall on one side only.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from common import scratch_dir
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
from transformers.utils import logging as transformers_logging

from trainer.algorithms.rollout import RewardModelScorer
from trainer.judging import (
    COMPARE_WORDS,
    Comparison,
    Judge,
    answer_token_ids,
    comparison_question,
    question_ids,
)
from trainer.modeling.gguf_import import build_smollm2
from trainer.suggestions import pair_verdict, tiers_by_score

transformers_logging.set_verbosity_error()
transformers_logging.disable_progress_bar()

# the job's items per batch (workers/suggesting.py ITEMS_PER_BATCH)
ITEMS_PER_BATCH = 8
GUIDELINES = "Prefer the response that answers the question correctly and clearly; a short answer is fine."
WORDS = ("the", "model", "answers", "each", "question", "with", "a", "short", "clear", "sentence", "and", "then",
         "explains", "why", "it", "holds", "for", "small", "numbers", "too")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--response-tokens", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def make_items(count: int, response_tokens: int, tokenizer) -> list[tuple[str, str, str]]:
    """(prompt, first response, second response), the responses cut to `response_tokens` tokens."""
    items = []
    for index in range(count):
        texts = []
        for side in range(2):
            words = [WORDS[(index * 7 + side * 3 + position) % len(WORDS)] for position in range(response_tokens * 2)]
            ids = tokenizer(" ".join(words), add_special_tokens=False)["input_ids"][:response_tokens]
            texts.append(tokenizer.decode(ids))
        items.append((f"Question {index}: what is {index} + {index + 1}, and why?", texts[0], texts[1]))
    return items


def reward_checkpoint(smollm2: Path) -> Path:
    directory = Path(scratch_dir("bench-suggestions-rm-")) / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    model = AutoModelForSequenceClassification.from_pretrained(smollm2, num_labels=1,
                                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def batches(items: list, size: int = ITEMS_PER_BATCH):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def ours_reward_model(checkpoint: Path) -> Callable[[list], None]:
    scorer = RewardModelScorer(str(checkpoint))

    def work(items: list) -> None:
        for batch in batches(items):
            scores = scorer([p for p, _, _ in batch for _ in range(2)], [r for _, a, b in batch for r in (a, b)])
            for index in range(len(batch)):
                tiers_by_score({0: scores[2 * index], 1: scores[2 * index + 1]})
    return work


def peer_reward_model(checkpoint: Path) -> Callable[[list], None]:
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()

    def work(items: list) -> None:
        with torch.no_grad():
            for prompt, first, second in items:
                for response in (first, second):
                    inputs = tokenizer(prompt + response + tokenizer.eos_token, return_tensors="pt")
                    model(**inputs).logits[0, 0].item()
    return work


def ours_judge(smollm2: Path) -> Callable[[list], None]:
    judge = Judge(str(smollm2))

    def work(items: list) -> None:
        for batch in batches(items):
            comparisons = [Comparison(p, a, b) for p, a, b in batch] + [Comparison(p, b, a) for p, a, b in batch]
            shown_first = judge.prefer_first(GUIDELINES, comparisons)
            for index in range(len(batch)):
                pair_verdict(shown_first[index], shown_first[len(batch) + index])
    return work


def peer_judge(smollm2: Path) -> Callable[[list], None]:
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    model = AutoModelForCausalLM.from_pretrained(smollm2).eval()
    letters = answer_token_ids(tokenizer, COMPARE_WORDS)

    def work(items: list) -> None:
        with torch.no_grad():
            for prompt, first, second in items:
                for shown in ((first, second), (second, first)):
                    ids = question_ids(tokenizer, comparison_question(GUIDELINES, Comparison(prompt, *shown)))
                    logits = model(input_ids=torch.tensor([ids])).logits[0, -1, letters]
                    torch.softmax(logits, dim=-1)[0].item()
    return work


def items_per_second(work: Callable[[list], None], items: list) -> float:
    start = time.perf_counter()
    work(items)
    return len(items) / (time.perf_counter() - start)


def best_rates(ours: Callable[[list], None], peer: Callable[[list], None], items: list, rounds: int) -> tuple[float, float]:
    """Each side's best items/s over `rounds` turns, the sides alternating (after one warm-up item each)."""
    ours(items[:1])
    peer(items[:1])
    our_rates, peer_rates = [], []
    for _ in range(rounds):
        peer_rates.append(items_per_second(peer, items))
        our_rates.append(items_per_second(ours, items))
    return max(our_rates), max(peer_rates)


def main() -> None:
    args = parse_args()
    smollm2, _ = build_smollm2(Path(scratch_dir("bench-suggestions-")) / "smollm2")
    items = make_items(args.items, args.response_tokens, AutoTokenizer.from_pretrained(smollm2))
    checkpoint = reward_checkpoint(smollm2)
    print(f"suggestions job on SmolLM2-135M-Instruct, CPU, {args.threads} threads, {args.items} items of 2 responses "
          f"of {args.response_tokens} tokens, best of {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    print(f"{'source':<14}{'ours (items/s)':>16}{'plain HF loop (items/s)':>26}{'ours / loop':>13}")
    for source, ours, peer in (("reward model", ours_reward_model(checkpoint), peer_reward_model(checkpoint)),
                               ("judge", ours_judge(smollm2), peer_judge(smollm2))):
        our_rate, peer_rate = best_rates(ours, peer, items, args.rounds)
        print(f"{source:<14}{our_rate:>16.2f}{peer_rate:>26.2f}{our_rate / peer_rate:>12.2f}×", flush=True)


if __name__ == "__main__":
    main()
