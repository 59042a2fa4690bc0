"""Runs on 2 processes (torchrun, gloo on the CPU) reproduce the same run on 1 process, for every kind, with
ddp and with fsdp (FSDP2), also when DAPO's dynamic sampling keeps fewer groups than the processes have
micro-batches, and resume across world sizes in both directions.

Tolerance: losses and gradient norms agree within a relative 1e-4 (fp32; measured: at most 2e-6, from the
order in which the processes' gradients are summed) and 1e-3 under bf16-mixed (measured: 1e-4 on the gradient
norm), over 5 steps. The 2-process runs go through the command line (`python -m trainer run`), which starts
torchrun itself when the run file asks for more than one process.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from torch.distributed.checkpoint import FileSystemReader
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from trainer.cli import main
from trainer.config import ConfigError
from trainer.kinds import config_from_dict
from trainer.modeling.distributed import setup
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
        **KINDS.get(kind, {}),
        **settings,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "run.json"
    path.write_text(json.dumps(run))
    return path


def _train(run_file: Path, *, timeout_s: float = 600) -> list[dict]:
    """Run through the command line: in this process for one process, as a child (which starts torchrun) for more.
    A child still running after `timeout_s` (processes stuck in a collective) fails the test, its processes killed."""
    run = json.loads(run_file.read_text())
    if run.get("num_processes", 1) == 1:
        assert main(["run", str(run_file)]) == 0
    else:
        returncode, stderr = _run_or_kill(
            [sys.executable, "-m", "trainer", "run", str(run_file)], timeout_s=timeout_s,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)},
        )
        assert returncode == 0, stderr[-3000:]
        assert "starting 2 processes with torchrun" in stderr
    return read_jsonl(Path(run["output_dir"]) / "metrics.jsonl")


def _run_or_kill(command: list[str], *, timeout_s: float, env: dict[str, str]) -> tuple[int, str]:
    """(exit code, stderr) of `command`; past the timeout, it and every process under it (torchrun starts each rank
    in a session of its own) are killed and the test fails."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        _, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        for pid in [*_descendants(child.pid), child.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, stderr = child.communicate()
        pytest.fail(f"still running after {timeout_s} s (a collective waiting for a process that never joins it?)\n"
                    + stderr[-3000:])
    return child.returncode, stderr


def _descendants(pid: int) -> list[int]:
    """Every process under `pid`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, waiting = [], [pid]
    while waiting:
        for child in children.get(waiting.pop(), []):
            found.append(child)
            waiting.append(child)
    return found


def _assert_same_numbers(expected: list[dict], actual: list[dict], tolerance: float) -> None:
    # one row per step: only the main process reports
    assert [row["step"] for row in actual] == [row["step"] for row in expected]
    for one, two in zip(expected, actual, strict=True):
        assert two["tokens_seen"] == one["tokens_seen"]
        for name in ("loss", "grad_norm"):
            assert two["metrics"][name] == pytest.approx(one["metrics"][name], rel=tolerance, abs=tolerance), (
                f"{name} at step {one['step']}"
            )


@pytest.mark.slow
def test_two_ddp_processes_reproduce_kto_on_one_process_of_the_same_micro_batches(tiny_model, tmp_path):
    """KTO's KL estimate is a micro-batch's (as TRL's is a device batch's): one process with two micro-batches of two
    rows against two processes with one each."""
    one = _train(_run_file(tmp_path / "one", "kto", tiny_model, grad_accum_steps=2, eval_max_new_tokens=8))
    two = _train(_run_file(tmp_path / "two", "kto", tiny_model, num_processes=2, eval_max_new_tokens=8))
    _assert_same_numbers(one, two, FP32_TOLERANCE)
    for name in ("kl", "rewards/chosen", "rewards/rejected"):  # a step without desirable rows logs no rewards/chosen
        assert [row["metrics"].get(name, 0) for row in two] == pytest.approx(
            [row["metrics"].get(name, 0) for row in one], abs=1e-6)
    assert any(row["metrics"]["kl"] > 0 for row in one)


# sft and grpo in CI (a loss of its own and a gathered rollout); the other kinds are `slow` variants of the same
@pytest.mark.parametrize("kind", [kind if kind in ("sft", "grpo") else pytest.param(kind, marks=pytest.mark.slow)
                                  for kind in KINDS])
def test_two_ddp_processes_reproduce_one_process(kind, tiny_model, tmp_path):
    one = _train(_run_file(tmp_path / "one", kind, tiny_model))
    two = _train(_run_file(tmp_path / "two", kind, tiny_model, num_processes=2))
    _assert_same_numbers(one, two, FP32_TOLERANCE)
    if kind in ("grpo", "ppo"):
        # rewards come from the gathered rollout: the whole batch's, not one process's share
        assert [row["metrics"]["reward/mean"] for row in two] == [row["metrics"]["reward/mean"] for row in one]
    if kind == "grpo":
        # dynamic sampling decides on the gathered rounds: every process draws as many as one process would
        for name in ("groups/informative_ratio", "groups/rounds"):
            assert [row["metrics"][name] for row in two] == [row["metrics"][name] for row in one], name
        # the random tiny model's completions mostly run to max_new_tokens, rewards all equal: rounds are redrawn
        assert max(row["metrics"]["groups/rounds"] for row in two) > 1


# dpo under bf16-mixed in CI (FSDP's GRPO is in CI below: dynamic sampling's micro-batches); the rest `slow`
@pytest.mark.parametrize(
    ("kind", "precision"),
    [pytest.param("sft", "fp32", marks=pytest.mark.slow), pytest.param("grpo", "fp32", marks=pytest.mark.slow), pytest.param("ppo", "fp32", marks=pytest.mark.slow), ("dpo", "bf16-mixed")],
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


def test_fsdp_trains_the_reward_models_score_head_as_ddp_and_saves_a_sequence_classifier(tiny_model, tmp_path):
    ddp = _train(_run_file(tmp_path / "ddp", "reward_model", tiny_model, num_processes=2))
    fsdp = _train(_run_file(tmp_path / "fsdp", "reward_model", tiny_model, **FSDP))
    _assert_same_numbers(ddp, fsdp, FP32_TOLERANCE)

    checkpoint = tmp_path / "fsdp" / "out" / "checkpoints" / f"step-{STEPS}"
    # the head is sharded with the root (embeddings, final norm): its AdamW moments are one shard per process
    optimizer = FileSystemReader(checkpoint / "optimizer").read_metadata().state_dict_metadata
    for moment in ("exp_avg", "exp_avg_sq"):
        assert len(optimizer[f"state.score.weight.{moment}"].chunks) == 2
    sharded, loading = AutoModelForSequenceClassification.from_pretrained(checkpoint, output_loading_info=True)
    assert not any(loading.values()), loading  # no missing, unexpected or mismatched weights
    assert sharded.config.num_labels == 1
    replicated = AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "ddp" / "out" / "checkpoints" / f"step-{STEPS}"
    )
    assert sharded.state_dict().keys() == replicated.state_dict().keys()
    for name, weight in sharded.state_dict().items():
        assert (weight - replicated.state_dict()[name]).abs().max() <= FP32_TOLERANCE, name


FSDP = {"num_processes": 2, "parallelism": "fsdp"}
# Dynamic sampling keeps 2 of step 1's 4 groups of 3 (1 at steps 3 and 5): 6 rows, or 3, for 2 processes x 2
# micro-batches. torch.chunk cut 6 rows into 3 micro-batches, 1 for rank 0 and 2 for rank 1, and under fsdp rank 1's
# second forward gathered weights against rank 0's gather of the step's metrics: gloo aborted on the sizes.
FEW_KEPT_GROUPS = {"group_size": 3, "grad_accum_steps": 2}


def _kept_groups(row: dict, batch_size: int = 4) -> int:
    """How many informative groups dynamic sampling kept at a step (each round draws batch_size groups)."""
    metrics = row["metrics"]
    informative = round(metrics["groups/informative_ratio"] * metrics["groups/rounds"] * batch_size)
    return min(informative, batch_size)


def test_fsdp_grpo_runs_as_many_micro_batches_on_every_process_when_dynamic_sampling_keeps_few_groups(
    tiny_model, tmp_path
):
    fsdp = _train(_run_file(tmp_path / "fsdp", "grpo", tiny_model, **FEW_KEPT_GROUPS, **FSDP), timeout_s=300)
    one = _train(_run_file(tmp_path / "one", "grpo", tiny_model, **FEW_KEPT_GROUPS))
    assert any(0 < _kept_groups(row) < 4 for row in one), "no step kept fewer groups than the batch"
    _assert_same_numbers(one, fsdp, FP32_TOLERANCE)


DDP = {"num_processes": 2}
RESUMES = {  # every kind at least once, from 2 processes to 1 (sft, dpo, ppo) and from 1 to 2 (sft, reward model, grpo)
    "sft-fsdp-2-to-1": ("sft", FSDP, {}),
    "sft-ddp-2-to-1": ("sft", DDP, {}),
    "sft-1-to-ddp-2": ("sft", {}, DDP),
    "sft-1-to-fsdp-2": ("sft", {}, FSDP),
    "dpo-fsdp-2-to-1": ("dpo", FSDP, {}),
    "ppo-fsdp-2-to-1": ("ppo", FSDP, {}),
    "reward_model-1-to-fsdp-2": ("reward_model", {}, FSDP),
    "grpo-1-to-fsdp-2": ("grpo", {}, FSDP),
}


# from 2 processes to 1 and from 1 to 2 in CI; every other kind and layout is a `slow` variant
RESUMES_IN_CI = ("sft-fsdp-2-to-1", "grpo-1-to-fsdp-2")


@pytest.mark.parametrize(
    ("kind", "first", "then"),
    [pytest.param(*case, id=name, marks=() if name in RESUMES_IN_CI else pytest.mark.slow)
     for name, case in RESUMES.items()],
)
def test_a_run_resumes_on_another_number_of_processes(kind, first, then, tiny_model, tmp_path):
    # a constant schedule, so a first part of 3 steps is the first 3 steps of the 6-step run
    constant = {"lr_scheduler": "constant"}
    whole = _train(_run_file(tmp_path / "whole", kind, tiny_model, max_steps=6, **constant))
    _train(_run_file(tmp_path / "first", kind, tiny_model, max_steps=3, **constant, **first))
    checkpoint = tmp_path / "first" / "out" / "checkpoints" / "step-3"
    resumed = _train(
        _run_file(tmp_path / "then", kind, tiny_model, max_steps=6, resume_from=str(checkpoint), **constant, **then)
    )
    _assert_same_numbers(whole[3:], resumed, FP32_TOLERANCE)


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
