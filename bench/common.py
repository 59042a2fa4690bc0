"""Shared pieces of the trainer benchmarks: the tiny model and data, step timing for ours and TRL's, the table.

Fairness rules: the same model directory, rows, batch size, step count, max length and learning rate on both
sides; step 1 (warm-up) is excluded; TRL's dataset preprocessing and our tokenisation happen before the
timed window (both time only from the end of step 1 to the end of the last step).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from transformers import TrainerCallback
from transformers.utils import logging as transformers_logging

from trainer.builtin_datasets import arithmetic
from trainer.sink import MemorySink

transformers_logging.set_verbosity_error()
transformers_logging.disable_progress_bar()


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=21, help="optimizer steps per side (step 1 is warm-up)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--level", type=int, default=2, choices=arithmetic.LEVELS)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def scratch_dir(prefix: str) -> str:
    """A temporary directory removed when the bench exits (a real model's checkpoints take gigabytes)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def bench_workspace(args: argparse.Namespace) -> tuple[Path, list[dict]]:
    """A fresh tiny model and exactly steps * batch_size preference rows (every pair is seen once)."""
    root = Path(scratch_dir("preflab-bench-"))
    model_dir = arithmetic.build_tiny_model(root / "model", hidden_size=args.hidden_size, layers=args.layers)
    rows = arithmetic.preference_rows(args.level, "train", args.steps * args.batch_size)
    return model_dir, [{key: row[key] for key in ("prompt", "chosen", "rejected")} for row in rows]


class TimingSink(MemorySink):
    """Remembers when each step was logged (loops log after the optimizer step)."""

    def __init__(self) -> None:
        super().__init__()
        self.logged_at: dict[int, float] = {}

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        self.logged_at[step] = time.perf_counter()
        super().log(step, metrics, tokens_seen=tokens_seen)

    def timed_seconds(self) -> float:
        return self.logged_at[max(self.logged_at)] - self.logged_at[1]


class StepTimes(TrainerCallback):
    """End time of each TRL optimizer step."""

    def __init__(self) -> None:
        self.ended_at: dict[int, float] = {}

    def on_step_end(self, args, state, control, **kwargs):
        self.ended_at[state.global_step] = time.perf_counter()

    def timed_seconds(self) -> float:
        return self.ended_at[max(self.ended_at)] - self.ended_at[1]


def timed_trl_training(trainer_class: type, model_dir: Path, rows: list[dict], trl_args, **trainer_fields) -> float:
    """Train a TRL trainer on `rows` from the model directory; seconds from the end of step 1 to the last step."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    timer = StepTimes()
    trainer = trainer_class(
        model=str(model_dir),
        args=trl_args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[timer],
        **trainer_fields,
    )
    trainer.train()
    return timer.timed_seconds()


# How every TRL run of the benches goes: on the CPU, quiet, nothing saved, seeded.
TRL_CPU_RUN = {"use_cpu": True, "report_to": "none", "save_strategy": "no", "disable_tqdm": True, "seed": 0}


def trl_common_args(args: argparse.Namespace, output_dir: Path, lr: float) -> dict:
    return {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": args.batch_size,
        "gradient_accumulation_steps": 1,
        "max_steps": args.steps,
        "learning_rate": lr,
        "lr_scheduler_type": "linear",
        "warmup_steps": 0,
        "max_grad_norm": 1.0,
        "max_length": args.max_length,
        "bf16": False,
        "dataloader_num_workers": 0,
        **TRL_CPU_RUN,
    }


def our_common_fields(args: argparse.Namespace, model_dir: Path, output_dir: Path, lr: float) -> dict:
    return {
        "model": str(model_dir),
        "output_dir": str(output_dir),
        "batch_size": args.batch_size,
        "grad_accum_steps": 1,
        "max_steps": args.steps,
        "lr": lr,
        "lr_scheduler": "linear",
        "max_grad_norm": 1.0,
        "max_length": args.max_length,
        "max_prompt_length": args.max_length // 2,
    }


def print_table(title: str, pairs: int, rows: list[tuple[str, float]], baseline: float, *, unit: str = "pairs") -> None:
    """rows: (label, seconds for `pairs` pairs, or other `unit`s); ratio is throughput relative to `baseline` seconds."""
    print(f"\n{title}: {pairs} {unit} over the timed steps")
    print(f"{'':32} {'seconds':>9} {unit + '/s':>9} {'vs TRL':>7}")
    for label, seconds in rows:
        print(f"{label:32} {seconds:9.3f} {pairs / seconds:9.1f} {baseline / seconds:6.2f}x")
