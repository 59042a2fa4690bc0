"""Group sampling: our HF backend (one prefill per prompt, cache repeated G times, own decode loop with
sampling log-probs) against transformers' generate on G copies of each prompt (what a plain trainer does).

    python bench/bench_generation.py [--prompts 2 --group-size 8 --new-tokens 16 --repeats 20]

Both sample at temperature 1 with no top-k / top-p and run exactly --new-tokens decode steps (EOS is
suppressed on both sides so the work is equal); generate also returns the scores it would need for
log-probs (output_scores), as a trainer needs them.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from trainer.builtin_datasets import arithmetic
from trainer.decoding.generation import HFGenerationBackend, SamplingParams
from trainer.modeling.models import load_policy, load_tokenizer


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def median_seconds(function, repeats: int) -> float:
    function()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    args = parse_args()
    model_dir = arithmetic.build_tiny_model(
        Path(tempfile.mkdtemp(prefix="preflab-bench-gen-")) / "model", hidden_size=args.hidden_size, layers=args.layers
    )
    model, tokenizer = load_policy(str(model_dir), device=torch.device("cpu")), load_tokenizer(str(model_dir))
    model.eval()
    eos = tokenizer.eos_token_id
    prompts = [row["prompt"] for row in arithmetic.sft_rows(2, "train", args.prompts)]
    backend = HFGenerationBackend(model, tokenizer)
    params = SamplingParams(group_size=args.group_size, max_new_tokens=args.new_tokens, temperature=1.0)

    no_eos = model.get_output_embeddings()
    original_bias = no_eos.bias
    # A -inf bias on EOS keeps every sequence running to max_new_tokens on both sides.
    no_eos.bias = torch.nn.Parameter(torch.zeros(no_eos.out_features), requires_grad=False)
    no_eos.bias.data[eos] = float("-inf")

    copies = [prompt for prompt in prompts for _ in range(args.group_size)]
    encoded = tokenizer(copies, padding=True, padding_side="left", return_tensors="pt")

    def plain_generate():
        with torch.no_grad():
            return model.generate(
                **encoded, do_sample=True, temperature=1.0, top_k=None, top_p=None, max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens, pad_token_id=tokenizer.pad_token_id, output_scores=True,
                return_dict_in_generate=True,
            )

    ours = median_seconds(lambda: backend.generate(prompts, params), args.repeats)
    plain = median_seconds(plain_generate, args.repeats)
    no_eos.bias = original_bias
    rows = args.prompts * args.group_size
    print(f"\ngroup sampling: {args.prompts} prompts x G={args.group_size}, {args.new_tokens} new tokens, tiny Llama "
          f"hidden {args.hidden_size} x {args.layers}, CPU, {args.threads} thread(s), median of {args.repeats}")
    print(f"{'':40} {'s/call':>8} {'tokens/s':>9} {'speed':>6}")
    for label, seconds in (("transformers generate on G copies", plain), ("ours (HFGenerationBackend)", ours)):
        print(f"{label:40} {seconds:8.4f} {rows * args.new_tokens / seconds:9.0f} {plain / seconds:5.2f}x")


if __name__ == "__main__":
    main()
