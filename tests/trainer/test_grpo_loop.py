"""The grpo kind through its loop: every dashboard metric each step, samples, exact resume, stop, NaN."""

import math

import pytest

from trainer.algorithms.grpo import train
from trainer.builtin_datasets import arithmetic
from trainer.config import GRPOConfig
from trainer.kinds import config_from_dict
from trainer.loop import TrainingDiverged
from trainer.sink import MemorySink

TIMING = ("time/step_s", "throughput/tokens_per_s", "time/generation_s", "time/scoring_s", "time/backward_s")
STEPS, STOP_AT = 4, 2
GRPO_METRICS = {
    "loss", "reward/mean", "reward/std", "reward/answer_match", "reward/format_tags", "kl", "entropy",
    "clip_ratio/low", "clip_ratio/high", "advantage/mean", "completion/mean_length", "completion/clipped_ratio",
    "completion/format_rate", "groups/informative_ratio", "groups/rounds", "grad_norm", "lr",
    "throughput/tokens_per_s", "time/step_s", "time/generation_s", "time/scoring_s", "time/backward_s",
}


def _settings(model: str, output_dir, **overrides) -> dict:
    return {
        "model": model,
        "output_dir": str(output_dir),
        "lr": 1e-3,
        "max_steps": STEPS,
        "batch_size": 2,
        "group_size": 4,
        "grad_accum_steps": 2,
        "num_iterations": 2,
        "max_new_tokens": 8,
        "max_length": 40,
        "max_prompt_length": 24,
        "rewards": {"answer_match": 1.0, "format_tags": 0.5},
        "sample_every": 3,
        "samples_per_log": 3,
        **overrides,
    }


def _run(model, output_dir, sink, **overrides):
    config = config_from_dict("grpo", _settings(model, output_dir, **overrides))
    return train(config, arithmetic.sft_rows(1, "train", 20), sink, eval_data=arithmetic.sft_rows(1, "test", 4))


def test_every_step_logs_the_design_metrics_and_samples_carry_rewards(sft_run, tmp_path):
    sink = MemorySink()
    result = _run(sft_run[0], tmp_path, sink)
    assert sorted(sink.metrics) == list(range(1, STEPS + 1))
    for step, metrics in sink.metrics.items():
        assert metrics.keys() >= GRPO_METRICS, step
        assert all(math.isfinite(value) for value in metrics.values())
    assert {"eval/accuracy", "eval/format_rate"} <= sink.metrics[STEPS].keys()
    # every sample_every (3) steps, and at the last step (4)
    assert [s["step"] for s in sink.samples] == [3, 3, 3, 4, 4, 4]
    assert all(set(s["rewards"]) == {"answer_match", "format_tags"} and s["advantage"] is not None
               for s in sink.samples)
    assert result.checkpoint.endswith(f"checkpoints/step-{STEPS}")


def test_cut_off_completions_score_0_unless_the_run_falls_back_to_the_last_number(sft_run, tmp_path):
    # 10 new tokens end the SFT model's completions inside <think> ("<think>5 + 3 = 8"): no answer tag yet
    scores = {}
    for lenient in (False, True):
        sink = MemorySink()
        _run(sft_run[0], tmp_path / str(lenient), sink, max_steps=1, max_new_tokens=10, rewards={"answer_match": 1.0},
             answer_fallback_last_number=lenient)
        scores[lenient] = sink.metrics[1]
    assert scores[False]["completion/format_rate"] == 0.0 and scores[True]["completion/format_rate"] == 0.0
    assert scores[False]["reward/answer_match"] == 0.0
    assert scores[True]["reward/answer_match"] > 0.0


def test_stopped_and_resumed_run_matches_uninterrupted_run(tiny_model, tmp_path):
    uninterrupted = MemorySink()
    _run(tiny_model, tmp_path / "whole", uninterrupted)
    first_half = MemorySink(stop_at_step=STOP_AT)
    stopped = _run(tiny_model, tmp_path / "split", first_half)
    assert stopped.stopped and stopped.step == STOP_AT
    second_half = MemorySink()
    _run(tiny_model, tmp_path / "split", second_half, resume_from=stopped.checkpoint)
    assert second_half.starts == [(STEPS, STOP_AT)]
    for step in range(STOP_AT + 1, STEPS + 1):
        expected, actual = uninterrupted.metrics[step], second_half.metrics[step]
        assert expected.keys() == actual.keys()
        for name in expected.keys() - set(TIMING):
            assert actual[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), (step, name)
    assert [s["completion"] for s in second_half.samples] == [
        s["completion"] for s in uninterrupted.samples if s["step"] > STOP_AT
    ]


def test_nan_loss_stops_the_run_naming_metric_and_step(tiny_model, tmp_path):
    sink = MemorySink()
    with pytest.raises(TrainingDiverged, match=r"^loss is NaN at step 2$"):
        _run(tiny_model, tmp_path, sink, debug_nan_at_step=2, beta=0.0)
    assert math.isnan(sink.metrics[2]["loss"])


def test_dapo_preset_turns_on_every_dapo_option_and_drops_the_reference():
    config = GRPOConfig.dapo(model="m", output_dir="o", max_new_tokens=32, overlong_buffer=8)
    config.validate()
    assert config.beta == 0.0 and config.epsilon_high == 0.28 and config.epsilon_low == 0.2
    assert config.loss_aggregation == "token-mean"
    assert config.dynamic_sampling and config.overlong_filtering
    assert config.rewards == {"answer_match": 1.0, "soft_overlong": 1.0}
    assert GRPOConfig(model="m", output_dir="o").beta == 0.04


def test_a_config_names_a_preset_and_sets_its_own_fields_on_top():
    fields = {"model": "m", "output_dir": "o", "max_new_tokens": 32, "overlong_buffer": 8}
    assert config_from_dict("grpo", {**fields, "preset": "dapo"}) == GRPOConfig.dapo(**fields)
    own = config_from_dict("grpo", {**fields, "preset": "dapo", "beta": 0.01, "rewards": {"format_tags": 1.0}})
    assert own.beta == 0.01 and own.dynamic_sampling and own.epsilon_high == 0.28
    # the run's own reward functions, plus the preset's soft overlong punishment
    assert own.rewards == {"format_tags": 1.0, "soft_overlong": 1.0}
    weighted = config_from_dict("grpo", {**fields, "preset": "dapo", "rewards": {"soft_overlong": 0.5}})
    assert weighted.rewards == {"soft_overlong": 0.5}


def test_an_unknown_preset_names_the_choices():
    from trainer.config import ConfigError

    with pytest.raises(ConfigError, match="^preset: unknown preset 'dpo' for grpo; choose one of dapo$"):
        config_from_dict("grpo", {"model": "m", "output_dir": "o", "preset": "dpo"})
    with pytest.raises(ConfigError, match="^preset: unknown preset 'dapo' for ppo; ppo has no presets$"):
        config_from_dict("ppo", {"model": "m", "output_dir": "o", "preset": "dapo"})


def test_bad_grpo_settings_name_the_field():
    from trainer.config import ConfigError

    with pytest.raises(ConfigError, match="^group_size: must be >= 2"):
        config_from_dict("grpo", {"model": "m", "output_dir": "o", "group_size": 1})
    with pytest.raises(ConfigError, match="^rewards: unknown reward function 'exact'"):
        config_from_dict("grpo", {"model": "m", "output_dir": "o", "rewards": {"exact": 1.0}})
    with pytest.raises(ConfigError, match="^loss_aggregation: expected one of"):
        config_from_dict("grpo", {"model": "m", "output_dir": "o", "loss_aggregation": "mean"})


def test_a_diverged_step_is_logged_without_evaluating_the_broken_policy(tiny_model, tmp_path):
    sink = MemorySink()
    with pytest.raises(TrainingDiverged, match=r"^loss is NaN at step 2$"):
        _run(tiny_model, tmp_path, sink, debug_nan_at_step=2, beta=0.0, eval_every=1, log_every=1)
    assert "eval/accuracy" in sink.metrics[1]
    assert "eval/accuracy" not in sink.metrics[2]
