"""A lean forward for sampling from Llama-family decoders: a preallocated KV cache and few ops per token.

Sampling a few dozen tokens from a small policy is bound by per-call overhead, not arithmetic: the generic
transformers forward rebuilds masks, rotary tables and cache bookkeeping on every token. This runs the
same modules (so LoRA layers and any dtype work as they are) through a minimal path: rotary tables built
once per call, keys and values written in place into a cache sized for prompt + max_new_tokens, and one
attention call per layer. Its logits equal the transformers forward's to float rounding (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel

from trainer.selective_forward import rotary, supports_selective_forward, unwrapped


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
        self.fused = fused_projections(self.layers, self.head_dim)

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
        if self.fused is not None:
            cos, sin = self.cos[:, start:end, None], self.sin[:, start:end, None]
        else:
            cos, sin = self.cos[:, None, start:end], self.sin[:, None, start:end]
        hidden = self.body.embed_tokens(input_ids)
        for index, (layer, keys, values) in enumerate(zip(self.layers, self.keys, self.values, strict=True)):
            attention = layer.self_attn
            normed = _rms_norm(hidden, layer.input_layernorm)
            if self.fused is not None:
                rotated, value = self.fused[index].queries_keys_values(normed, cos, sin)
            else:
                rotated, value = self._queries_keys_values(attention, normed, cos, sin)
            heads = rotated.shape[1] - self.kv_heads
            keys[:, :, start:end] = rotated[:, heads:]
            values[:, :, start:end] = value
            attended = F.scaled_dot_product_attention(
                rotated[:, :heads],
                keys[:, :, :end],
                values[:, :, :end],
                attn_mask=key_bias,
                scale=attention.scaling,
                enable_gqa=heads != self.kv_heads,
            )
            hidden = hidden + _linear(attention.o_proj, attended.transpose(1, 2).flatten(2))
            normed = _rms_norm(hidden, layer.post_attention_layernorm)
            mlp_out = self.fused[index].mlp(layer.mlp, normed) if self.fused is not None else _mlp(layer.mlp, normed)
            hidden = hidden + mlp_out
        self.length = end
        return _linear(self.head, _rms_norm(hidden[:, -1], self.body.norm))


    def _queries_keys_values(self, attention: nn.Module, normed: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """(rotated queries and keys [N, heads + kv_heads, q, D], values [N, kv_heads, q, D])."""
        query = _linear(attention.q_proj, normed).unflatten(-1, (-1, self.head_dim))
        key = _linear(attention.k_proj, normed).unflatten(-1, (-1, self.head_dim))
        if hasattr(attention, "q_norm"):  # Qwen3 normalises each head before the rotation
            query, key = attention.q_norm(query), attention.k_norm(key)
        # queries and keys rotate together: one rotation per layer instead of two
        rotated = rotary(torch.cat([query, key], dim=2).transpose(1, 2), cos, sin)
        value = _linear(attention.v_proj, normed).unflatten(-1, (-1, self.head_dim)).transpose(1, 2)
        return rotated, value


# Fusing copies the projection weights once per sampling call; worth it only while the matrices are small
# (per-call overhead dominates), and never at the price of a large second copy of the model.
FUSED_WEIGHTS_MAX_BYTES = 256 * 2**20


@dataclass(frozen=True)
class FusedLayer:
    """One layer's projections as two matrices: [q, k, rotate_half(q), rotate_half(k), v] and [gate, up].

    rotate_half is linear in the weights' rows, so the rotary embedding becomes q*cos + q_rot*sin with both
    terms from the same product.
    """

    attention_weight: Tensor
    attention_bias: Tensor | None
    gate_up_weight: Tensor
    gate_up_bias: Tensor | None
    query_key_width: int
    head_dim: int

    def queries_keys_values(self, normed: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """cos, sin [N, q, 1, D]; returns as KVDecoder._queries_keys_values."""
        projected = F.linear(normed, self.attention_weight, self.attention_bias)
        width, head_dim = self.query_key_width, self.head_dim
        query_key = projected[..., :width].unflatten(-1, (-1, head_dim))
        query_key_rotated_half = projected[..., width : 2 * width].unflatten(-1, (-1, head_dim))
        value = projected[..., 2 * width :].unflatten(-1, (-1, head_dim))
        rotated = query_key * cos + query_key_rotated_half * sin
        return rotated.transpose(1, 2), value.transpose(1, 2)

    def mlp(self, mlp: nn.Module, x: Tensor) -> Tensor:
        gate, up = F.linear(x, self.gate_up_weight, self.gate_up_bias).chunk(2, dim=-1)
        return _linear(mlp.down_proj, _activation(mlp.act_fn, gate) * up)


def fused_projections(layers: list[nn.Module], head_dim: int) -> list[FusedLayer] | None:
    """Fused weights for every layer, or None when a projection is not a plain Linear (LoRA, quantised),
    the model normalises heads before the rotation (Qwen3), or the copies would be too large."""
    projections = [
        (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj)
        for layer in layers
    ]
    if any(hasattr(layer.self_attn, "q_norm") for layer in layers):
        return None
    if not all(type(module) is nn.Linear for group in projections for module in group):
        return None
    def nbytes(module: nn.Linear) -> int:
        return module.weight.numel() * module.weight.element_size()

    # every projection once, and the query and key rows a second time (rotated)
    copied = sum(nbytes(module) for group in projections for module in group)
    copied += sum(nbytes(query) + nbytes(key) for query, key, *_ in projections)
    if copied > FUSED_WEIGHTS_MAX_BYTES:
        return None
    return [_fuse_layer(*group, head_dim=head_dim) for group in projections]


def _fuse_layer(q: nn.Linear, k: nn.Linear, v: nn.Linear, gate: nn.Linear, up: nn.Linear, *, head_dim: int) -> FusedLayer:
    def rotated_half(weight: Tensor) -> Tensor:
        heads = weight.unflatten(0, (-1, head_dim))
        half = head_dim // 2
        return torch.cat([-heads[:, half:], heads[:, :half]], dim=1).flatten(0, 1)

    def joined(parts: list[Tensor | None]) -> Tensor | None:
        return None if any(part is None for part in parts) else torch.cat(parts).detach()

    query_key_weight = torch.cat([q.weight, k.weight])
    query_key_bias = joined([q.bias, k.bias])
    return FusedLayer(
        attention_weight=torch.cat([query_key_weight, rotated_half(query_key_weight), v.weight]).detach(),
        attention_bias=None
        if query_key_bias is None or v.bias is None
        else torch.cat([query_key_bias, rotated_half(query_key_bias[:, None])[:, 0], v.bias]).detach(),
        gate_up_weight=torch.cat([gate.weight, up.weight]).detach(),
        gate_up_bias=joined([gate.bias, up.bias]),
        query_key_width=query_key_weight.shape[0],
        head_dim=head_dim,
    )


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
    return _linear(mlp.down_proj, _activation(mlp.act_fn, _linear(mlp.gate_proj, x)) * _linear(mlp.up_proj, x))


SILU_ACTIVATIONS = frozenset({"SiLU", "SiLUActivation"})


def _activation(act_fn: nn.Module, x: Tensor) -> Tensor:
    # SiLU (Llama, Qwen) as a function call, for the same reason as _linear
    if type(act_fn).__name__ in SILU_ACTIVATIONS:
        return F.silu(x)
    return act_fn(x)
