"""GPU check of the trainer, in one run on a GPU machine: every run kind there, generation, then ours against TRL.

Parts (each stands alone; --only / --skip pick them):
  smoke       every run kind through the CLI (`python -m trainer run`'s main, in this process) on a SmolLM2-135M-shaped
              model (random weights, SmolLM2's tokenizer and template), the default precision, 3 steps: sft,
              reward_model, dpo, dpo with LoRA, grpo, grpo under the dapo preset, ppo (with its critic), then grpo and
              ppo resumed from their step-3 checkpoints for 2 more steps: exit code, finite losses, the CUDA graph
              capture seconds per step (paid at the first steps only), peak GPU memory.
  sampling    a sampling job's generation (as workers/sampling.py: the frozen model, no seeds): the static decoding
              (a captured CUDA graph) against the eager decoder from the same seed; greedy must be identical.
  generation  the 1.7B shape, 8 chat prompts x G 8 x 128 new tokens, bf16-mixed, every completion full length:
              ours static (first call with its capture, then best of 3), ours eager, transformers generate with its
              dynamic cache and with cache_implementation="static" (its first call compiles); the decoding floor
              (bytes one step reads over the bandwidth measured here) and our fraction of it.
  suggestions a suggestion job's models (as workers/suggesting.py): the smoke's reward model (its step-3 checkpoint)
              scoring 32 responses, and the 135M shape as a judge comparing 16 pairs in both orders: seconds, finite
              scores, probabilities in [0, 1].
  grpo135, grpo1b  a GRPO step, ours against TRL's GRPOTrainer, bf16-mixed both sides (bench/bench_real_model.py's
              functions with the CPU-only TRL arguments removed): phases, peak memory and where it goes.
  pairs       reward model and DPO pairs/s, ours against TRL, on the 1.7B shape, batch 8, with peak memory.
  profile     torch.profiler's table of our DPO step on the 1.7B shape (OUT/profile-dpo.txt): where its time goes.
Random weights: timings only, no learning. Results go to OUT/results.jsonl and stdout as they come.

Usage (from the project's root): python3 CARRY/gpu_check.py CARRY OUT_DIR [--dry] [--only a,b] [--skip a,b]
CARRY holds smol/ (SmolLM2's config and tokenizer files) and .whl/; --dry: tiny shapes, on any machine (the CPU
here), to check that the script still fits the code.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

PARTS = ("smoke", "sampling", "suggestions", "generation", "grpo135", "grpo1b", "pairs", "profile")
ap = argparse.ArgumentParser()
ap.add_argument("carry", type=Path)
ap.add_argument("out", type=Path)
ap.add_argument("--dry", action="store_true")
ap.add_argument("--only", default="", help=f"comma list of parts to run: {','.join(PARTS)}")
ap.add_argument("--skip", default="", help="comma list of parts to skip")
a = ap.parse_args()
APP = Path.cwd().resolve()
SMOL = (a.carry / "smol").resolve()
OUT = a.out.resolve()
OUT.mkdir(parents=True, exist_ok=True)
WORK = Path(os.environ.get("GPU_CHECK_WORK", "/tmp/gpu-check" + ("-dry" if a.dry else "")))
WORK.mkdir(parents=True, exist_ok=True)
sys.path[:0] = [str(APP), str(APP / "bench")]
os.environ["PREFLAB_MODEL_ROOTS"] = str(WORK)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
T0 = time.time()
chosen = set(filter(None, a.only.split(","))) or set(PARTS)
chosen -= set(filter(None, a.skip.split(",")))


def record(part: str, **fields) -> None:
    row = {"part": part, "t": round(time.time() - T0, 1), **fields}
    print(json.dumps(row, default=str), flush=True)
    with open(OUT / "results.jsonl", "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

dev = "cuda" if torch.cuda.is_available() else "cpu"
CUDA = dev == "cuda"
record("env", torch=torch.__version__, transformers=transformers.__version__, device=dev,
       gpu=torch.cuda.get_device_name(0) if CUDA else None, bf16=bool(CUDA and torch.cuda.is_bf16_supported()))


def gib(value: float) -> float:
    return round(value / 2**30, 2)


def peak_and_reset() -> float | None:
    if not CUDA:
        return None
    peak = gib(torch.cuda.max_memory_allocated())
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return peak


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def build(name: str, **shape) -> Path:
    """A Llama of SmolLM2's config with `shape` overrides, random weights (seed 0), SmolLM2's tokenizer files."""
    target = WORK / name
    if (target / "config.json").exists():
        return target
    cfg = json.loads((SMOL / "config.json").read_text())
    for k in ("architectures", "model_type", "transformers_version", "_model_name_or_path", "dtype", "torch_dtype"):
        cfg.pop(k, None)
    cfg.update(shape)
    torch.manual_seed(0)
    started = time.time()
    with torch.device(dev):
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(target)
    del model
    for f in SMOL.iterdir():
        if f.name != "config.json":
            shutil.copy(f, target / f.name)
    record("build", model=name, seconds=round(time.time() - started, 1), params_m=round(params / 1e6, 1),
           shape=shape or "smollm2-135m")
    return target


SHAPE_1B7 = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                 num_key_value_heads=32, head_dim=64)
SHAPE_135: dict = {}
if a.dry:
    SHAPE_135 = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16)
    SHAPE_1B7 = dict(hidden_size=96, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, head_dim=24)


# --- smoke: every run kind through the CLI ------------------------------------------------------------------------
def smoke(model: Path) -> None:
    from trainer.cli import main as trainer_cli

    conv = lambda q: [{"role": "user", "content": q}]  # noqa: E731
    qa = [("What is 2 + 2?", "4"), ("Name a primary colour.", "Red."), ("What is 3 * 3?", "9"),
          ("Capital of France?", "Paris."), ("Say hi.", "Hi!"), ("What is 10 - 7?", "3"),
          ("Opposite of hot?", "Cold."), ("What is 6 / 2?", "3")]
    data = WORK / "data"
    data.mkdir(exist_ok=True)
    with open(data / "sft.jsonl", "w") as f:
        for q, ans in qa:
            f.write(json.dumps({"messages": conv(q) + [{"role": "assistant", "content": ans}]}) + "\n")
    with open(data / "pairs.jsonl", "w") as f:
        for q, ans in qa:
            f.write(json.dumps({"prompt": conv(q), "chosen": [{"role": "assistant", "content": ans}],
                                "rejected": [{"role": "assistant", "content": "I do not know."}]}) + "\n")
    with open(data / "prompts.jsonl", "w") as f:
        for q, ans in qa:
            f.write(json.dumps({"prompt": conv(q + " Answer as <answer>N</answer>."), "answer": ans}) + "\n")
    common = {"model": str(model), "max_steps": 3, "batch_size": 4, "max_length": 128, "max_prompt_length": 64}
    online = {"max_new_tokens": 32, "rewards": {"format_tags": 1.0, "length_penalty": 0.1}}
    runs = {  # label: (kind, its settings)
        "sft": ("sft", {"train_file": str(data / "sft.jsonl")}),
        "reward_model": ("reward_model", {"train_file": str(data / "pairs.jsonl")}),
        "dpo": ("dpo", {"train_file": str(data / "pairs.jsonl")}),
        "dpo_lora": ("dpo", {"train_file": str(data / "pairs.jsonl"), "use_lora": True}),
        "grpo": ("grpo", {"train_file": str(data / "prompts.jsonl"), "group_size": 4, **online}),
        "grpo_dapo": ("grpo", {"train_file": str(data / "prompts.jsonl"), "preset": "dapo", "group_size": 4,
                               "max_generation_rounds": 2, **online,
                               "rewards": {"format_tags": 1.0, "soft_overlong": 1.0}}),
        "ppo": ("ppo", {"train_file": str(data / "prompts.jsonl"), "ppo_epochs": 2, **online}),
    }
    only = os.environ.get("SMOKE_ONLY")
    for label, (kind, settings) in runs.items():
        if only and label not in only.split(","):
            continue
        run_dir = WORK / f"smoke-{label}"
        shutil.rmtree(run_dir, ignore_errors=True)
        cli_run(trainer_cli, label, {"kind": kind, **common, **settings, "output_dir": str(run_dir)}, run_dir)
    for label in ("grpo", "ppo"):  # resumed from the step-3 checkpoint for two more steps
        run_dir = WORK / f"smoke-{label}"
        checkpoint = run_dir / "checkpoints" / "step-3"
        if not checkpoint.is_dir():
            record("smoke", kind=f"{label}_resume", rc=None, error=f"no checkpoint {checkpoint}")
            continue
        kind, settings = runs[label]
        cli_run(trainer_cli, f"{label}_resume", {"kind": kind, **common, **settings, "max_steps": 5,
                                                 "resume_from": str(checkpoint), "output_dir": str(run_dir)},
                run_dir, first_step=4)


def cli_run(trainer_cli, label: str, config: dict, run_dir: Path, first_step: int = 1) -> None:
    path = WORK / f"{label}.json"
    path.write_text(json.dumps(config))
    started = time.time()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            rc = trainer_cli(["run", str(path)])
    except SystemExit as exit_:
        rc = exit_.code
    except Exception:  # the check goes on to the next kind
        rc, _ = "exception", captured.write(traceback.format_exc())
    seconds = round(time.time() - started, 1)
    rows = []
    metrics_file = run_dir / "metrics.jsonl"
    if metrics_file.exists():
        rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if int(r.get("step", 0)) >= first_step]
    values = [r.get("metrics", r) for r in rows]
    losses = [m.get("loss") for m in values if m.get("loss") is not None]
    tail = [ln for ln in captured.getvalue().splitlines() if ln.strip()][-6:]
    record("smoke", kind=label, rc=rc, seconds=seconds, steps=[int(r.get("step", 0)) for r in rows],
           finite=bool(losses) and all(math.isfinite(float(x)) for x in losses), loss=losses[-1] if losses else None,
           capture_s=[m.get("time/graph_capture_s") for m in values], peak_gib=peak_and_reset(),
           tail=None if rc == 0 else tail)
    (OUT / "smoke.log").open("a").write(f"== {label} rc={rc}\n{captured.getvalue()[-6000:]}\n")


# --- a sampling job's generation --------------------------------------------------------------------------------
def sampling(model_dir: Path) -> None:
    from trainer.decoding.generation import HFGenerationBackend, SamplingParams
    from trainer.modeling.models import load_reference, load_tokenizer

    tokenizer = load_tokenizer(str(model_dir))
    model = load_reference(str(model_dir))  # as workers/sampling.py: frozen, bf16 on a GPU that has it
    prompts = [[{"role": "user", "content": f"Tell me one fact about the number {n}."}] for n in range(16)]
    for label, params in (("sampled", SamplingParams(group_size=2, max_new_tokens=64, temperature=1.0, top_p=0.95)),
                          ("greedy", SamplingParams(group_size=1, max_new_tokens=64, temperature=0))):
        out = {}
        for decoding in ("eager", "static", "static"):  # the second static call replays the captured graph
            backend = HFGenerationBackend(model, tokenizer, decoding=decoding)
            torch.manual_seed(0)
            sync()
            started = time.perf_counter()
            samples = backend.generate(prompts, params)
            sync()
            out.setdefault(decoding, []).append((samples, time.perf_counter() - started, backend.setup_seconds))
        eager, statics = out["eager"][0][0], out["static"]
        same = [torch.equal(s.completion_ids, eager.completion_ids) for s, _, _ in statics]
        rows_same = (statics[-1][0].completion_ids == eager.completion_ids).all(dim=1).float().mean().item() \
            if statics[-1][0].completion_ids.shape == eager.completion_ids.shape else 0.0
        record("sampling", params=label, model=model_dir.name, identical=same, rows_identical=round(rows_same, 3),
               eager_s=round(out["eager"][0][1], 3), static_first_s=round(statics[0][1], 3),
               static_replay_s=round(statics[1][1], 3), capture_s=round(statics[0][2], 3),
               lengths=eager.completion_mask.sum(1).float().mean().item(), text=eager.texts[0][:80])


# --- a suggestion job's reward model and judge -------------------------------------------------------------------
def suggestions(judge_dir: Path) -> None:
    from trainer.algorithms.rollout import RewardModelScorer
    from trainer.judging import Comparison, Judge

    prompts = [f"What is {n} + {n}?" for n in range(16)]
    responses = [str(2 * n) for n in range(16)] + [str(2 * n + 1) for n in range(16)]
    reward_model = WORK / "smoke-reward_model" / "checkpoints" / "step-3"
    if reward_model.is_dir():
        sync()
        started = time.perf_counter()
        scores = RewardModelScorer(str(reward_model), batch_size=8)(prompts * 2, responses)
        sync()
        record("suggestions", model="reward_model", responses=len(scores), seconds=round(time.perf_counter() - started, 3),
               finite=all(math.isfinite(score) for score in scores))
    else:
        record("suggestions", model="reward_model", error=f"no checkpoint {reward_model}: run the smoke part first")
    judge = Judge(str(judge_dir))
    comparisons = [Comparison(p, r, w) for p, r, w in zip(prompts, responses[:16], responses[16:], strict=True)]
    sync()
    started = time.perf_counter()
    first = judge.prefer_first("Prefer the right answer.", comparisons)
    swapped = judge.prefer_first("Prefer the right answer.", [Comparison(c.prompt, c.second, c.first) for c in comparisons])
    sync()
    record("suggestions", model="judge", comparisons=2 * len(comparisons), seconds=round(time.perf_counter() - started, 3),
           probabilities_ok=all(0.0 <= x <= 1.0 for x in first + swapped), device=str(judge.model.device))


# --- generation, ours against transformers' generate ------------------------------------------------------------
def bandwidth_gbs() -> float:
    """Best device memory bandwidth of a large copy (bytes read + written over seconds)."""
    size = (1 << 28) if not a.dry else (1 << 22)
    src = torch.empty(size, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        sync()
        started = time.perf_counter()
        dst.copy_(src)
        sync()
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() * 4 / best / 1e9


def best_of(function, repeats: int = 3) -> tuple[float, float]:
    """(first call's seconds, best of `repeats` after it)."""
    sync()
    started = time.perf_counter()
    function()
    sync()
    first = time.perf_counter() - started
    times = []
    for _ in range(repeats):
        sync()
        started = time.perf_counter()
        function()
        sync()
        times.append(time.perf_counter() - started)
    return first, min(times)


def generation(model_dir: Path, prompts_count: int, group: int, new_tokens: int) -> None:
    import bench_real_model as b

    from trainer.decoding import static_decode
    from trainer.decoding.generation import HFGenerationBackend, SamplingParams
    from trainer.modeling.models import load_policy, load_tokenizer, resolve_precision

    precision = resolve_precision("bf16-mixed", torch.device(dev))
    tokenizer = load_tokenizer(str(model_dir))
    model = load_policy(str(model_dir), precision=precision)  # as a GRPO policy: fp32 weights, bf16 autocast
    prompts = (b.chat_prompts() * prompts_count)[:prompts_count]
    params = SamplingParams(group_size=group, max_new_tokens=new_tokens, temperature=1.0, min_new_tokens=new_tokens)
    seeds = list(range(prompts_count))
    results = {}
    with torch.no_grad(), precision.autocast(torch.device(dev)):
        for decoding in ("static", "eager"):
            backend = HFGenerationBackend(model, tokenizer, decoding=decoding)
            first, best = best_of(lambda backend=backend: backend.generate(prompts, params, seeds=seeds))
            results[decoding] = (first, best, backend.setup_seconds)
    decoder = static_decode.static_decoder(model)
    state = next(iter(decoder.states.values()), None)
    copies = sum(t.numel() * t.element_size() for t in _kept_copies(model))
    cache_bytes = 0 if state is None else sum(t.numel() * t.element_size() for t in [*state.keys, *state.values])
    bandwidth = bandwidth_gbs()
    floor_step = (copies + cache_bytes) / (bandwidth * 1e9)
    ours_static = results["static"][1]
    record("generation", model=model_dir.name, prompts=prompts_count, G=group, new=new_tokens,
           ours_static_s=round(ours_static, 3), ours_static_first_s=round(results["static"][0], 3),
           capture_s=round(results["static"][2], 3), ours_eager_s=round(results["eager"][1], 3),
           static_vs_eager=round(results["eager"][1] / ours_static, 2),
           bandwidth_gbs=round(bandwidth, 1), weight_copies_gb=round(copies / 1e9, 3),
           cache_gb=round(cache_bytes / 1e9, 3), floor_step_ms=round(floor_step * 1e3, 3),
           our_step_ms=round(ours_static / new_tokens * 1e3, 3),
           fraction_of_floor=round(floor_step * new_tokens / ours_static, 3), peak_gib=peak_and_reset())
    del model
    hf_generate(model_dir, prompts, group, new_tokens, ours_static)


def _kept_copies(model) -> list:
    from trainer.decoding.fast_decode import kept_copy_store

    return list(kept_copy_store(model)._buffers.values())


def hf_generate(model_dir: Path, prompts, group: int, new_tokens: int, ours_static: float) -> None:
    """transformers' generate on G copies of each prompt (a plain trainer's sampling), bf16 weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16 if CUDA else torch.float32).to(dev).eval()
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    encoded = tokenizer([t for t in texts for _ in range(group)], padding=True, padding_side="left",
                        return_tensors="pt", add_special_tokens=False).to(dev)
    for cache in ("dynamic", "static"):
        kwargs = {} if cache == "dynamic" else {"cache_implementation": "static"}

        def run(kwargs=kwargs):
            with torch.no_grad():
                return model.generate(**encoded, do_sample=True, temperature=1.0, top_k=None, top_p=None,
                                      max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                      pad_token_id=tokenizer.pad_token_id, **kwargs)

        try:
            first, best = best_of(run)
            record("generation-hf", cache=cache, first_s=round(first, 3), best_s=round(best, 3),
                   ours_static_vs_it=round(best / ours_static, 2), peak_gib=peak_and_reset())
        except Exception as error:
            record("generation-hf", cache=cache, error=f"{type(error).__name__}: {error}"[:400])


# --- ours against TRL through the project's bench functions -----------------------------------------------------
def patch_benches() -> None:
    import bench_dpo
    import bench_real_model
    import bench_reward_model
    import common

    if not CUDA:  # --dry on the CPU: TRL as the CPU benches run it
        return
    bench_real_model.TRL_CPU_RUN = {k: v for k, v in common.TRL_CPU_RUN.items() if k != "use_cpu"}

    def trl_gpu_args(args, output_dir, lr):
        d = common.trl_common_args(args, output_dir, lr)
        d.pop("use_cpu", None)
        d["bf16"] = True
        return d

    bench_dpo.trl_common_args = trl_gpu_args
    bench_reward_model.trl_common_args = trl_gpu_args


def grpo(model: Path, label: str, prompts_times: int, new_tokens: int, steps: int) -> None:
    import bench_real_model as b
    from transformers import AutoTokenizer

    b.GRPO_PROMPTS = b.GRPO_PROMPTS * prompts_times if prompts_times > 1 else b.GRPO_PROMPTS[:2]
    b.NEW_TOKENS = new_tokens
    args = argparse.Namespace(grpo_steps=steps, precision="bf16-mixed", threads=torch.get_num_threads(), skip_trl=False)
    tok = AutoTokenizer.from_pretrained(model)
    plen = max(len(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
               for p in b.chat_prompts())
    started = time.time()
    ours = b.run_our_grpo(args, model, plen)
    our_step = ours.timed_seconds() / (steps - 1)
    timed = [ours.metrics[s] for s in range(2, steps + 1)]
    phases = {k: round(sum(m.get(f"time/{k}_s", 0) for m in timed) / len(timed), 3)
              for k in ("generation", "scoring", "backward")}
    config = json.loads((model / "config.json").read_text())
    params = _parameter_count(config)
    record("grpo-ours", model=label, prompts=len(b.GRPO_PROMPTS), G=b.GROUP_SIZE, new=new_tokens,
           step_s=round(our_step, 3), phases=phases, wall=round(time.time() - started, 1),
           capture_s=[ours.metrics[s].get("time/graph_capture_s") for s in sorted(ours.metrics)],
           lengths=[m.get("completion/mean_length") for m in ours.metrics.values()],
           peak_gib=peak_and_reset(), memory_gib=_memory_accounting(params))
    started = time.time()
    trl_step, lengths = b.run_trl_grpo(args, model)
    record("grpo-trl", model=label, step_s=round(trl_step, 3), wall=round(time.time() - started, 1), lengths=lengths,
           ratio=round(trl_step / our_step, 2), peak_gib=peak_and_reset())


def _parameter_count(config: dict) -> int:
    hidden, inter, layers, vocab = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"], config["vocab_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    per_layer = hidden * (config["num_attention_heads"] * head_dim) * 2 + hidden * kv * 2 + 3 * hidden * inter + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    return layers * per_layer + embeddings + hidden


def _memory_accounting(params: int) -> dict:
    """Where a bf16-mixed GRPO step's memory goes, by what it must hold (GiB): fp32 weights, their gradients, AdamW's
    two moments, the decoder's bf16 copies; the rest of the peak is activations, logits and the KV cache."""
    return {"weights_fp32": gib(4 * params), "grads_fp32": gib(4 * params), "adamw_moments": gib(8 * params),
            "decoding_copies_bf16": gib(2 * params)}


def pairs(model: Path, label: str, batch: int, steps: int) -> None:
    import bench_dpo
    import bench_real_model as b
    import bench_reward_model

    pair_args = argparse.Namespace(steps=steps, batch_size=batch, max_length=256)
    rows = b.chat_pairs(steps * batch)
    n = (steps - 1) * batch
    for name, module, kw in (("reward_model", bench_reward_model, {}), ("dpo", bench_dpo, {"precompute": False})):
        ours = module.run_ours(pair_args, model, rows, **kw)
        our_peak = peak_and_reset()
        trl = module.run_trl(pair_args, model, rows, **kw)
        record("pairs", model=label, kind=name, batch=batch, ours_pairs_s=round(n / ours, 2),
               trl_pairs_s=round(n / trl, 2), ratio=round(trl / ours, 2), our_peak_gib=our_peak,
               trl_peak_gib=peak_and_reset())


def profile(model: Path, batch: int) -> None:
    """Where our DPO step's time goes on this device (the GPU's kernels and the host's launching them), for the
    session that makes it faster: torch.profiler's table over 3 steps, in OUT/profile-dpo.txt."""
    import bench_dpo
    import bench_real_model as b
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    pair_args = argparse.Namespace(steps=3, batch_size=batch, max_length=256)
    rows = b.chat_pairs(3 * batch)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    with torch_profile(activities=activities) as traced:
        seconds = bench_dpo.run_ours(pair_args, model, rows, precompute=False)
    sort = "cuda_time_total" if CUDA else "cpu_time_total"
    table = traced.key_averages().table(sort_by=sort, row_limit=25)
    (OUT / "profile-dpo.txt").write_text(table)
    record("profile", kind="dpo", steps_timed_s=round(seconds, 3), top=table.splitlines()[3:8])


def part(name: str, fn, *args) -> None:
    if name not in chosen:
        return
    try:
        fn(*args)
    except Exception as e:  # keep going: each part's result stands alone
        record("error", at=name, error=f"{type(e).__name__}: {e}"[:600], tb=traceback.format_exc()[-2000:])
    peak_and_reset()


m135 = build("m135", **SHAPE_135)
part("smoke", smoke, m135)
part("sampling", sampling, m135)
part("suggestions", suggestions, m135)
needs_1b7 = chosen & {"generation", "grpo1b", "pairs", "profile"}
m1b7 = build("m1b7", **SHAPE_1B7) if needs_1b7 else None
part("generation", generation, m1b7, 8, 8, 128 if not a.dry else 16)
patch_benches()
part("grpo135", grpo, m135, "135m", 1, 64 if not a.dry else 8, 3)
part("grpo1b", grpo, m1b7, "1.7b", 4, 128 if not a.dry else 8, 3)
part("pairs", pairs, m1b7, "1.7b", 8, 4)
part("profile", profile, m1b7, 8)
record("done", seconds=round(time.time() - T0, 1))
