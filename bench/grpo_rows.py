"""The real-model GRPO bench (bench_real_model.py's, ours only) as rows to compare across commits.

    PYTHONPATH=$PWD:$PWD/clients/python/src .venv/bin/python bench/grpo_rows.py --label a237298 [--steps 3]

SmolLM2-135M-Instruct, 2 chat prompts x G=8 x 64 new tokens, seed 0 (the config's default), float32 unless told,
2 threads. Writes bench/baselines/grpo-<label>.json: every logged metric of every step rounded to 6 digits
(`metrics`: the same code gives the same numbers), and the timing (`timing`: per-step `time/*` and `throughput/*`
values and the median seconds a step over steps 2.., for information only; compare_rows.py compares it as a ratio).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import bench_real_model
import torch

TIMING_PREFIXES = ("time/", "throughput/")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True, help="names the output: bench/baselines/grpo-<label>.json")
    parser.add_argument("--out", type=Path, help="write here instead")
    parser.add_argument("--model-dir", type=Path, default=Path("var/bench/smollm2-135m-instruct"))
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps (step 1 is warm-up for the timing)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32")
    return parser.parse_args()


def is_timing(name: str) -> bool:
    return name.startswith(TIMING_PREFIXES)


def rows_of(metrics: dict[int, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {str(step): {name: round(float(value), 6) for name, value in sorted(values.items()) if not is_timing(name)}
            for step, values in sorted(metrics.items())}


def timing_of(metrics: dict[int, dict[str, float]], seconds_per_step: float) -> dict[str, object]:
    per_step = {str(step): {name: round(float(value), 4) for name, value in sorted(values.items()) if is_timing(name)}
                for step, values in sorted(metrics.items())}
    timed = [values["time/step_s"] for step, values in metrics.items() if step > 1 and "time/step_s" in values]
    return {"seconds_per_step_median": round(statistics.median(timed), 4) if timed else None,
            "seconds_per_step_logged": round(seconds_per_step, 4), "per_step": per_step}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    started = time.monotonic()
    model_dir = bench_real_model.model_directory(args.model_dir)
    tokenizer = bench_real_model.AutoTokenizer.from_pretrained(model_dir)
    prompt_tokens = max(
        len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
        for prompt in bench_real_model.chat_prompts()
    )
    print(f"model ready in {time.monotonic() - started:.0f} s; GRPO, {args.steps} steps, {args.precision}", flush=True)
    bench_args = argparse.Namespace(grpo_steps=args.steps, precision=args.precision)
    sink = bench_real_model.run_our_grpo(bench_args, model_dir, prompt_tokens)
    out = args.out or Path("bench/baselines") / f"grpo-{args.label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "label": args.label,
        "settings": {"steps": args.steps, "threads": args.threads, "precision": args.precision,
                     "prompt_tokens": prompt_tokens, "group_size": bench_real_model.GROUP_SIZE,
                     "new_tokens": bench_real_model.NEW_TOKENS, "seed": 0},
        "metrics": rows_of(sink.metrics),
        "samples": [{**row, "rewards": {k: round(v, 6) for k, v in row["rewards"].items()},
                     "advantage": None if row["advantage"] is None else round(row["advantage"], 6)}
                    for row in sink.samples],
        "timing": timing_of(sink.metrics, sink.timed_seconds() / max(1, args.steps - 1)),
    }
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} in {time.monotonic() - started:.0f} s; median step "
          f"{result['timing']['seconds_per_step_median']} s", flush=True)


if __name__ == "__main__":
    main()
