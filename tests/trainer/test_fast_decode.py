"""The lean decoder's logits equal the transformers forward's, fused or not, for each supported family."""

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from tests.trainer.tiny_decoders import make_matter, tiny_decoder
from trainer.decoding import fast_decode
from trainer.decoding.fast_decode import KVDecoder, folded_head, fused_projections, supports_fast_decode
from trainer.decoding.generation import position_ids_from_mask
from trainer.modeling.models import LoraOptions, load_policy, resolve_precision
from trainer.modeling.selective_forward import additive_mask


def _logits_step_by_step(model, prompt_ids, prompt_mask, continuation):
    """Decoder logits after the prompt and after each continuation token, as [steps + 1, N, V]."""
    count, width = prompt_ids.shape
    steps = continuation.shape[1]
    positions = position_ids_from_mask(prompt_mask)
    positions = torch.cat([positions, positions[:, -1:] + 1 + torch.arange(steps)], dim=1)
    decoder = KVDecoder(model, rows=count, capacity=width + steps, positions=positions)
    valid = torch.cat([prompt_mask.bool(), torch.ones(count, steps, dtype=torch.bool)], dim=1)
    allowed = (torch.ones(width, width, dtype=torch.bool).tril() & valid[:, None, :width]) | torch.eye(width, dtype=torch.bool)
    outputs = [decoder.forward(prompt_ids, additive_mask(allowed[:, None], torch.float32))]
    for step in range(steps):
        bias = additive_mask(valid[:, None, None, : width + step + 1], torch.float32)
        outputs.append(decoder.forward(continuation[:, step : step + 1], bias))
    return torch.stack(outputs)


def _transformers_logits(model, prompt_ids, prompt_mask, continuation):
    ids = torch.cat([prompt_ids, continuation], dim=1)
    mask = torch.cat([prompt_mask, torch.ones_like(continuation)], dim=1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
    return logits[:, prompt_ids.shape[1] - 1 :].transpose(0, 1)


def _check(model, vocab):
    torch.manual_seed(1)
    prompt_ids = torch.randint(3, vocab, (3, 7))
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[1, :3] = 0  # left padding of different widths
    prompt_mask[2, :1] = 0
    continuation = torch.randint(3, vocab, (3, 5))
    with torch.no_grad():
        actual = _logits_step_by_step(model, prompt_ids, prompt_mask, continuation)
        expected = _transformers_logits(model, prompt_ids, prompt_mask, continuation)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("config_class", "model_class", "fused"),
    [(LlamaConfig, LlamaForCausalLM, True), (Qwen2Config, Qwen2ForCausalLM, True), (Qwen3Config, Qwen3ForCausalLM, False)],
)
def test_logits_equal_the_transformers_forward(config_class, model_class, fused):
    model = tiny_decoder(config_class, model_class).eval()  # Qwen2's q, k and v biases included
    assert supports_fast_decode(model)
    assert (fused_projections(list(model.model.layers), 8) is not None) == fused
    _check(model, model.config.vocab_size)


def test_unfused_path_when_the_weights_are_too_large_to_copy(monkeypatch):
    model = tiny_decoder(LlamaConfig, LlamaForCausalLM).eval()
    monkeypatch.setattr(fast_decode, "FUSED_WEIGHTS_MAX_BYTES", 0)
    assert fused_projections(list(model.model.layers), 8) is None
    _check(model, model.config.vocab_size)


def test_lora_layers_decode_through_their_own_forward(tiny_model):
    model = load_policy(tiny_model, lora=LoraOptions(r=4, alpha=8, dropout=0.0, target_modules=("all-linear",)))
    make_matter(model, "lora_B", "norm.weight")
    model.eval()
    body = model.get_base_model().model
    assert supports_fast_decode(model) and fused_projections(list(body.layers), body.layers[0].self_attn.head_dim) is None
    _check(model, model.config.vocab_size)


def test_adapted_output_projections_and_head_keep_the_fused_path(tiny_model):
    """LoRA on o_proj, down_proj and the head only: q/k/v and gate/up stay fused with their norms folded in,
    the adapted layers and the final norm run through their own forwards."""
    lora = LoraOptions(r=4, alpha=8, dropout=0.0, target_modules=("o_proj", "down_proj", "lm_head"))
    model = load_policy(tiny_model, lora=lora)
    make_matter(model, "lora_B", "norm.weight")
    model.eval()
    body = model.get_base_model().model
    fused = fused_projections(list(body.layers), body.layers[0].self_attn.head_dim)
    assert fused is not None and all(layer.output is None and layer.down is None for layer in fused)
    assert folded_head(model.get_output_embeddings(), body.norm).matrix is None
    _check(model, model.config.vocab_size)


def test_a_head_too_large_to_copy_runs_its_own_forward(monkeypatch):
    model = tiny_decoder(LlamaConfig, LlamaForCausalLM, vocab_size=4000).eval()  # the head outweighs the layers' copies
    head = model.get_output_embeddings()
    monkeypatch.setattr(fast_decode, "FUSED_WEIGHTS_MAX_BYTES", head.weight.numel() * head.weight.element_size() - 1)
    assert fused_projections(list(model.model.layers), 8) is not None
    assert folded_head(head, model.model.norm).matrix is None
    _check(model, model.config.vocab_size)


@pytest.mark.parametrize(("heads", "kv_heads", "queries"), [(9, 3, 1), (9, 3, 6), (4, 4, 5)])
def test_grouped_attention_equals_sdpa(heads, kv_heads, queries):
    """The decoder's attention (two batched products over key heads) against the sdpa kernel with grouped keys,
    for one query (decoding), several (a prompt) and one key head per query head."""
    torch.manual_seed(0)
    rows, length, dim = 3, 11, 16
    query = torch.randn(rows, heads, queries, dim)
    key, value = torch.randn(rows, kv_heads, length, dim), torch.randn(rows, kv_heads, length, dim)
    allowed = torch.rand(rows, 1, queries, length) > 0.3
    allowed[..., -1] = True  # every query sees at least one key
    bias = additive_mask(allowed, torch.float32)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=bias, scale=0.3, enable_gqa=heads != kv_heads
    )
    torch.testing.assert_close(fast_decode.grouped_attention(query, key.transpose(-1, -2), value, bias, 0.3), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("rows", [1, 16, 65])
def test_the_decoding_product_equals_f_linear_with_and_without_bias(rows):
    from trainer.modeling import products

    torch.manual_seed(0)
    x, weight, bias = torch.randn(rows, 1, 48), torch.randn(40, 48), torch.randn(40)
    for b in (None, bias):
        got = products.linear(x, weight, b)
        assert got.shape == (rows, 1, 40)
        torch.testing.assert_close(got, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert products.linear(x, weight, bias).dtype == torch.bfloat16  # autocast's own product, not ours


def test_under_bf16_autocast_the_copies_are_bf16_and_as_close_to_fp32_as_the_transformers_autocast_forward(monkeypatch):
    """bf16-mixed sampling: fused bf16 copies even where float32 copies would exceed the cap (they stand in for
    the copies autocast itself would cache), and logits whose distance from the float32 forward is that of
    transformers' own forward under the same autocast (measured: 0.0008 against 0.0011 at most)."""
    model = tiny_decoder(LlamaConfig, LlamaForCausalLM).eval()
    monkeypatch.setattr(fast_decode, "FUSED_WEIGHTS_MAX_BYTES", 0)
    torch.manual_seed(1)
    prompt_ids = torch.randint(3, model.config.vocab_size, (3, 7))
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[1, :3] = 0
    continuation = torch.randint(3, model.config.vocab_size, (3, 5))
    with torch.no_grad():
        exact = _transformers_logits(model, prompt_ids, prompt_mask, continuation)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            dtype = fast_decode.sampling_dtype(torch.float32, torch.device("cpu"))
            fused = fused_projections(list(model.model.layers), 8, dtype)
            assert fused is not None and all(layer.gate_up.weight.dtype == torch.bfloat16 for layer in fused)
            ours = _logits_step_by_step(model, prompt_ids, prompt_mask, continuation).float()
            theirs = _transformers_logits(model, prompt_ids, prompt_mask, continuation).float()
    assert fused_projections(list(model.model.layers), 8) is None  # outside autocast the cap holds
    our_error, their_error = (ours - exact).abs().max().item(), (theirs - exact).abs().max().item()
    assert 0 < their_error < 0.1
    assert our_error <= 2 * their_error, (our_error, their_error)


@pytest.mark.parametrize("rows", [2, 16, 17])
def test_the_float32_head_of_bf16_mixed_samples_through_a_packed_float32_copy(tiny_model, rows):
    """Under bf16 autocast the head that bf16-mixed keeps in float32 (models.Float32Head) gets a float32 copy with
    the final norm folded in, packed by MKL for the decoding step's rows, and its logits equal the head's own
    forward to float32 rounding, at the packed row count and others (the prompts' prefill)."""
    model = load_policy(tiny_model, precision=resolve_precision("bf16-mixed", torch.device("cpu")))
    head, norm = model.get_output_embeddings(), model.model.norm
    assert getattr(head, "keeps_float32", False)
    make_matter(model, "norm.weight")
    torch.manual_seed(0)
    hidden = torch.randn(rows, norm.weight.shape[0])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        folded = folded_head(head, norm, torch.bfloat16, rows=16)
        ours, theirs = folded(hidden), head(fast_decode._rms_norm(hidden, norm))
    assert folded.matrix is not None and folded.matrix.weight.dtype == torch.float32
    assert (folded.matrix.packed is not None) == torch.backends.mkl.is_available()
    assert ours.dtype == theirs.dtype == torch.float32
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["onednn", "mkl"])
def test_the_float32_head_copies_multiply_as_the_head_does(kind):
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(300, 48, generator=generator), torch.randn(300, generator=generator)
    x = torch.randn(16, 48, generator=generator)
    matrix = (fast_decode.Matrix.onednn_float32(weight, bias) if kind == "onednn"
              else fast_decode.Matrix.packed_float32(weight, bias, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as under bf16-mixed: the copy stays float32
        product = matrix(x)
    assert product.dtype == torch.float32
    torch.testing.assert_close(product, F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)


def test_choosing_the_faster_float32_product_draws_no_random_number():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    fast_decode.Matrix.fastest_float32(torch.ones(64, 32), None, rows=4)
    assert torch.equal(torch.rand(3), expected)  # sampling after it draws what it would have drawn
    assert fast_decode._FASTEST_FLOAT32[((64, 32), 4)] in ("onednn", "mkl")


def test_copies_kept_between_calls_on_the_cpu_follow_the_weights_as_they_change():
    """On the CPU the decoder's copies live in buffers kept with the model from one sampling call to the next
    (fresh memory costs page faults); each call writes the current weights into them, so after an in-place
    update (an optimizer step) the logits are those of the updated model, fused and head alike."""
    model = tiny_decoder(LlamaConfig, LlamaForCausalLM).eval()
    positions = torch.arange(4)[None]
    first = KVDecoder(model, rows=1, capacity=4, positions=positions)
    _check(model, model.config.vocab_size)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.mul_(1.5 if "norm" in name else -1.0).add_(0.01)
    second = KVDecoder(model, rows=1, capacity=4, positions=positions)
    kept = [(a.attention.weight, b.attention.weight) for a, b in zip(first.fused, second.fused, strict=True)]
    kept.append((first.folded_head.matrix.weight, second.folded_head.matrix.weight))
    assert all(old.data_ptr() == new.data_ptr() for old, new in kept)
    _check(model, model.config.vocab_size)


@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])
def test_few_float32_rows_are_multiplied_the_way_the_cpus_vendor_streams_faster(vendor, tmp_path, monkeypatch):
    """Float32 decoding products run as weight @ x^T except on Intel CPUs, where MKL's tuned kernels make the plain
    x @ weight^T the faster (measured on both: products.py); bf16 products are weight-first everywhere on the CPU.
    Both ways give F.linear's numbers (test above)."""
    from trainer.modeling import products

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\nmodel name\t: a CPU\n")
    assert products.cpu_vendor(cpuinfo) == vendor
    assert products.cpu_vendor(tmp_path / "absent") == ""
    monkeypatch.setattr(products, "cpu_vendor", lambda: vendor)
    products.weight_first_float32.cache_clear()
    try:
        x, weight = torch.randn(16, 48), torch.randn(40, 48)
        assert products.weight_first(x, weight) == (vendor != "GenuineIntel")
        assert products.weight_first(x.bfloat16(), weight.bfloat16())
        assert not products.weight_first(torch.randn(65, 48), weight)  # a prompt's many rows: always plain
        torch.testing.assert_close(products.linear(x, weight, None), F.linear(x, weight), rtol=1e-5, atol=1e-5)
    finally:
        products.weight_first_float32.cache_clear()


def test_a_plain_float32_copy_multiplies_in_float32_under_autocast():
    """The float32 head's copy where neither MKL nor oneDNN holds it (a GPU): autocast would run its product in bf16."""
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(300, 48, generator=generator), torch.randn(300, generator=generator)
    x = torch.randn(16, 48, generator=generator)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        product = fast_decode.Matrix(weight, bias)(x)
    assert product.dtype == torch.float32
    torch.testing.assert_close(product, F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
