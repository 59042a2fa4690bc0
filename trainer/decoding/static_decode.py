"""Decoding at a GPU's speed: a static KV cache, and the whole decoding step captured once as a CUDA graph.

Eager decoding launches every kernel of a token from Python, a few microseconds each, and on a GPU that, not the
arithmetic, sets the pace: an H200 decoding 64 rows of SmolLM2-1.7B's shape eagerly took 19 ms a token, where
reading the model's weights once takes under 1 ms. Here, as in PyTorch's gpt-fast, one token's step (its forward
through trainer.decoding.fast_decode's layers and the draw of the next token) is a function of tensors at fixed addresses:
the cache holds every slot a call can write, the slot a token is written at is a tensor, attention reads the whole
cache under a mask, and the uniform numbers of the draws are made before the first token. On a GPU the step is
captured as a CUDA graph and replayed for every token; on the CPU the same step runs eagerly (which is how the tests
compare it with the eager decoder).

A graph serves many calls: shapes are bucketed (rows up to a multiple of ROW_MULTIPLE, cache slots up to a multiple
of SLOT_MULTIPLE), so a run captures once per bucket, at its first sampling, never per step or per round. Prompts are
prefilled eagerly, once each, and their keys and values copied into the rows of their G completions. The step reads
the decoder's copies of the weights from buffers kept with the model and written again, in place, at every call: it
always samples from the weights of the last optimizer step.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from trainer.decoding.fast_decode import (
    KVDecoder,
    _linear,
    _mlp,
    _rms_norm,
    grouped_attention,
    kept_copy_store,
)
from trainer.modeling.selective_forward import additive_mask, position_ids_from_mask, unwrapped

ROW_MULTIPLE = 8
SLOT_MULTIPLE = 64
# tokens between two reads of whether every row has ended: each read waits for the GPU to catch up
CHECK_ENDS_EVERY = 16
# warm-up runs of a step on a side stream before its capture (cuBLAS and the allocator set up outside the graph)
WARMUP_RUNS = 2
# shapes whose caches and graphs are kept per model; the oldest goes first (a bucket of SmolLM2-1.7B's shape at 64
# rows and 256 slots holds 3.2 GB of cache)
MAX_BUCKETS = 3


# (logits [N, V], banned ids or None, uniforms [N], ban: a 1-element bool tensor or None) -> (tokens [N], log-probs
# [N]): trainer.decoding.generation's draw with the call's sampling parameters bound
SampleFunction = Callable[[Tensor, Tensor | None, Tensor, Tensor | None], tuple[Tensor, Tensor]]
Step = Callable[[], None]


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class DrawRule:
    """What shapes a step's draw beyond its tensors: the sampling parameters, and whether end tokens can be banned
    (min_new_tokens) in it."""

    temperature: float
    top_k: int
    top_p: float
    bans_ends: bool


@dataclass
class Decoded:
    """What a static decoding call drew: tokens and log-probs [rows, steps] (every row decoded to `steps`; what
    follows a row's end token is the caller's to mask), and the seconds spent capturing graphs in this call."""

    tokens: Tensor
    logprobs: Tensor
    capture_seconds: float


class StaticState:
    """One bucket's cache and the step's inputs and outputs, all at fixed addresses."""

    def __init__(self, decoder: KVDecoder, *, rows: int, slots: int, end_ids: Tensor) -> None:
        device, dtype = decoder.keys[0].device, decoder.keys[0].dtype
        kv_heads, head_dim = decoder.kv_heads, decoder.head_dim
        # zeros, never empty memory: rows past the real ones and slots past a row's length are read under the mask,
        # and a NaN there would survive it
        self.keys = [torch.zeros(rows, kv_heads, head_dim, slots, dtype=dtype, device=device) for _ in decoder.layers]
        self.values = [torch.zeros(rows, kv_heads, slots, head_dim, dtype=dtype, device=device) for _ in decoder.layers]
        self.cos = torch.zeros(rows, slots, head_dim, dtype=decoder.cos.dtype, device=device)
        self.sin = torch.zeros_like(self.cos)
        self.prompt_bias = torch.zeros(rows, 1, 1, slots, dtype=dtype, device=device)
        self.slot_index = torch.arange(slots, device=device)
        self.token = torch.zeros(rows, 1, dtype=torch.long, device=device)  # the token the next step writes
        self.slot = torch.zeros(1, dtype=torch.long, device=device)  # the cache slot it is written at
        self.step = torch.zeros(1, dtype=torch.long, device=device)  # its index among the drawn tokens
        self.min_new = torch.zeros(1, dtype=torch.long, device=device)
        self.uniforms = torch.zeros(rows, slots, device=device)
        self.tokens = torch.zeros(rows, slots, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(rows, slots, device=device)
        self.alive = torch.zeros(rows, dtype=torch.bool, device=device)
        self.end_ids = end_ids.to(device)

    @property
    def rows(self) -> int:
        return self.token.shape[0]

    @property
    def slots(self) -> int:
        return self.slot_index.shape[0]


class StaticDecoder:
    """The static decoding of one model (kept per model by `static_decoder`): its buckets' states and graphs."""

    def __init__(self, model: PreTrainedModel, *, capture: bool) -> None:
        self.model = weakref.ref(model)
        self.capture = capture
        self.states: OrderedDict[tuple[int, int], StaticState] = OrderedDict()
        # per bucket and draw rule: the captured graph, the decoder whose layers it runs (kept alive with it), and
        # the addresses of everything it reads, which must not have moved for a replay to read the current weights
        self.graphs: dict[tuple[int, int, DrawRule], tuple[torch.cuda.CUDAGraph, KVDecoder, tuple[int, ...]]] = {}
        self.pool = torch.cuda.graph_pool_handle() if capture else None

    def decode(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        *,
        group: int,
        max_new_tokens: int,
        min_new_tokens: int,
        rule: DrawRule,
        uniforms: Tensor,
        end_ids: Tensor,
        sample: SampleFunction,
    ) -> Decoded:
        """Draw up to max_new_tokens for each of the G rows of every prompt (prompt_ids, prompt_mask [B, P],
        left-padded; uniforms [B*G, max_new_tokens]), stopping early once every row has drawn an end token."""
        model = self.model()
        count, width = prompt_ids.shape
        rows = count * group
        bucket = (round_up(rows, ROW_MULTIPLE), round_up(width + max_new_tokens, SLOT_MULTIPLE))
        # the prefill's decoder writes the current weights into the kept copies every step reads
        prefill = KVDecoder(model, rows=count, capacity=width, positions=position_ids_from_mask(prompt_mask),
                            decode_rows=bucket[0], store=kept_copy_store(model))
        state = self._state(prefill, bucket, end_ids=end_ids)
        step = self._step_function(prefill, state, rule, sample)
        replay, capture_seconds = self._graph(prefill, state, rule, step) if self.capture else (step, 0.0)
        # the graph (if new) is captured before the state is filled: capturing and its warm-up write into it
        first_logits = self._fill(prefill, state, prompt_ids, prompt_mask, group=group, rows=rows, width=width,
                                  uniforms=uniforms, min_new_tokens=min_new_tokens)
        self._draw_first(state, first_logits, rows=rows, sample=sample, rule=rule)
        drawn = 1
        # on the CPU a read costs nothing: stop as soon as every row has ended, as the eager decoder does
        check_every = CHECK_ENDS_EVERY if self.capture else 1
        while drawn < max_new_tokens and (drawn % check_every or bool(state.alive.any())):
            replay()
            drawn += 1
        return Decoded(state.tokens[:rows, :drawn].clone(), state.logprobs[:rows, :drawn].clone(), capture_seconds)

    def _state(self, decoder: KVDecoder, bucket: tuple[int, int], *, end_ids: Tensor) -> StaticState:
        """The bucket's state (made now if it has none, dropping the least recently used beyond MAX_BUCKETS)."""
        if bucket in self.states:
            self.states.move_to_end(bucket)
            return self.states[bucket]
        while len(self.states) >= MAX_BUCKETS:
            dropped, _ = self.states.popitem(last=False)
            self.graphs = {key: kept for key, kept in self.graphs.items() if key[:2] != dropped}
        rows, slots = bucket
        self.states[bucket] = StaticState(decoder, rows=rows, slots=slots, end_ids=end_ids)
        return self.states[bucket]

    def _fill(
        self, prefill: KVDecoder, state: StaticState, prompt_ids: Tensor, prompt_mask: Tensor, *, group: int, rows: int,
        width: int, uniforms: Tensor, min_new_tokens: int,
    ) -> Tensor:
        """Prefill each prompt once, copy its cache into its G rows and set the step's inputs; the logits [rows, V]
        after each row's prompt."""
        count, device = prompt_ids.shape[0], prompt_ids.device
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        valid = prompt_mask.bool()
        # a left-padding query sees only itself, so no softmax row is empty
        allowed = (causal & valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)
        logits = prefill.forward(prompt_ids, additive_mask(allowed[:, None], prefill.keys[0].dtype))
        for cached, static in zip(prefill.keys, state.keys, strict=True):
            static[:rows].view(count, group, *static.shape[1:])[..., :width].copy_(cached[:, None])
        for cached, static in zip(prefill.values, state.values, strict=True):
            static[:rows].view(count, group, *static.shape[1:])[:, :, :, :width].copy_(cached[:, None])
        prompt_positions = position_ids_from_mask(prompt_mask)
        continued = prompt_positions[:, -1:] + 1 + torch.arange(state.slots - width, device=device)
        positions = torch.zeros(state.rows, state.slots, dtype=torch.long, device=device)
        positions[:rows] = torch.cat([prompt_positions, continued], dim=1).repeat_interleave(group, dim=0)
        probe = torch.empty(0, dtype=state.cos.dtype, device=device)
        cos, sin = prefill.body.rotary_emb(probe, position_ids=positions)
        state.cos.copy_(cos)
        state.sin.copy_(sin)
        slot_valid = torch.ones(state.rows, state.slots, dtype=torch.bool, device=device)
        slot_valid[:rows, :width] = valid.repeat_interleave(group, dim=0)
        state.prompt_bias.copy_(additive_mask(slot_valid[:, None, None, :], state.prompt_bias.dtype))
        state.uniforms.zero_()
        state.uniforms[:rows, : uniforms.shape[1]] = uniforms
        state.tokens.zero_()
        state.logprobs.zero_()
        state.alive.zero_()
        state.alive[:rows] = True
        state.min_new.fill_(min_new_tokens)
        state.slot.fill_(width)
        state.step.zero_()
        return logits.repeat_interleave(group, dim=0)

    @staticmethod
    def _draw_first(state: StaticState, logits: Tensor, *, rows: int, sample: SampleFunction, rule: DrawRule) -> None:
        """The first token of every row, from the logits after its prompt (eagerly: the prefill's shape is the
        prompt's); it is the input of the first replayed step."""
        ban = (state.step < state.min_new) if rule.bans_ends else None
        tokens, logprobs = sample(logits, state.end_ids if rule.bans_ends else None, state.uniforms[:rows, 0], ban)
        state.tokens[:rows, 0] = tokens
        state.logprobs[:rows, 0] = logprobs
        state.alive[:rows] &= ~ends(tokens, state.end_ids)
        state.token[:rows, 0] = tokens

    def _step_function(self, decoder: KVDecoder, state: StaticState, rule: DrawRule, sample: SampleFunction) -> Step:
        """One token of every row: its forward at `state.slot`, then the draw of the next token into `state.tokens`
        at `state.step + 1`. Only tensor operations on `state`'s tensors: it can be captured and replayed."""
        minimum = torch.finfo(state.prompt_bias.dtype).min

        def step() -> None:
            cos = state.cos.index_select(1, state.slot)
            sin = state.sin.index_select(1, state.slot)
            bias = state.prompt_bias.masked_fill(state.slot_index > state.slot, minimum)
            logits = decode_at(decoder, state, cos, sin, bias)
            drawn = state.step + 1
            ban = (drawn < state.min_new) if rule.bans_ends else None
            uniform = state.uniforms.index_select(1, drawn).squeeze(1)
            tokens, logprobs = sample(logits, state.end_ids if rule.bans_ends else None, uniform, ban)
            state.tokens.index_copy_(1, drawn, tokens[:, None])
            state.logprobs.index_copy_(1, drawn, logprobs[:, None])
            state.alive.logical_and_(~ends(tokens, state.end_ids))
            state.token.copy_(tokens[:, None])
            state.slot.add_(1)
            state.step.add_(1)

        return step

    def _graph(self, decoder: KVDecoder, state: StaticState, rule: DrawRule, step: Step) -> tuple[Step, float]:
        """The captured graph of `step` for this bucket and rule (captured now if there is none, or if what it reads
        has moved), and the seconds this call spent capturing."""
        key = (state.rows, state.slots, rule)
        reads = read_addresses(decoder, self.model())
        kept = self.graphs.get(key)
        if kept is not None and kept[2] == reads:
            return kept[0].replay, 0.0
        started = time.perf_counter()
        graph = capture_cuda_graph(step, self.pool)
        self.graphs[key] = (graph, decoder, reads)
        return graph.replay, time.perf_counter() - started


def ends(tokens: Tensor, end_ids: Tensor) -> Tensor:
    """[N] bool: the token is one of end_ids (a comparison, where torch.isin may choose a kernel that syncs)."""
    return (tokens[:, None] == end_ids[None, :]).any(dim=-1)


def decode_at(decoder: KVDecoder, state: StaticState, cos: Tensor, sin: Tensor, bias: Tensor) -> Tensor:
    """Logits [rows, V] after state.token, written at state.slot of the static cache (as KVDecoder.forward for one
    token, through its fused copies where it has them); cos, sin [rows, 1, D]; bias [rows, 1, 1, slots]."""
    rows = state.rows
    if decoder.fused is None:
        hidden = decoder.body.embed_tokens(state.token)
        for layer, keys, values in zip(decoder.layers, state.keys, state.values, strict=True):
            attention = layer.self_attn
            rotated, value = decoder._queries_keys_values(attention, _rms_norm(hidden, layer.input_layernorm),
                                                          cos[:, None], sin[:, None])
            attended = attend_at(rotated, value, keys, values, state.slot, bias, attention.scaling)
            hidden = hidden + _linear(attention.o_proj, attended.transpose(1, 2).flatten(2))
            hidden = hidden + _mlp(layer.mlp, _rms_norm(hidden, layer.post_attention_layernorm))
        return _linear(decoder.head, _rms_norm(hidden[:, -1], decoder.body.norm))
    hidden = decoder.body.embed_tokens(state.token.view(-1))
    for fused, layer, keys, values in zip(decoder.fused, decoder.layers, state.keys, state.values, strict=True):
        rotated, value = fused.queries_keys_values(hidden, rows, cos.unsqueeze(2), sin.unsqueeze(2))
        attended = attend_at(rotated, value, keys, values, state.slot, bias, layer.self_attn.scaling)
        hidden = hidden + fused.attention_output(layer.self_attn.o_proj, attended.transpose(1, 2).reshape(rows, -1))
        hidden = hidden + fused.mlp(layer.mlp, hidden)
    return decoder.folded_head(hidden)


def attend_at(rotated: Tensor, value: Tensor, keys: Tensor, values: Tensor, slot: Tensor, bias: Tensor, scale: float) -> Tensor:
    """Write one token's key and value at `slot` of the cache, then attend over every slot under `bias`."""
    kv_heads = keys.shape[1]
    queries, new_keys = rotated.split([rotated.shape[1] - kv_heads, kv_heads], dim=1)
    keys.index_copy_(3, slot, new_keys.transpose(-1, -2).to(keys.dtype))
    values.index_copy_(2, slot, value.to(values.dtype))
    return grouped_attention(queries.to(keys.dtype), keys, values, bias, scale)


def read_addresses(decoder: KVDecoder, model: nn.Module) -> tuple[int, ...]:
    """Where a captured step reads the weights: the decoder's kept copies and the model's own parameters (LoRA
    layers, the embedding). A replay is right only while none of them has moved (fsdp gathers weights anew)."""
    copies = [matrix.weight for layer in decoder.fused or () for matrix in (layer.attention, layer.output, layer.gate_up,
                                                                             layer.down) if matrix is not None]
    if decoder.folded_head is not None and decoder.folded_head.matrix is not None:
        copies.append(decoder.folded_head.matrix.weight)
    return tuple(tensor.data_ptr() for tensor in [*copies, *unwrapped(model).parameters()])


def capture_cuda_graph(step: Step, pool: tuple[int, int] | None) -> torch.cuda.CUDAGraph:
    """`step` captured as a CUDA graph, after warm-up runs on a side stream (as torch.cuda.graphs advises). Autocast,
    where on, captures its casts instead of caching copies (a cache would hold tensors the graph does not own)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), _autocast_without_cache():
        for _ in range(WARMUP_RUNS):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool), _autocast_without_cache():
        step()
    return graph


def _autocast_without_cache() -> AbstractContextManager:
    if not torch.is_autocast_enabled("cuda"):
        return nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)


_DECODERS: weakref.WeakKeyDictionary[nn.Module, StaticDecoder] = weakref.WeakKeyDictionary()


def static_decoder(model: PreTrainedModel) -> StaticDecoder:
    """The model's static decoder, kept with it (every backend sampling from it, evaluation's included, shares its
    graphs); it captures graphs where the model is on a GPU."""
    body = unwrapped(model).base_model
    capture = model.device.type == "cuda"
    kept = _DECODERS.get(body)
    if kept is None or kept.model() is not model or kept.capture != capture:
        kept = _DECODERS[body] = StaticDecoder(model, capture=capture)
    return kept
