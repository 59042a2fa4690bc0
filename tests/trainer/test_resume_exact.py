"""A run stopped at step k through sink.should_stop() and resumed from its checkpoint ends with the same
numbers as a run that never stopped."""

import importlib
import math

import pytest

from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink

TIMING = ("time/step_s", "throughput/tokens_per_s")
STEPS, STOP_AT = 6, 3


def _data(kind: str) -> tuple[list[dict], list[dict]]:
    if kind == "sft":
        return arithmetic.sft_rows(1, "train", 24), arithmetic.sft_rows(1, "test", 4)
    return arithmetic.preference_rows(1, "train", 24), arithmetic.preference_rows(1, "test", 4)


def _run(kind: str, tiny_model: str, output_dir, sink: MemorySink, **overrides):
    settings = {
        "model": tiny_model,
        "output_dir": str(output_dir),
        "lr": 1e-3,
        "warmup_steps": 2,
        "max_steps": STEPS,
        "batch_size": 8,
        "grad_accum_steps": 2,
        "max_length": 64,
        "max_prompt_length": 24,
        **({"eval_max_new_tokens": 8} if kind != "reward_model" else {}),
        **overrides,
    }
    config = config_from_dict(kind, settings)
    data, eval_data = _data(kind)
    return importlib.import_module(f"trainer.algorithms.{kind}").train(config, data, sink, eval_data=eval_data)


LORA = {"use_lora": True, "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "lr": 1e-2}


@pytest.mark.parametrize(
    ("kind", "options"),
    [("sft", {}), ("reward_model", {}), ("dpo", {}), ("dpo", {"precompute_ref_logps": False, **LORA})],
    ids=["sft", "reward_model", "dpo", "dpo-lora-live-reference"],
)
def test_stopped_and_resumed_run_matches_uninterrupted_run(kind, options, tiny_model, tmp_path):
    uninterrupted = MemorySink()
    _run(kind, tiny_model, tmp_path / "whole", uninterrupted, **options)

    first_half = MemorySink(stop_at_step=STOP_AT)
    stopped = _run(kind, tiny_model, tmp_path / "split", first_half, **options)
    assert stopped.stopped and stopped.step == STOP_AT
    assert stopped.checkpoint.endswith(f"checkpoints/step-{STOP_AT}")
    assert max(first_half.metrics) == STOP_AT

    second_half = MemorySink()
    resumed = _run(kind, tiny_model, tmp_path / "split", second_half, resume_from=stopped.checkpoint, **options)
    assert second_half.starts == [(STEPS, STOP_AT)]
    assert resumed.step == STEPS and not resumed.stopped

    for step in range(STOP_AT + 1, STEPS + 1):
        expected, actual = uninterrupted.metrics[step], second_half.metrics[step]
        assert expected.keys() == actual.keys()
        for name in expected.keys() - set(TIMING):
            assert math.isclose(actual[name], expected[name], rel_tol=1e-5, abs_tol=1e-5), (step, name)
    assert uninterrupted.metrics[STEPS]["loss"] != uninterrupted.metrics[1]["loss"]
