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

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel

from trainer.modeling.distributed import is_sharded

SELECTIVE_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3"})


def unwrapped(model: PreTrainedModel) -> PreTrainedModel:
    """The transformers model inside a peft wrapper (LoRA layers stay injected in it)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports_selective_forward(model: PreTrainedModel) -> bool:
    # a sharded (FSDP) model gathers its weights in its modules' forward hooks: run it only through its forward
    if is_sharded(model):
        return False
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


@dataclass(frozen=True)
class GroupBlocks:
    """The block structure of a packed GRPO row `[prompt P | completion 1 | ... | completion G]` (each of width T):
    the prompt attends causally within itself, each completion to the prompt and causally within itself.

    prompt_allowed [B, 1, P, P]; completion_allowed [B*G, 1, T, P + T] (keys: the prompt, then the completion).
    Both equal the packed row's `allowed` restricted to those blocks; every other block is all False.
    """

    prompt_allowed: Tensor
    completion_allowed: Tensor
    group: int

    @classmethod
    def of(cls, allowed: Tensor, prompt_width: int, group: int, completion_width: int) -> GroupBlocks:
        count = allowed.shape[0]
        p, t = prompt_width, completion_width
        rows = allowed[:, 0, p:].unflatten(1, (group, t))  # [B, G, T, W]
        own = torch.stack([rows[:, g, :, p + g * t : p + (g + 1) * t] for g in range(group)], dim=1)
        completion = torch.cat([rows[..., :p], own], dim=-1).reshape(count * group, 1, t, p + t)
        return cls(prompt_allowed=allowed[:, :, :p, :p], completion_allowed=completion, group=group)


def hidden_states_at(
    model: PreTrainedModel,
    input_ids: Tensor,
    allowed: Tensor,
    position_ids: Tensor,
    read: Tensor,
    *,
    blocks: GroupBlocks | None = None,
) -> Tensor:
    """[B, K, H] final (normed) hidden states at positions `read` [B, K] of each row.

    allowed [B, 1, W, W]: True where a query may attend a key (causality and padding already in it).
    blocks: the same mask as a packed group's blocks, when `allowed` is one; attention then runs per block
    instead of over the whole row (see `_layer_over_blocks`).
    Only for models that pass `supports_selective_forward` (callers check once, not per forward).
    """
    body = unwrapped(model).base_model
    # sdpa takes the boolean mask as it is (a quarter of a float mask's memory); eager attention adds its mask
    mask = allowed if body.config._attn_implementation == "sdpa" else additive_mask(allowed, body.dtype)
    hidden = body.embed_tokens(input_ids)
    cos, sin = body.rotary_emb(hidden, position_ids=position_ids)
    layers = body.layers[: body.config.num_hidden_layers]
    # with gradient checkpointing the layers' own forwards run, so that they are checkpointed
    by_blocks = blocks is not None and not (torch.is_grad_enabled() and getattr(body, "gradient_checkpointing", False))
    for layer in layers[:-1]:
        if by_blocks:
            hidden = _layer_over_blocks(layer, hidden, blocks, cos, sin)
        else:
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


def _layer_over_blocks(layer: nn.Module, hidden: Tensor, blocks: GroupBlocks, cos: Tensor, sin: Tensor) -> Tensor:
    """A decoder layer over packed group rows [B, P + G*T, H], attention computed block by block.

    The whole-row attention scores every query against all W = P + G*T keys and masks most of them away (a
    completion sees none of the other G - 1); here the prompt attends to itself and each completion, as one of
    B*G rows, to the prompt's keys and its own: (P^2 + G*T*(P + T)) scores instead of W^2, about 5x fewer for a
    66-token prompt and 8 x 64 new tokens. The projections and the MLP are the layer's own modules.
    """
    attention = layer.self_attn
    head_dim = attention.head_dim
    batch, width = hidden.shape[:2]
    normed = layer.input_layernorm(hidden)
    query = attention.q_proj(normed).view(batch, width, -1, head_dim)
    key = attention.k_proj(normed).view(batch, width, -1, head_dim)
    value = attention.v_proj(normed).view(batch, width, -1, head_dim)
    if hasattr(attention, "q_norm"):  # Qwen3 normalises each head before the rotation
        query, key = attention.q_norm(query), attention.k_norm(key)
    query = rotary(query.transpose(1, 2), cos[:, None], sin[:, None])
    key = rotary(key.transpose(1, 2), cos[:, None], sin[:, None])
    value = value.transpose(1, 2)
    output = _block_attention(query, key, value, blocks, attention)
    hidden = hidden + attention.o_proj(output.transpose(1, 2).reshape(batch, width, -1))
    return hidden + layer.mlp(layer.post_attention_layernorm(hidden))


def _block_attention(query: Tensor, key: Tensor, value: Tensor, blocks: GroupBlocks, attention: nn.Module) -> Tensor:
    """query [B, heads, W, D], key and value [B, kv_heads, W, D] of packed group rows -> [B, heads, W, D]."""
    batch, heads, width, dim = query.shape
    kv_heads = key.shape[1]
    group, prompt = blocks.group, blocks.prompt_allowed.shape[-1]
    completion = (width - prompt) // group
    dropout = attention.attention_dropout if attention.training else 0.0
    gqa = heads != kv_heads

    def per_completion(x: Tensor) -> Tensor:  # [B, h, G*T, D] -> [B*G, h, T, D]
        return x[:, :, prompt:].unflatten(2, (group, completion)).transpose(1, 2).flatten(0, 1)

    def with_prompt(x: Tensor) -> Tensor:  # keys or values of each completion behind its prompt's
        shared = x[:, :, :prompt].repeat_interleave(group, dim=0)
        return torch.cat([shared, per_completion(x)], dim=2)

    prompt_out = F.scaled_dot_product_attention(
        query[:, :, :prompt], key[:, :, :prompt], value[:, :, :prompt], attn_mask=blocks.prompt_allowed,
        dropout_p=dropout, scale=attention.scaling, enable_gqa=gqa,
    )
    completion_out = F.scaled_dot_product_attention(
        per_completion(query), with_prompt(key), with_prompt(value), attn_mask=blocks.completion_allowed,
        dropout_p=dropout, scale=attention.scaling, enable_gqa=gqa,
    )
    completion_out = completion_out.unflatten(0, (batch, group)).transpose(1, 2).flatten(2, 3)
    return torch.cat([prompt_out, completion_out], dim=2)


def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding, half-rotation convention; x [N, heads, q, D], cos/sin broadcastable to it."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
