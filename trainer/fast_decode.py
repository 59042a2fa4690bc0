"""A lean forward for sampling from Llama-family decoders: a preallocated KV cache and few ops per token.

Sampling a few dozen tokens from a small policy is bound by per-call overhead, not arithmetic: the generic
transformers forward rebuilds masks, rotary tables and cache bookkeeping on every token. This runs the
same modules (so LoRA layers and any dtype work as they are) through a minimal path: rotary tables built
once per call, keys and values written in place into a cache sized for prompt + max_new_tokens, and one
attention call per layer. Its logits equal the transformers forward's to float rounding (tested).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel

from trainer.selective_forward import supports_selective_forward, unwrapped


def supports_fast_decode(model: PreTrainedModel) -> bool:
    if not supports_selective_forward(model):
        return False
    body = unwrapped(model).base_model
    if not all(all(hasattr(layer.mlp, name) for name in ("gate_proj", "up_proj", "down_proj", "act_fn")) for layer in body.layers):
        return False
    norms = [body.norm, *(module for layer in body.layers for module in (layer.input_layernorm, layer.post_attention_layernorm))]
    return all(_is_plain_rms_norm(norm) for norm in norms)


def _is_plain_rms_norm(norm: nn.Module) -> bool:
    """weight * x / rms(x): the Llama / Qwen RMSNorm (not Gemma's 1 + weight)."""
    return type(norm).__name__.endswith("RMSNorm") and hasattr(norm, "variance_epsilon") and not hasattr(norm, "with_scale")


class KVDecoder:
    """Prefill once, then one token per call, for `rows` sequences of at most `capacity` positions."""

    def __init__(self, model: PreTrainedModel, *, rows: int, capacity: int, positions: Tensor) -> None:
        """positions [rows, capacity]: the rotary position of every cache slot of every row."""
        inner = unwrapped(model)
        self.body = inner.base_model
        self.head = inner.get_output_embeddings()
        self.layers = list(self.body.layers[: self.body.config.num_hidden_layers])
        first = self.layers[0].self_attn
        self.head_dim = first.head_dim
        self.kv_heads = first.k_proj.out_features // self.head_dim
        dtype, device = self.body.embed_tokens.weight.dtype, positions.device
        shape = (rows, self.kv_heads, capacity, self.head_dim)
        self.keys = [torch.empty(shape, dtype=dtype, device=device) for _ in self.layers]
        self.values = [torch.empty(shape, dtype=dtype, device=device) for _ in self.layers]
        probe = torch.empty(0, dtype=dtype, device=device)
        self.cos, self.sin = self.body.rotary_emb(probe, position_ids=positions)  # [rows, capacity, D]
        self.length = 0

    def repeat_rows(self, times: int) -> None:
        """Each row becomes `times` consecutive rows (a prompt's cache shared by its group)."""
        self.keys = [k.repeat_interleave(times, dim=0) for k in self.keys]
        self.values = [v.repeat_interleave(times, dim=0) for v in self.values]
        self.cos, self.sin = self.cos.repeat_interleave(times, dim=0), self.sin.repeat_interleave(times, dim=0)

    def forward(self, input_ids: Tensor, key_bias: Tensor) -> Tensor:
        """Logits [rows, V] after input_ids [rows, q] (written at the next q slots).

        key_bias [rows, 1, q, length + q]: 0 where a query may attend a slot, very negative elsewhere.
        """
        start, count = self.length, input_ids.shape[1]
        end = start + count
        cos, sin = self.cos[:, None, start:end], self.sin[:, None, start:end]
        hidden = self.body.embed_tokens(input_ids)
        for layer, keys, values in zip(self.layers, self.keys, self.values, strict=True):
            attention = layer.self_attn
            normed = _rms_norm(hidden, layer.input_layernorm)
            query = _linear(attention.q_proj, normed).unflatten(-1, (-1, self.head_dim))
            key = _linear(attention.k_proj, normed).unflatten(-1, (-1, self.head_dim))
            if hasattr(attention, "q_norm"):  # Qwen3 normalises each head before the rotation
                query, key = attention.q_norm(query), attention.k_norm(key)
            heads = query.shape[2]
            # queries and keys rotate together: one rotation per layer instead of two
            rotated = _rotate(torch.cat([query, key], dim=2).transpose(1, 2), cos, sin)
            keys[:, :, start:end] = rotated[:, heads:]
            values[:, :, start:end] = _linear(attention.v_proj, normed).unflatten(-1, (-1, self.head_dim)).transpose(1, 2)
            attended = F.scaled_dot_product_attention(
                rotated[:, :heads],
                keys[:, :, :end],
                values[:, :, :end],
                attn_mask=key_bias,
                scale=attention.scaling,
                enable_gqa=heads != self.kv_heads,
            )
            hidden = hidden + _linear(attention.o_proj, attended.transpose(1, 2).flatten(2))
            hidden = hidden + _mlp(layer.mlp, _rms_norm(hidden, layer.post_attention_layernorm))
        self.length = end
        return self.head(_rms_norm(hidden[:, -1], self.body.norm))


def _rms_norm(hidden: Tensor, norm: nn.Module) -> Tensor:
    if hidden.dtype == torch.float32:
        return F.rms_norm(hidden, (hidden.shape[-1],), norm.weight, eps=norm.variance_epsilon)
    # computed in float32 and cast back before the weight, as the transformers RMSNorm does
    normed = F.rms_norm(hidden.float(), (hidden.shape[-1],), eps=norm.variance_epsilon)
    return norm.weight * normed.to(hidden.dtype)


def _linear(module: nn.Module, x: Tensor) -> Tensor:
    # a plain Linear is called as a function (module dispatch costs more than the product here);
    # anything else (LoRA, quantised layers) through its own forward
    if type(module) is nn.Linear:
        return F.linear(x, module.weight, module.bias)
    return module(x)


def _mlp(mlp: nn.Module, x: Tensor) -> Tensor:
    """The gated MLP: down(act(gate(x)) * up(x))."""
    return _linear(mlp.down_proj, mlp.act_fn(_linear(mlp.gate_proj, x)) * _linear(mlp.up_proj, x))


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding, half-rotation convention; x [N, heads, q, D], cos/sin [N, 1, q, D]."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
