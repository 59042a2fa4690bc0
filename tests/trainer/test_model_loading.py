import time

import pytest

from trainer.modeling.models import (
    ModelLoadError,
    load_policy,
    load_reference,
    load_reward_model,
    load_tokenizer,
)


def test_missing_directory_names_the_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ModelLoadError, match=f"model directory {missing} does not exist"):
        load_policy(str(missing))


def test_directory_without_a_model_says_config_json_is_missing(tmp_path):
    with pytest.raises(ModelLoadError, match=r"holds no model: config.json is missing"):
        load_reward_model(str(tmp_path), pad_token_id=0)


def test_unknown_hub_id_fails_quickly_and_clearly_offline():
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match=r"cannot load the tokenizer from 'preflab-none/no-such-model'"):
        load_tokenizer("preflab-none/no-such-model")
    # a bound against hub retry loops (minutes), not a speed figure: loaded CI machines take tens of seconds
    assert time.perf_counter() - started < 120


def test_loaders_give_the_right_heads_and_modes(tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    assert tokenizer.pad_token_id is not None and tokenizer.padding_side == "left"
    reference = load_reference(tiny_model)
    assert not reference.training
    assert not any(p.requires_grad for p in reference.parameters())
    reward_model = load_reward_model(tiny_model, pad_token_id=tokenizer.pad_token_id)
    assert reward_model.config.num_labels == 1 and reward_model.config.pad_token_id == tokenizer.pad_token_id
    scores = reward_model(**tokenizer(["Calculate 1 + 1\n"], return_tensors="pt")).logits
    assert scores.shape == (1, 1)
    assert load_policy(tiny_model).training


def test_lora_trains_only_adapters(tiny_model):
    from trainer.modeling.models import LoraOptions

    model = load_policy(tiny_model, lora=LoraOptions(r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "v_proj")))
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
