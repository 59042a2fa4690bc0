"""Memory of a LoRA GRPO run (beta > 0, so it needs reference log-probs): the reference as a second loaded copy
(what Preflab did before; forced here by naming a copy of the model directory as `reference_model`) against the
policy with its adapters disabled (what it does now), in fp32 and in bf16-mixed.

    python bench/bench_lora_memory.py --model DIR [--threads 2]

Each variant runs one GRPO step in a fresh process and reports the bytes of the distinct parameter storages of
every model alive when the step is logged, and the process's peak resident memory (ru_maxrss). DIR defaults to
a freshly built tiny model; for SmolLM2: `python -m trainer build-smollm2 DIR` first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VARIANTS = {
    "second copy, fp32": {"separate_reference": True, "precision": "fp32"},
    "adapters off, fp32": {"separate_reference": False, "precision": "fp32"},
    "adapters off, bf16-mixed": {"separate_reference": False, "precision": "bf16-mixed"},
}
PROMPTS = [
    "What is the capital of France?",
    "Name three primary colors.",
]


def run_variant(model_dir: str, work: Path, separate_reference: bool, precision: str, threads: int) -> dict:
    """One LoRA GRPO step in this process; the figures as a dict."""
    import torch
    from transformers.utils import logging as transformers_logging

    from trainer.algorithms.grpo import train
    from trainer.kinds import config_from_dict
    from trainer.modeling.models import live_model_parameter_bytes
    from trainer.sink import MemorySink

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    torch.set_num_threads(threads)
    reference = None
    if separate_reference:
        reference = str(shutil.copytree(model_dir, work / "reference-copy", dirs_exist_ok=True))
    parameter_bytes: list[int] = []

    class MeasuringSink(MemorySink):
        def log(self, step, metrics, *, tokens_seen):
            super().log(step, metrics, tokens_seen=tokens_seen)
            parameter_bytes.append(live_model_parameter_bytes())

    config = config_from_dict(
        "grpo",
        {"model": model_dir, "output_dir": str(work / "run"), "max_steps": 1, "batch_size": 2, "group_size": 2,
         "max_new_tokens": 8, "max_length": 128, "beta": 0.04, "use_lora": True, "rewards": {"length_penalty": 1.0},
         "precision": precision, "reference_model": reference, "checkpoint_every": 0, "sample_every": 0},
    )
    rows = [{"prompt": prompt} for prompt in PROMPTS]
    train(config, rows, MeasuringSink())
    return {"parameter_bytes": parameter_bytes[0], "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model directory (default: a fresh tiny model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant is not None:
        print(json.dumps(run_variant(args.model, Path(args.work), threads=args.threads, **VARIANTS[args.variant])))
        return
    root = Path(tempfile.mkdtemp(prefix="preflab-lora-memory-"))
    model_dir = args.model
    if model_dir is None:
        from trainer.builtin_datasets import arithmetic

        model_dir = str(arithmetic.build_tiny_model(root / "model"))
    print(f"LoRA GRPO step (beta 0.04) on {model_dir}, {args.threads} threads, one fresh process per variant")
    print(f"{'variant':<28} {'parameter MB':>13} {'peak RSS MB':>12}")
    for name in VARIANTS:
        work = root / name.replace(" ", "").replace(",", "-")
        work.mkdir()
        output = subprocess.run(
            [sys.executable, __file__, "--model", model_dir, "--threads", str(args.threads), "--variant", name,
             "--work", str(work)],
            check=True, capture_output=True, text=True,
        ).stdout
        figures = json.loads(output.strip().splitlines()[-1])
        print(f"{name:<28} {figures['parameter_bytes'] / 1e6:>13.1f} {figures['peak_rss_bytes'] / 1e6:>12.1f}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
