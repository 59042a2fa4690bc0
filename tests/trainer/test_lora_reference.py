"""With LoRA, the reference is the policy with its adapters disabled: one copy of the base weights, and
reference log-probs equal to those of the base model loaded on its own, to 1e-5 per token (measured: 0.0, the
same weights through the same kernels; a disabled LoRA layer calls only its base layer)."""

import shutil

import pytest
import torch

from trainer.algorithms.logprobs import completion_logprobs
from trainer.builtin_datasets import arithmetic
from trainer.decoding.generation import HFGenerationBackend, SamplingParams
from trainer.kinds import config_from_dict
from trainer.modeling.models import (
    LoraOptions,
    live_model_parameter_bytes,
    load_policy,
    load_reference,
    load_reference_for,
    load_tokenizer,
)
from trainer.sink import MemorySink

CPU = torch.device("cpu")
LORA = LoraOptions(r=4, alpha=8, dropout=0.0, target_modules=("all-linear",))
TOLERANCE = 1e-5


def _trained_adapters(policy) -> None:
    """Adapters that change the outputs (a fresh LoRA B is 0, which would make any reference look right)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)


def _samples(model_dir: str, policy):
    torch.manual_seed(0)
    backend = HFGenerationBackend(policy, load_tokenizer(model_dir))
    prompts = [p.prompt for p in arithmetic.problems(2, "test", 3)]
    return backend.generate(prompts, SamplingParams(group_size=4, max_new_tokens=12))


@pytest.mark.parametrize("share_prompt", [True, False])
def test_reference_logprobs_of_a_lora_policy_equal_the_base_models(tiny_model, share_prompt):
    policy = load_policy(tiny_model, device=CPU, lora=LORA)
    _trained_adapters(policy)
    reference = load_reference_for(tiny_model, policy)
    assert reference.model is policy and reference.adapters_off
    samples = _samples(tiny_model, policy)
    with torch.no_grad():
        with reference.active() as model:
            from_policy, _ = completion_logprobs(model, samples, temperature=1.0, share_prompt=share_prompt)
        base, _ = completion_logprobs(load_reference(tiny_model, device=CPU), samples, temperature=1.0,
                                      share_prompt=share_prompt)
        adapted, _ = completion_logprobs(policy, samples, temperature=1.0, share_prompt=share_prompt)
    assert (from_policy - base).abs().max().item() <= TOLERANCE
    # the adapters matter, and they are back on (in train mode) once the reference forward is done
    assert (adapted - base).abs().max().item() > 0.1
    assert all(module.training for module in policy.modules())


def test_a_separate_reference_model_is_loaded_on_its_own(tiny_model, tmp_path):
    copy = shutil.copytree(tiny_model, tmp_path / "reference")
    policy = load_policy(tiny_model, device=CPU, lora=LORA)
    reference = load_reference_for(str(copy), policy)
    assert reference.model is not policy and not reference.adapters_off
    # without LoRA there are no adapters to disable: the reference is always a frozen copy
    plain = load_policy(tiny_model, device=CPU)
    assert load_reference_for(tiny_model, plain).model is not plain


class ParameterBytesSink(MemorySink):
    """A MemorySink that also measures, at every logged step, the parameter bytes every live model holds."""

    def __init__(self) -> None:
        super().__init__()
        self.parameter_bytes: list[int] = []

    def log(self, step, metrics, *, tokens_seen):
        super().log(step, metrics, tokens_seen=tokens_seen)
        self.parameter_bytes.append(live_model_parameter_bytes())


def _lora_run(kind: str, model_dir: str, output_dir, **fields) -> ParameterBytesSink:
    from trainer.kinds import run_kind

    settings = {"grpo": {"batch_size": 2, "group_size": 2, "max_new_tokens": 6, "max_length": 40, "beta": 0.04},
                "dpo": {"batch_size": 2, "max_length": 64, "max_prompt_length": 24, "precompute_ref_logps": False}}
    config = config_from_dict(
        kind, {"model": model_dir, "output_dir": str(output_dir), "max_steps": 1, "use_lora": True,
               "lora_r": 4, "lora_alpha": 8, **settings[kind], **fields},
    )
    sink = ParameterBytesSink()
    run_kind(kind).train_function()(config, arithmetic.rows_for_kind(kind, 1, "train", 4), sink)
    return sink


@pytest.mark.parametrize("kind", ["grpo", "dpo"])
def test_a_lora_run_holds_one_copy_of_the_base_weights(kind, tiny_model, tmp_path):
    base_bytes = sum(p.numel() * p.element_size() for p in load_reference(tiny_model, device=CPU).parameters())
    already_alive = live_model_parameter_bytes()  # models other tests left behind, if any
    own = _lora_run(kind, tiny_model, tmp_path / "own")
    # the same run with its reference in another directory has to load a second copy: what used to happen
    copy = shutil.copytree(tiny_model, tmp_path / "reference-copy")
    separate = _lora_run(kind, tiny_model, tmp_path / "separate", reference_model=str(copy))
    adapters = own.parameter_bytes[0] - already_alive - base_bytes
    assert 0 < adapters < base_bytes / 4
    assert separate.parameter_bytes[0] == own.parameter_bytes[0] + base_bytes
