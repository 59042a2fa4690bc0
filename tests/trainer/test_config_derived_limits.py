"""Limits left empty follow the ones they depend on (max_prompt_length, overlong_buffer), in the form, the
run files and the CLI alike, because the trainer's config derives them."""

import pytest

from trainer.config import ConfigError, GRPOConfig, config_to_dict
from trainer.kinds import config_from_dict

REQUIRED = {"model": "models/tiny", "output_dir": "runs/1"}


def test_a_short_max_length_alone_is_valid_and_the_prompt_limit_follows_it():
    sft = config_from_dict("sft", {**REQUIRED, "max_length": 64})
    assert sft.max_prompt_length == 32
    grpo = config_from_dict("grpo", {**REQUIRED, "max_length": 64, "max_new_tokens": 28})
    assert (grpo.max_prompt_length, grpo.overlong_buffer) == (36, 7)
    # the defaults of before are what the derivation gives for the default limits
    default = config_from_dict("grpo", REQUIRED)
    assert (default.max_length, default.max_new_tokens, default.max_prompt_length, default.overlong_buffer) == (
        512, 256, 256, 64)


def test_the_dapo_preset_with_few_new_tokens_gets_an_overlong_buffer_that_fits():
    config = config_from_dict("grpo", {**REQUIRED, "preset": "dapo", "max_length": 64, "max_new_tokens": 28})
    assert "soft_overlong" in config.rewards and config.overlong_buffer == 7


def test_values_given_are_kept_and_still_checked():
    config = config_from_dict("grpo", {**REQUIRED, "max_length": 64, "max_new_tokens": 28, "max_prompt_length": 20,
                                       "overlong_buffer": 10})
    assert (config.max_prompt_length, config.overlong_buffer) == (20, 10)
    with pytest.raises(ConfigError, match="exceeds max_length"):
        config_from_dict("grpo", {**REQUIRED, "max_length": 64, "max_new_tokens": 28, "max_prompt_length": 40})


def test_no_room_for_a_prompt_names_max_new_tokens():
    with pytest.raises(ConfigError) as caught:
        config_from_dict("ppo", {**REQUIRED, "max_length": 64, "max_new_tokens": 64})
    assert caught.value.field == "max_new_tokens"
    assert "smaller than max_length=64" in str(caught.value)


def test_a_wrong_type_is_named_not_a_crash():
    with pytest.raises(ConfigError) as caught:
        config_from_dict("grpo", {**REQUIRED, "max_length": "64"})
    assert caught.value.field == "max_length"


def test_the_derived_values_are_written_out_and_read_back_unchanged():
    config = GRPOConfig(**REQUIRED, max_length=64, max_new_tokens=28)
    written = config_to_dict(config)
    assert (written["max_prompt_length"], written["overlong_buffer"]) == (36, 7)
    assert config_from_dict("grpo", written) == config
