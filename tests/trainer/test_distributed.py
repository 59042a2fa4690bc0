"""Runs on 2 processes (torchrun, gloo on the CPU) reproduce the same run on 1 process, for every kind, with
ddp and with fsdp (FSDP2), and resume across world sizes in both directions.

Tolerance: losses and gradient norms agree within a relative 1e-4 (fp32; measured: at most 2e-6, from the
order in which the processes' gradients are summed) and 1e-3 under bf16-mixed (measured: 1e-4 on the gradient
norm), over 5 steps. The 2-process runs go through the command line (`python -m trainer run`), which starts
torchrun itself when the run file asks for more than one process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from trainer.cli import main
from trainer.config import ConfigError, config_from_dict
from trainer.distributed import setup
from trainer.sink import read_jsonl

REPO = Path(__file__).parents[2]
FP32_TOLERANCE = 1e-4
BF16_TOLERANCE = 1e-3
STEPS = 5
ONLINE_REWARDS = {"length_penalty": 1.0, "format_tags": 1.0}
KINDS = {
    "sft": {"batch_size": 8, "grad_accum_steps": 2, "eval_max_new_tokens": 8},
    "reward_model": {},
    "dpo": {"eval_max_new_tokens": 8},
    # dapo: dynamic sampling draws more rounds of prompts until enough groups are informative
    "grpo": {"preset": "dapo", "group_size": 4, "max_new_tokens": 8, "rewards": ONLINE_REWARDS, "beta": 0.04},
    "ppo": {"max_new_tokens": 8, "rewards": ONLINE_REWARDS},
}


def _run_file(directory: Path, kind: str, tiny_model: str, **settings) -> Path:
    run = {
        "kind": kind,
        "model": tiny_model,
        "output_dir": str(directory / "out"),
        "max_steps": STEPS,
        "batch_size": 4,
        "lr": 1e-3,
        "max_length": 64,
        "max_prompt_length": 24,
        "task": "arithmetic",
        "task_level": 1,
        "task_train_size": 40,
        "task_eval_size": 4,
        **KINDS[kind],
        **settings,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "run.json"
    path.write_text(json.dumps(run))
    return path


def _train(run_file: Path) -> list[dict]:
    """Run through the command line: in this process for one process, as a child (which starts torchrun) for more."""
    run = json.loads(run_file.read_text())
    if run.get("num_processes", 1) == 1:
        assert main(["run", str(run_file)]) == 0
    else:
        completed = subprocess.run(
            [sys.executable, "-m", "trainer", "run", str(run_file)],
            capture_output=True, text=True, timeout=600, cwd=REPO,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)},
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert "starting 2 processes with torchrun" in completed.stderr
    return read_jsonl(Path(run["output_dir"]) / "metrics.jsonl")


def _assert_same_numbers(expected: list[dict], actual: list[dict], tolerance: float) -> None:
    # one row per step: only the main process reports
    assert [row["step"] for row in actual] == [row["step"] for row in expected]
    for one, two in zip(expected, actual, strict=True):
        assert two["tokens_seen"] == one["tokens_seen"]
        for name in ("loss", "grad_norm"):
            assert two["metrics"][name] == pytest.approx(one["metrics"][name], rel=tolerance, abs=tolerance), (
                f"{name} at step {one['step']}"
            )


@pytest.mark.parametrize("kind", list(KINDS))
def test_two_ddp_processes_reproduce_one_process(kind, tiny_model, tmp_path):
    one = _train(_run_file(tmp_path / "one", kind, tiny_model))
    two = _train(_run_file(tmp_path / "two", kind, tiny_model, num_processes=2))
    _assert_same_numbers(one, two, FP32_TOLERANCE)
    if kind in ("grpo", "ppo"):
        # rewards come from the gathered rollout: the whole batch's, not one process's share
        assert [row["metrics"]["reward/mean"] for row in two] == [row["metrics"]["reward/mean"] for row in one]
    if kind == "grpo":
        ratios = [row["metrics"]["groups/informative_ratio"] for row in two]
        assert ratios == [row["metrics"]["groups/informative_ratio"] for row in one]


@pytest.mark.parametrize(
    ("kind", "precision"), [("sft", "fp32"), ("grpo", "fp32"), ("ppo", "fp32"), ("dpo", "bf16-mixed")]
)
def test_fsdp_on_two_processes_matches_ddp_and_saves_an_ordinary_model(kind, precision, tiny_model, tmp_path):
    tolerance = FP32_TOLERANCE if precision == "fp32" else BF16_TOLERANCE
    ddp = _train(_run_file(tmp_path / "ddp", kind, tiny_model, num_processes=2, precision=precision))
    fsdp = _train(_run_file(tmp_path / "fsdp", kind, tiny_model, num_processes=2, parallelism="fsdp", precision=precision))
    _assert_same_numbers(ddp, fsdp, tolerance)

    checkpoint = tmp_path / "fsdp" / "out" / "checkpoints" / f"step-{STEPS}"
    assert (checkpoint / "optimizer").is_dir()  # torch.distributed.checkpoint shards, one file per process
    sharded = AutoModelForCausalLM.from_pretrained(checkpoint)
    replicated = AutoModelForCausalLM.from_pretrained(tmp_path / "ddp" / "out" / "checkpoints" / f"step-{STEPS}")
    for (name, weight), other in zip(sharded.state_dict().items(), replicated.state_dict().values(), strict=True):
        difference = (weight - other).abs()
        if precision == "fp32":
            assert difference.max() <= tolerance, name
        else:
            # AdamW moves a weight by about lr whatever its gradient's size, so where bf16 rounding flips the
            # sign of a gradient near 0, a few weights differ by up to 2 x lr: on average they agree (2e-5 here)
            assert difference.mean() <= tolerance / 10, name


FSDP = {"num_processes": 2, "parallelism": "fsdp"}


@pytest.mark.parametrize(
    ("kind", "first", "then"),
    [("sft", FSDP, {}), ("sft", {}, {"num_processes": 2}), ("sft", {}, FSDP), ("ppo", FSDP, {})],
    ids=["sft-fsdp-2-to-1", "sft-1-to-ddp-2", "sft-1-to-fsdp-2", "ppo-fsdp-2-to-1"],
)
def test_a_run_resumes_on_another_number_of_processes(kind, first, then, tiny_model, tmp_path):
    # a constant schedule, so a first part of 4 steps is the first 4 steps of the 8-step run
    constant = {"lr_scheduler": "constant"}
    whole = _train(_run_file(tmp_path / "whole", kind, tiny_model, max_steps=8, **constant))
    _train(_run_file(tmp_path / "first", kind, tiny_model, max_steps=4, **constant, **first))
    checkpoint = tmp_path / "first" / "out" / "checkpoints" / "step-4"
    resumed = _train(
        _run_file(tmp_path / "then", kind, tiny_model, max_steps=8, resume_from=str(checkpoint), **constant, **then)
    )
    _assert_same_numbers(whole[4:], resumed, FP32_TOLERANCE)


def test_a_batch_that_does_not_split_over_the_processes_is_refused_naming_the_field(tiny_model):
    with pytest.raises(ConfigError, match="batch_size: 6 does not split evenly over num_processes=4"):
        config_from_dict("grpo", {"model": tiny_model, "output_dir": "o", "batch_size": 6, "num_processes": 4})
    with pytest.raises(ConfigError, match="parallelism: LoRA runs"):
        config_from_dict(
            "dpo", {"model": tiny_model, "output_dir": "o", "num_processes": 2, "parallelism": "fsdp", "use_lora": True}
        )


def test_a_run_for_two_processes_started_as_one_says_how_to_start_it(tiny_model):
    config = config_from_dict("sft", {"model": tiny_model, "output_dir": "o", "num_processes": 2})
    with pytest.raises(ConfigError, match="torchrun --nproc-per-node 2"):
        setup(config)
