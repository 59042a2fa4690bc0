"""Final hidden states at the positions a loss reads, without computing the last layer anywhere else.

A reward model reads one position per sequence; DPO and the RL losses read the completion positions,
never the prompt's. Every layer but the last must run everywhere (later positions attend to them), but
the last layer's keys and values are all that other positions need from it: its queries, attention
output, MLP and the final norm are only needed where the loss reads. Computing them there alone gives
the same numbers as the full forward (tested to 1e-5) for (1 - read/all) of the last layer's work.

Supported: the Llama family of decoders (Llama, Qwen2, Qwen3: pre-norm, rotary half-rotation, a
gated MLP; Qwen3's per-head q/k norms included); callers keep the plain transformers forward for others.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel

SELECTIVE_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3"})


def unwrapped(model: PreTrainedModel) -> PreTrainedModel:
    """The transformers model inside a peft wrapper (LoRA layers stay injected in it)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports_selective_forward(model: PreTrainedModel) -> bool:
    inner = unwrapped(model)
    config = inner.config
    if config.model_type not in SELECTIVE_MODEL_TYPES or getattr(config, "use_sliding_window", False):
        return False
    body = inner.base_model
    return all(hasattr(body, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb"))


def additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where attention is allowed, the dtype's most negative value elsewhere (sdpa and eager both add it)."""
    bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return bias.masked_fill_(~allowed, torch.finfo(dtype).min)


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions that skip left padding, as transformers' generate computes them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def padded_causal_allowed(attention_mask: Tensor) -> Tensor:
    """[B, 1, W, W] causal attention over the non-padding keys of a 2D mask; a padding query sees itself."""
    width = attention_mask.shape[1]
    device = attention_mask.device
    causal = torch.ones((width, width), dtype=torch.bool, device=device).tril()
    allowed = (causal & attention_mask.bool()[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)
    return allowed[:, None]


def hidden_states_at(
    model: PreTrainedModel, input_ids: Tensor, allowed: Tensor, position_ids: Tensor, read: Tensor
) -> Tensor:
    """[B, K, H] final (normed) hidden states at positions `read` [B, K] of each row.

    allowed [B, 1, W, W]: True where a query may attend a key (causality and padding already in it).
    Only for models that pass `supports_selective_forward` (callers check once, not per forward).
    """
    body = unwrapped(model).base_model
    # sdpa takes the boolean mask as it is (a quarter of a float mask's memory); eager attention adds its mask
    mask = allowed if body.config._attn_implementation == "sdpa" else additive_mask(allowed, body.dtype)
    hidden = body.embed_tokens(input_ids)
    cos, sin = body.rotary_emb(hidden, position_ids=position_ids)
    layers = body.layers[: body.config.num_hidden_layers]
    for layer in layers[:-1]:
        hidden = layer(hidden, attention_mask=mask, position_ids=position_ids, position_embeddings=(cos, sin))
    last = layers[-1]
    query_mask = mask.gather(2, read[:, None, :, None].expand(-1, 1, -1, mask.shape[-1]))
    hidden = _last_layer_at(last, hidden, read, query_mask, cos, sin)
    return body.norm(hidden)


def head_logits(model: PreTrainedModel, hidden: Tensor) -> Tensor:
    """Float32 logits of the LM head at final hidden states (from `hidden_states_at`)."""
    return unwrapped(model).get_output_embeddings()(hidden).float()


def _gather_rows(values: Tensor, read: Tensor) -> Tensor:
    """values [B, W, ...] at read [B, K] -> [B, K, ...]."""
    rows = torch.arange(values.shape[0], device=values.device)[:, None]
    return values[rows, read]


def _last_layer_at(layer: nn.Module, hidden: Tensor, read: Tensor, query_mask: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    attention = layer.self_attn
    head_dim = attention.head_dim
    normed = layer.input_layernorm(hidden)
    normed_read = _gather_rows(normed, read)
    batch, width, count = hidden.shape[0], hidden.shape[1], read.shape[1]

    query = attention.q_proj(normed_read).view(batch, count, -1, head_dim)
    key = attention.k_proj(normed).view(batch, width, -1, head_dim)
    value = attention.v_proj(normed).view(batch, width, -1, head_dim)
    if hasattr(attention, "q_norm"):  # Qwen3 normalises each head before the rotation
        query, key = attention.q_norm(query), attention.k_norm(key)
    query = rotary(query.transpose(1, 2), _gather_rows(cos, read)[:, None], _gather_rows(sin, read)[:, None])
    key = rotary(key.transpose(1, 2), cos[:, None], sin[:, None])
    value = value.transpose(1, 2)
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    dropout = attention.attention_dropout if attention.training else 0.0
    output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=query_mask, dropout_p=dropout, scale=attention.scaling
    )
    output = attention.o_proj(output.transpose(1, 2).reshape(batch, count, -1))
    residual = _gather_rows(hidden, read) + output
    return residual + layer.mlp(layer.post_attention_layernorm(residual))


def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding, half-rotation convention; x [N, heads, q, D], cos/sin broadcastable to it."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
