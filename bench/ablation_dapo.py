"""Held-out accuracy of plain GRPO and of each DAPO option added in turn, in the style of the DAPO paper's
ablation table (there: AIME avg@32; here: level-1 arithmetic held-out split, avg@32).

    python bench/ablation_dapo.py [--steps 150 --lr 8e-4 --threads 1 --start SFT_CHECKPOINT]

Every row starts from the same SFT checkpoint (tiny Llama, level-1 arithmetic), uses the same seed, prompts,
steps and learning rate, and differs only in the options named. avg@k: exact-answer accuracy over k (default 32)
completions sampled at the training temperature for each held-out prompt; greedy: one greedy completion each.
Rows are cumulative, as in the paper: each adds one option to the row above.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from trainer.algorithms.evaluation import generation_accuracy, sampled_accuracy
from trainer.algorithms.grpo import train as train_grpo
from trainer.algorithms.sft import train as train_sft
from trainer.builtin_datasets import arithmetic
from trainer.config import GRPOConfig, SFTConfig
from trainer.modeling.models import load_policy, load_tokenizer
from trainer.sink import MemorySink

MAX_NEW_TOKENS, OVERLONG_BUFFER = 28, 6
ROWS: list[tuple[str, dict]] = [
    ("GRPO (beta 0.04, eps 0.2, sequence-mean)", {}),
    ("+ overlong filtering", {"overlong_filtering": True}),
    ("+ clip-higher (eps_high 0.28)", {"epsilon_high": 0.28}),
    ("+ soft overlong punishment", {"rewards": {"answer_match": 1.0, "soft_overlong": 1.0}}),
    ("+ token-level loss", {"loss_aggregation": "token-mean"}),
    ("+ dynamic sampling", {"dynamic_sampling": True}),
    ("= DAPO preset (all of the above, beta 0)", {"beta": 0.0}),
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150, help="GRPO steps per row")
    parser.add_argument("--lr", type=float, default=8e-4)
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--start", help="an SFT checkpoint to start from instead of training one")
    parser.add_argument("--samples", type=int, default=32, help="k of avg@k")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def sft_checkpoint(root: Path, steps: int) -> str:
    model_dir = arithmetic.build_tiny_model(root / "model")
    config = SFTConfig(
        **{**arithmetic.TINY_MODEL_SFT_SETTINGS, "max_steps": steps}, model=str(model_dir), output_dir=str(root / "sft")
    )
    return train_sft(config, arithmetic.sft_rows(1, "train"), MemorySink()).checkpoint


def held_out(checkpoint: str, rows: list[dict], *, samples: int, temperature: float) -> tuple[float, float]:
    model, tokenizer = load_policy(checkpoint, device=torch.device("cpu")), load_tokenizer(checkpoint)
    torch.manual_seed(1234)
    average = sampled_accuracy(
        model, tokenizer, rows, samples_per_prompt=samples, temperature=temperature, max_new_tokens=MAX_NEW_TOKENS
    )
    return average, generation_accuracy(model, tokenizer, rows, max_new_tokens=MAX_NEW_TOKENS)


def main() -> None:
    args = parse_args()
    root = Path(tempfile.mkdtemp(prefix="preflab-ablation-"))
    start = args.start or sft_checkpoint(root, args.sft_steps)
    train_rows, test_rows = arithmetic.sft_rows(1, "train"), arithmetic.sft_rows(1, "test")
    base = GRPOConfig(
        model=start, output_dir="", max_steps=args.steps, lr=args.lr, warmup_steps=5, batch_size=16, group_size=8,
        max_new_tokens=MAX_NEW_TOKENS, overlong_buffer=OVERLONG_BUFFER, max_length=64, max_prompt_length=32,
    )
    results = [("SFT start", *held_out(start, test_rows, samples=args.samples, temperature=base.temperature), 0.0)]
    options: dict = {}
    for index, (label, added) in enumerate(ROWS):
        options.update(added)
        config = GRPOConfig(**{**vars(base), **options, "output_dir": str(root / f"row-{index}")})
        started = time.perf_counter()
        result = train_grpo(config, train_rows, MemorySink())
        seconds = time.perf_counter() - started
        results.append((label, *held_out(result.checkpoint, test_rows, samples=args.samples, temperature=1.0), seconds))

    print(f"\nDAPO ablation: level-1 arithmetic, {len(test_rows)} held-out prompts, {args.steps} steps x 16 prompts"
          f" x G=8, lr {args.lr}, max_new_tokens {MAX_NEW_TOKENS} (overlong buffer {OVERLONG_BUFFER})")
    print(f"| {'run':44} | held-out avg@{args.samples:<3}| greedy | train s |")
    print(f"|{'-' * 46}|{'-' * 17}|{'-' * 8}|{'-' * 9}|")
    for label, average, greedy, seconds in results:
        print(f"| {label:44} | {100 * average:15.1f} | {100 * greedy:6.1f} | {seconds:7.0f} |")


if __name__ == "__main__":
    main()
