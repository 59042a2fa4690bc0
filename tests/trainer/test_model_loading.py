import time

import pytest

from trainer.modeling import models
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


def test_an_unreachable_hub_is_said_and_not_retried(monkeypatch):
    """With the hub out of reach (HF_HUB_OFFLINE here; a host name that does not resolve on a machine without a
    network), an id not in the local cache is refused at once, saying why, not after huggingface_hub's retries."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=r"cannot load the tokenizer from 'preflab-none/no-such-model': the model "
                       r"hub cannot be reached \(HF_HUB_OFFLINE is set\) and .* not in the local hub cache"):
        load_tokenizer("preflab-none/no-such-model")


def test_the_hub_check_names_a_host_that_does_not_resolve(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://preflab-no-such-host.invalid")
    monkeypatch.setattr(models, "_hub_checked", None)
    assert models.hub_unreachable().startswith("preflab-no-such-host.invalid does not resolve")
    monkeypatch.setattr(models, "_hub_checked", None)


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
