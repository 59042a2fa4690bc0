"""The static decoding (trainer.decoding.static_decode: a static KV cache, the step a function of fixed tensors, captured as a
CUDA graph on a GPU) draws what the eager decoder draws. On the CPU its step runs eagerly, so these tests check what
a captured graph replays: the step's arithmetic, its cache slots and masks, its in-graph draw, the bucketed shapes
reused from call to call, and the copies of the weights written again in place after every update."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from tests.trainer.tiny_decoders import tiny_decoder
from trainer.builtin_datasets.arithmetic import build_tiny_model
from trainer.decoding import static_decode
from trainer.decoding.generation import HFGenerationBackend, SamplingParams
from trainer.modeling.models import LoraOptions, load_policy, load_tokenizer, resolve_precision

PROMPTS = ["Calculate 2 + 2 * 6\n", "Calculate 7 + 1\n", "Calculate 13 - 4 * 2 + 19\n"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("static-decode-model"))


def _both(model, tokenizer, prompts, params, *, seeds=None, torch_seed=0):
    """(eager, static) samples of the same call."""
    outputs = []
    for decoding in ("eager", "static"):
        torch.manual_seed(torch_seed)
        backend = HFGenerationBackend(model, tokenizer, decoding=decoding)
        assert backend._static == (decoding == "static")
        outputs.append(backend.generate(prompts, params, seeds=seeds))
    return outputs


def _assert_same(eager, static, *, atol=1e-5):
    assert torch.equal(static.completion_ids, eager.completion_ids)
    assert torch.equal(static.completion_mask, eager.completion_mask)
    assert torch.equal(static.truncated, eager.truncated)
    torch.testing.assert_close(static.logprobs, eager.logprobs, atol=atol, rtol=atol)
    assert static.texts == eager.texts


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(group_size=4, max_new_tokens=24, temperature=1.0),
        SamplingParams(group_size=1, max_new_tokens=16, temperature=0),
        SamplingParams(group_size=3, max_new_tokens=20, temperature=0.7, top_k=5, top_p=0.9),
        SamplingParams(group_size=2, max_new_tokens=12, temperature=1.0, min_new_tokens=12),
    ],
    ids=["sampled", "greedy", "top-k-top-p", "min-new-tokens"],
)
def test_the_static_step_draws_the_tokens_of_the_eager_decoder(model_dir, params):
    model = load_policy(str(model_dir), device=torch.device("cpu"))
    tokenizer = load_tokenizer(str(model_dir))
    eager, static = _both(model, tokenizer, PROMPTS, params, seeds=[11, 12, 13])
    _assert_same(eager, static)
    if params.min_new_tokens:
        assert eager.completion_mask.sum(dim=1).min() == params.min_new_tokens


def test_end_tokens_end_rows_and_the_batch_where_the_eager_decoder_ends_them(model_dir):
    """Unseeded draws come from torch's generator, made before the first token in both decoders; rows end at their
    first end token, and the batch stops where the eager one stops, though the static decoding only reads now and
    then whether every row has ended."""
    model = load_policy(str(model_dir), device=torch.device("cpu"))
    tokenizer = load_tokenizer(str(model_dir))
    params = SamplingParams(group_size=6, max_new_tokens=60, temperature=1.3)
    eager, static = _both(model, tokenizer, PROMPTS, params, torch_seed=5)
    _assert_same(eager, static)
    lengths = eager.completion_mask.sum(dim=1)
    assert (~eager.truncated).any() and lengths.min() < lengths.max()  # some rows ended, at different lengths


def test_a_bucket_serves_later_calls_and_follows_the_weights_after_an_update(model_dir, monkeypatch):
    """Calls of other prompts and sizes that fall into one bucket reuse its state (on a GPU: its graph); the step
    reads the copies of the weights written at each call, so after an in-place update (an optimizer step) it
    samples from the updated weights."""
    model = load_policy(str(model_dir), device=torch.device("cpu"))
    tokenizer = load_tokenizer(str(model_dir))
    decoder = static_decode.static_decoder(model)
    params = SamplingParams(group_size=3, max_new_tokens=10, temperature=1.0)
    _assert_same(*_both(model, tokenizer, PROMPTS, params, seeds=[1, 2, 3]))
    assert len(decoder.states) == 1
    state = next(iter(decoder.states.values()))
    assert state.rows == 16 and state.slots == 64  # 9 rows up to 16; prompt + 10 tokens up to 64 slots
    other = SamplingParams(group_size=5, max_new_tokens=12, temperature=1.0)  # 15 rows: the same bucket
    _assert_same(*_both(model, tokenizer, [PROMPTS[2], PROMPTS[0], "Calculate 5 * 5\n"], other, seeds=[4, 5, 6]))
    assert list(decoder.states.values()) == [state]
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(-1.0).add_(0.01)
    _assert_same(*_both(model, tokenizer, PROMPTS, params, seeds=[1, 2, 3]))
    assert static_decode.static_decoder(model) is decoder


def test_buckets_beyond_the_limit_drop_the_oldest(model_dir, monkeypatch):
    monkeypatch.setattr(static_decode, "MAX_BUCKETS", 2)
    model = load_policy(str(model_dir), device=torch.device("cpu"))
    backend = HFGenerationBackend(model, load_tokenizer(str(model_dir)), decoding="static")
    for group in (1, 9, 17):
        backend.generate(PROMPTS[:1], SamplingParams(group_size=group, max_new_tokens=4, temperature=0))
    assert list(static_decode.static_decoder(model).states) == [(16, 64), (24, 64)]


@pytest.mark.parametrize(("config_class", "model_class"), [(LlamaConfig, LlamaForCausalLM), (Qwen2Config, Qwen2ForCausalLM)])
def test_models_with_biases_and_grouped_heads_decode_alike(config_class, model_class, model_dir):
    """Qwen2's q/k/v biases are copied into kept buffers too (a captured step reads them there)."""
    model = tiny_decoder(config_class, model_class, vocab_size=load_tokenizer(str(model_dir)).vocab_size).eval()
    tokenizer = load_tokenizer(str(model_dir))
    params = SamplingParams(group_size=2, max_new_tokens=12, temperature=1.0)
    _assert_same(*_both(model, tokenizer, PROMPTS, params, seeds=[7, 8, 9]))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "bias" in name:
                parameter.add_(0.3)
    _assert_same(*_both(model, tokenizer, PROMPTS, params, seeds=[7, 8, 9]))


def test_lora_layers_decode_through_their_own_forward(model_dir):
    """A LoRA policy has no fused copies: the step runs its layers' own forwards, which read the adapters in place."""
    policy = load_policy(str(model_dir), lora=LoraOptions(r=4, alpha=8, dropout=0.0, target_modules=("all-linear",)), device=torch.device("cpu"))
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.3)
    tokenizer = load_tokenizer(str(model_dir))
    params = SamplingParams(group_size=2, max_new_tokens=10, temperature=1.0)
    eager, static = _both(policy, tokenizer, PROMPTS, params, seeds=[3, 4, 5])
    _assert_same(eager, static)


def test_under_bf16_mixed_the_static_step_draws_what_the_eager_decoder_draws(model_dir):
    """bf16 copies and cache, the float32 head, as bf16-mixed samples (both decoders under the same autocast)."""
    model = load_policy(str(model_dir), precision=resolve_precision("bf16-mixed", torch.device("cpu")))
    tokenizer = load_tokenizer(str(model_dir))
    params = SamplingParams(group_size=4, max_new_tokens=16, temperature=1.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager, static = _both(model, tokenizer, PROMPTS, params, seeds=[1, 2, 3])
    state = next(iter(static_decode.static_decoder(model).states.values()))
    assert state.keys[0].dtype == torch.bfloat16
    _assert_same(eager, static, atol=1e-3)


def test_auto_decodes_statically_only_on_a_gpu(model_dir):
    model = load_policy(str(model_dir), device=torch.device("cpu"))
    tokenizer = load_tokenizer(str(model_dir))
    assert not HFGenerationBackend(model, tokenizer)._static
    assert HFGenerationBackend(model, tokenizer, decoding="static")._static
    assert not HFGenerationBackend(model, tokenizer, decoding="static", fast_decode=False)._static
    with pytest.raises(ValueError, match="decoding must be one of auto, eager, static"):
        HFGenerationBackend(model, tokenizer, decoding="graph")
    assert static_decode.static_decoder(model).capture is False  # capture needs CUDA


def test_a_grpo_run_samples_through_the_static_decoder_as_through_the_eager_one(tiny_model, tmp_path):
    """A whole GRPO run (its sampling every step, its updates, its evaluation) gives the same numbers whichever
    decoder samples."""
    from trainer.algorithms.grpo import train
    from trainer.builtin_datasets import arithmetic
    from trainer.kinds import config_from_dict
    from trainer.sink import MemorySink

    sinks = {}
    for decoding in ("eager", "static"):
        config = config_from_dict("grpo", {
            "model": tiny_model, "output_dir": str(tmp_path / decoding), "lr": 1e-3, "max_steps": 3, "batch_size": 2,
            "group_size": 4, "max_new_tokens": 8, "max_length": 40, "max_prompt_length": 24, "decoding": decoding,
            "rewards": {"answer_match": 1.0, "format_tags": 0.5},
        })
        sinks[decoding] = MemorySink()
        train(config, arithmetic.sft_rows(1, "train", 12), sinks[decoding], eval_data=arithmetic.sft_rows(1, "test", 4))
    eager, static = sinks["eager"], sinks["static"]
    for step in (1, 2, 3):
        for name in ("loss", "reward/mean", "completion/mean_length", "kl", "eval/accuracy"):
            if name in eager.metrics[step]:
                assert static.metrics[step][name] == pytest.approx(eager.metrics[step][name], rel=1e-5, abs=1e-7), (step, name)
