"""GRPO step time: trainer.algorithms.grpo against TRL's GRPOTrainer with the same settings, and where our time goes.

    python bench/bench_grpo.py [--steps 11 --prompts 2 --group-size 8 --new-tokens 16 --beta 0.04 --few-shot 0]

Both sides: the same tiny model directory (hidden 64 x 2 layers unless told), the same level-1 arithmetic
prompts, G completions per prompt sampled at temperature 1 with no top-k / top-p, the same completion
length cap, loss_type "grpo" (sequence mean), one iteration per generation, the exact-answer reward.
TRL runs twice: with its own default gradient checkpointing (TRL's GRPOConfig turns it on) and with it off
like ours, so that the second row compares the implementations alone; with --trl-bf16 a third time with
bf16=True, TRL's real default (shown, not counted: ours runs float32 on CPU, so that row measures precision,
not implementation; how fast bf16 runs depends on whether the CPU has bf16 units). Step 1 is warm-up and excluded;
times are seconds per optimizer step. With --few-shot K every prompt starts with K solved examples, as
few-shot and system prompts make real RL prompts far longer than the completions.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from common import TRL_CPU_RUN, TimingSink, scratch_dir, timed_trl_training
from transformers import AutoTokenizer

from trainer.algorithms.grpo import train
from trainer.builtin_datasets import arithmetic
from trainer.config import GRPOConfig
from trainer.formats.answers import answers_match, extract_answer

LR = 1e-5


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=11, help="optimizer steps per side (step 1 is warm-up)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--few-shot", type=int, default=0, help="solved examples before each question (longer prompts)")
    parser.add_argument("--skip-trl", action="store_true", help="time only ours")
    parser.add_argument(
        "--trl-bf16", action="store_true",
        help="also time TRL with bf16=True, its real default (not counted: ours runs float32 on CPU)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def few_shot_rows(rows: list[dict], shots: int) -> list[dict]:
    """The rows' questions behind `shots` solved examples from the held-out split (none of them a question here)."""
    examples = "".join(f"{row['prompt']}{row['completion']}\n" for row in arithmetic.sft_rows(1, "test")[:shots])
    return [{"prompt": examples + row["prompt"], "answer": row["answer"]} for row in rows]


def run_ours(args: argparse.Namespace, model_dir: Path, rows: list[dict], prompt_tokens: int) -> TimingSink:
    config = GRPOConfig(
        model=str(model_dir),
        output_dir=scratch_dir("ours-grpo-"),
        max_steps=args.steps,
        batch_size=args.prompts,
        group_size=args.group_size,
        max_new_tokens=args.new_tokens,
        max_length=prompt_tokens + args.new_tokens,
        max_prompt_length=prompt_tokens,
        beta=args.beta,
        lr=LR,
        rewards={"answer_match": 1.0},
    )
    sink = TimingSink()
    train(config, rows, sink)
    return sink


def exact_answer_reward(prompts, completions, answer, **_) -> list[float]:
    return [float(answers_match(extract_answer(text), str(truth))) for text, truth in zip(completions, answer, strict=True)]


def run_trl(
    args: argparse.Namespace, model_dir: Path, rows: list[dict], *, gradient_checkpointing: bool, bf16: bool = False
) -> float:
    from trl import GRPOConfig as TRLGRPOConfig
    from trl import GRPOTrainer

    trl_args = TRLGRPOConfig(
        output_dir=scratch_dir("trl-grpo-"),
        per_device_train_batch_size=args.prompts * args.group_size,
        num_generations=args.group_size,
        max_completion_length=args.new_tokens,
        gradient_accumulation_steps=1,
        max_steps=args.steps,
        learning_rate=LR,
        beta=args.beta,
        loss_type="grpo",
        temperature=1.0,
        gradient_checkpointing=gradient_checkpointing,
        bf16=bf16,
        logging_steps=1,
        **TRL_CPU_RUN,
    )
    seconds = timed_trl_training(GRPOTrainer, model_dir, rows, trl_args, reward_funcs=exact_answer_reward)
    return seconds / (args.steps - 1)


def main() -> None:
    args = parse_args()
    root = Path(scratch_dir("preflab-bench-grpo-"))
    model_dir = arithmetic.build_tiny_model(root / "model", hidden_size=args.hidden_size, layers=args.layers)
    rows = few_shot_rows(arithmetic.sft_rows(1, "train"), args.few_shot)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lengths = [len(tokenizer(row["prompt"])["input_ids"]) for row in rows]
    prompt_tokens = max(64, max(lengths))

    ours = run_ours(args, model_dir, rows, prompt_tokens)
    ours_step = ours.timed_seconds() / (args.steps - 1)
    timed = [ours.metrics[step] for step in range(2, args.steps + 1)]
    print(
        f"\nGRPO step: {args.prompts} prompts x G={args.group_size}, {args.new_tokens} new tokens, beta {args.beta}, "
        f"tiny Llama hidden {args.hidden_size} x {args.layers} layers, CPU, {args.threads} thread(s), "
        f"steps 2..{args.steps}; prompts {min(lengths)}-{max(lengths)} tokens ({args.few_shot} solved examples each)"
    )
    print(f"{'':34} {'s/step':>8} {'speed vs TRL defaults':>22}")
    if args.skip_trl:
        print(f"{'ours (trainer.algorithms.grpo)':34} {ours_step:8.3f}")
    else:
        trl_default = run_trl(args, model_dir, rows, gradient_checkpointing=True)
        trl_plain = run_trl(args, model_dir, rows, gradient_checkpointing=False)
        print(f"{'TRL GRPOTrainer (its defaults)':34} {trl_default:8.3f} {1.0:6.2f}x")
        print(f"{'TRL GRPOTrainer (no grad. ckpt.)':34} {trl_plain:8.3f} {trl_default / trl_plain:6.2f}x")
        print(f"{'ours (trainer.algorithms.grpo)':34} {ours_step:8.3f} {trl_default / ours_step:6.2f}x")
        print(f"ours vs TRL without gradient checkpointing: {trl_plain / ours_step:.2f}x")
        if args.trl_bf16:
            trl_bf16 = run_trl(args, model_dir, rows, gradient_checkpointing=True, bf16=True)
            print(f"TRL with bf16=True as well (its real default): {trl_bf16:.3f} s/step, "
                  f"{trl_bf16 / ours_step:.2f}x ours -- a precision difference, not counted")
    print("\nwhere our step time goes (median over the timed steps):")
    for name in ("time/generation_s", "time/scoring_s", "time/backward_s", "time/step_s"):
        print(f"  {name:22} {statistics.median(m[name] for m in timed):8.4f} s")


if __name__ == "__main__":
    main()
