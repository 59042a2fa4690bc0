import dataclasses

import pytest

from trainer.config import ConfigError, DPOConfig, config_to_dict
from trainer.kinds import CONFIG_CLASSES, config_from_dict

REQUIRED = {"model": "models/tiny", "output_dir": "runs/1"}


def _error(kind: str, **fields) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        config_from_dict(kind, {**REQUIRED, **fields})
    return caught.value


def test_defaults_follow_the_papers_and_the_issue():
    dpo = config_from_dict("dpo", REQUIRED)
    assert (dpo.beta, dpo.loss_type, dpo.label_smoothing) == (0.1, "sigmoid", 0.0)
    assert config_from_dict("reward_model", REQUIRED).lr == 1e-4


@pytest.mark.parametrize(
    ("kind", "fields", "field", "words"),
    [
        ("sft", {"lr": 0}, "lr", "must be > 0"),
        ("dpo", {"beta": -0.1}, "beta", "must be > 0"),
        ("dpo", {"loss_type": "robust"}, "loss_type", "'sigmoid', 'ipo', 'hinge'"),
        ("reward_model", {"batch_size": 10, "grad_accum_steps": 4}, "batch_size", "not divisible"),
        ("sft", {"lr": "fast"}, "lr", "expected a number"),
        ("sft", {"max_steps": 2.5}, "max_steps", "expected an integer or empty"),
        ("sft", {"use_lora": "yes"}, "use_lora", "true or false"),
        ("sft", {"max_prompt_length": 600, "max_length": 512}, "max_prompt_length", "smaller than max_length"),
        ("dpo", {"label_smoothing": 0.2, "loss_type": "ipo"}, "label_smoothing", "sigmoid loss only"),
        # num_processes is the total over all nodes, and every node runs as many
        ("sft", {"num_processes": 3, "num_nodes": 2}, "num_nodes", "num_processes=3 does not split evenly over "
                                                                    "num_nodes=2"),
        ("grpo", {"num_nodes": 0}, "num_nodes", "must be > 0"),
    ],
)
def test_bad_values_name_the_field(kind, fields, field, words):
    error = _error(kind, **fields)
    assert error.field == field
    assert words in str(error)
    assert isinstance(error, ValueError)


def test_unknown_key_suggests_the_closest_field():
    error = _error("dpo", lrr=1e-5)
    assert error.field == "lrr"
    assert str(error) == "lrr: unknown field 'lrr' for dpo; did you mean 'lr'?"


def test_missing_required_field_and_unknown_kind():
    with pytest.raises(ConfigError, match="model: is required"):
        config_from_dict("sft", {"output_dir": "x"})
    with pytest.raises(ConfigError) as caught:
        config_from_dict("dpoo", REQUIRED)
    assert caught.value.field == "kind"


def test_round_trip_through_a_dict():
    config = config_from_dict("dpo", {**REQUIRED, "beta": 0.3, "lora_target_modules": ["q_proj"], "use_lora": True})
    assert config_from_dict("dpo", config_to_dict(config)) == config
    assert isinstance(config, DPOConfig)


def test_every_field_has_help_and_a_known_group():
    for cls in CONFIG_CLASSES.values():
        for field in dataclasses.fields(cls):
            assert field.metadata.get("help"), (cls.__name__, field.name)
            assert field.metadata.get("group") in {"model", "optimisation", "data", "logging", "processes", "advanced"}
    nan_field = next(f for f in dataclasses.fields(DPOConfig) if f.name == "debug_nan_at_step")
    assert nan_field.metadata["test_only"] is True


# Numbers whose range a check of their own states (in [0, 1), <= batch_size, ...) or that only scale a finite term,
# for which finiteness is the bound (trainer/config.py's docstring); every other number has a "maximum".
BOUNDED_BY_A_CHECK = {"warmup_ratio", "grad_accum_steps", "max_prompt_length", "lora_dropout", "label_smoothing", "top_p",
                      "gamma", "lam", "num_mini_batches"}
COEFFICIENTS = {"max_grad_norm", "center_coef", "beta", "rpo_alpha", "reward_model_weight", "alert_kl_above",
                "alert_entropy_below", "epsilon_high", "kl_coef", "value_clip", "vf_coef", "entropy_coef",
                "desirable_weight", "undesirable_weight"}


def test_every_number_of_every_kind_has_an_upper_bound():
    import types
    import typing

    for cls in CONFIG_CLASSES.values():
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            hint = hints[field.name]
            options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
            if {int, float} & set(options) and field.name not in BOUNDED_BY_A_CHECK | COEFFICIENTS:
                assert "maximum" in field.metadata, (cls.__name__, field.name)


@pytest.mark.parametrize(
    ("kind", "fields", "field", "words"),
    [
        ("sft", {"batch_size": 2**63}, "batch_size", "must be <= 1048576, got 9223372036854775808"),
        ("sft", {"grad_accum_steps": 2**40}, "grad_accum_steps", "must be <= batch_size=8"),
        ("sft", {"max_steps": 10**30}, "max_steps", "must be <= 2147483647"),
        ("sft", {"seed": -1}, "seed", "must be >= 0, got -1"),
        ("sft", {"seed": 2**70}, "seed", "must be <= 9223372036854775807"),
        ("dpo", {"lr": float("inf")}, "lr", "must be a finite number, got inf"),
        ("dpo", {"beta": float("nan")}, "beta", "must be a finite number, got nan"),
        ("sft", {"lora_dropout": 1.0}, "lora_dropout", "must be in [0, 1)"),
        ("kto", {"undesirable_weight": -0.5}, "undesirable_weight", "must be >= 0, got -0.5"),
        ("kto", {"desirable_weight": 0.0, "undesirable_weight": 0.0}, "desirable_weight", "both 0: nothing to learn"),
        ("kto", {"batch_size": 4, "grad_accum_steps": 4}, "batch_size", "each micro-batch needs at least 2 rows"),
        ("ppo", {"ppo_epochs": 10**6}, "ppo_epochs", "must be <= 1024"),
        ("grpo", {"num_processes": 65}, "num_processes", "65 per node, more than 64"),
        ("grpo", {"temperature": 6.0}, "temperature", "must be <= 5, got 6.0"),
    ],
)
def test_out_of_bounds_numbers_name_the_field(kind, fields, field, words):
    error = _error(kind, **fields)
    assert error.field == field
    assert words in str(error)


def test_the_bounds_from_the_data_size_name_the_field():
    from trainer.config import check_data_size

    config = config_from_dict("sft", {**REQUIRED, "batch_size": 8})
    check_data_size(config, 8)
    with pytest.raises(ConfigError, match=r"^batch_size: 8 is more than the data's 7 rows"):
        check_data_size(config, 7)
    with pytest.raises(ConfigError, match=r"^batch_size: the data has no rows to train on"):
        check_data_size(config, 0)
    many_passes = config_from_dict("sft", {**REQUIRED, "batch_size": 1, "epochs": 10_000})
    with pytest.raises(ConfigError, match=r"^epochs: 10000 passes over 1000000 rows in batches of 1 are 10000000000 "):
        check_data_size(many_passes, 10**6)
