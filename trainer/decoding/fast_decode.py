"""A lean forward for sampling from Llama-family decoders: a preallocated KV cache and few ops per token.

Sampling a few dozen tokens from a small policy is bound by per-call overhead, not arithmetic: the generic
transformers forward rebuilds masks, rotary tables and cache bookkeeping on every token. This runs the
same modules (so LoRA layers and any dtype work as they are) through a minimal path: rotary tables built
once per call, keys and values written in place into a cache sized for prompt + max_new_tokens, and one
attention call per layer. Where the projections are plain Linear layers they are fused per layer, with the
RMSNorm weights folded into them (FusedLayer), so a norm is one row-norm kernel and a division. Its logits
equal the transformers forward's to float rounding (tested).
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel

from trainer.modeling import products
from trainer.modeling.selective_forward import rotary, supports_selective_forward, unwrapped


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

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        rows: int,
        capacity: int,
        positions: Tensor,
        decode_rows: int | None = None,
        store: CopyStore | None = None,
    ) -> None:
        """positions [rows, capacity]: the rotary position of every cache slot of every row; decode_rows: the rows
        a decoding step will have (after repeat_rows), which the float32 head's packed copy is made for; store:
        where the copies of the weights are written (copy_store's by default)."""
        inner = unwrapped(model)
        self.body = inner.base_model
        self.head = inner.get_output_embeddings()
        self.layers = list(self.body.layers[: self.body.config.num_hidden_layers])
        first = self.layers[0].self_attn
        self.head_dim = first.head_dim
        self.kv_heads = first.k_proj.out_features // self.head_dim
        weights, device = self.body.embed_tokens.weight.dtype, positions.device
        # keys, values and products in bf16 under bf16-mixed; the rotary tables in the weights' dtype, as the
        # transformers forward computes them from its float32 residual stream
        dtype = sampling_dtype(weights, device)
        # keys transposed, [rows, kv_heads, D, capacity]: the scores' product then reads a plain strided matrix
        # (bf16, 16 rows of SmolLM2: 103 -> 48 us a layer; 0.35 -> 0.25 s of a generation), where keys.transpose of
        # [.., capacity, D] is a transposed operand the batched product copies first
        self.keys = [torch.empty(rows, self.kv_heads, self.head_dim, capacity, dtype=dtype, device=device)
                     for _ in self.layers]
        self.values = [torch.empty(rows, self.kv_heads, capacity, self.head_dim, dtype=dtype, device=device)
                       for _ in self.layers]
        probe = torch.empty(0, dtype=weights, device=device)
        self.cos, self.sin = self.body.rotary_emb(probe, position_ids=positions)  # [rows, capacity, D]
        self.length = 0
        store = store or copy_store(self.body)
        self.fused = fused_projections(self.layers, self.head_dim, dtype, store=store)
        self.folded_head = (
            folded_head(self.head, self.body.norm, dtype, rows=decode_rows or rows, store=store)
            if self.fused is not None else None
        )

    def repeat_rows(self, times: int) -> None:
        """Each row becomes `times` consecutive rows (a prompt's cache shared by its group)."""
        self.keys = [k.repeat_interleave(times, dim=0) for k in self.keys]
        self.values = [v.repeat_interleave(times, dim=0) for v in self.values]
        self.cos, self.sin = self.cos.repeat_interleave(times, dim=0), self.sin.repeat_interleave(times, dim=0)

    def forward(self, input_ids: Tensor, key_bias: Tensor) -> Tensor:
        """Logits [rows, V] after input_ids [rows, q] (written at the next q slots).

        key_bias [rows, 1, q, length + q]: 0 where a query may attend a slot, very negative elsewhere.
        """
        if self.fused is not None:
            return self._fused_forward(input_ids, key_bias)
        start, count = self.length, input_ids.shape[1]
        end = start + count
        cos, sin = self.cos[:, None, start:end], self.sin[:, None, start:end]
        hidden = self.body.embed_tokens(input_ids)
        for layer, keys, values in zip(self.layers, self.keys, self.values, strict=True):
            attention = layer.self_attn
            normed = _rms_norm(hidden, layer.input_layernorm)
            rotated, value = self._queries_keys_values(attention, normed, cos, sin)
            attended = self._attend(rotated, value, keys, values, key_bias, attention.scaling)
            hidden = hidden + _linear(attention.o_proj, attended.transpose(1, 2).flatten(2))
            hidden = hidden + _mlp(layer.mlp, _rms_norm(hidden, layer.post_attention_layernorm))
        self.length = end
        return _linear(self.head, _rms_norm(hidden[:, -1], self.body.norm))

    def _fused_forward(self, input_ids: Tensor, key_bias: Tensor) -> Tensor:
        """The same forward on FusedLayer weights, every row-wise product on [rows * q, hidden] matrices."""
        rows, count = input_ids.shape
        start, end = self.length, self.length + count
        cos, sin = self.cos.narrow(1, start, count).unsqueeze(2), self.sin.narrow(1, start, count).unsqueeze(2)
        hidden = self.body.embed_tokens(input_ids.reshape(-1))
        for fused, layer, keys, values in zip(self.fused, self.layers, self.keys, self.values, strict=True):
            rotated, value = fused.queries_keys_values(hidden, rows, cos, sin)
            attended = self._attend(rotated, value, keys, values, key_bias, layer.self_attn.scaling)
            hidden = hidden + fused.attention_output(layer.self_attn.o_proj, attended.transpose(1, 2).reshape(rows * count, -1))
            hidden = hidden + fused.mlp(layer.mlp, hidden)
        self.length = end
        return self.folded_head(hidden.view(rows, count, -1)[:, -1])

    def _attend(self, rotated: Tensor, value: Tensor, keys: Tensor, values: Tensor, key_bias: Tensor, scale: float) -> Tensor:
        """Writes this call's keys and values into the cache and attends over it: [N, heads, q, D]."""
        start, end = self.length, self.length + value.shape[2]
        heads = rotated.shape[1] - self.kv_heads
        queries, new_keys = rotated.split([heads, self.kv_heads], dim=1)
        keys.narrow(3, start, end - start).copy_(new_keys.transpose(-1, -2))
        values.narrow(2, start, end - start).copy_(value)
        queries = queries.to(keys.dtype)
        return grouped_attention(queries, keys.narrow(3, 0, end), values.narrow(2, 0, end), key_bias, scale)

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


def grouped_attention(queries: Tensor, keys_t: Tensor, values: Tensor, key_bias: Tensor, scale: float) -> Tensor:
    """softmax(q k^T * scale + bias) v with grouped-query heads: queries [N, heads, q, D], keys transposed
    keys_t [N, kv_heads, D, L], values [N, kv_heads, L, D], key_bias [N, 1, q, L]; query head h reads key head
    h // (heads / kv_heads), as
    transformers' repeat_kv. As two batched products over the key heads, without repeating keys: the CPU
    scaled_dot_product_attention kernel costs about 0.3 ms a call at decoding sizes (one query, a few hundred
    keys), several times these few small kernels."""
    rows, heads, count, dim = queries.shape
    kv_heads, length = keys_t.shape[1], keys_t.shape[3]
    grouped = (queries * scale).reshape(rows, kv_heads, heads // kv_heads * count, dim)
    scores = torch.matmul(grouped, keys_t).view(rows, kv_heads, -1, count, length) + key_bias[:, :, None]
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
    return torch.matmul(weights.view(rows, kv_heads, -1, length), values).view(rows, heads, count, dim)


# Fusing copies the projection weights once per sampling call; worth it only while the matrices are small
# (per-call overhead dominates), and never at the price of a large second copy of the model. Copies in a
# lower autocast dtype are not counted: autocast would make (and keep for the step) the same bf16 copies.
FUSED_WEIGHTS_MAX_BYTES = 256 * 2**20


def sampling_dtype(weights: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype the decoder's products run in: autocast's (bf16 under bf16-mixed) for float32 weights inside an
    autocast region, else the weights' own."""
    if weights == torch.float32 and torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return weights


@dataclass(frozen=True)
class UnitRMS:
    """x / sqrt(sum(x^2) + d * eps): an RMSNorm without its weight and its factor sqrt(d), both folded into the
    matrix that follows. One norm-of-rows kernel and two elementwise ops, where F.rms_norm's CPU kernel runs
    several reductions' worth of dispatch; sqrt(a^2 + b^2) keeps the eps exact."""

    eps_root: Tensor  # sqrt(d * eps), a 0-d tensor (a Python float would be wrapped anew on every call)

    @classmethod
    def of(cls, norm: nn.Module, hidden_size: int, like: Tensor) -> UnitRMS:
        return cls(torch.tensor(math.sqrt(hidden_size * norm.variance_epsilon), dtype=torch.float32, device=like.device))

    def __call__(self, hidden: Tensor) -> Tensor:
        # computed in float32, as the transformers RMSNorm does; the product that follows casts it
        wide = hidden.float()
        return wide / torch.hypot(torch.linalg.vector_norm(wide, dim=-1, keepdim=True), self.eps_root)


@dataclass(frozen=True)
class Matrix:
    """A frozen copy of a projection, weight [out, in] in the dtype its products run in.

    A few rows (a decoding step) are multiplied as weight @ x^T where that streams the weight faster (bf16 on the
    CPU; float32 on CPUs but Intel's: products.weight_first); a prompt's many rows as x @ weight^T.
    """

    weight: Tensor
    bias: Tensor | None
    # MKL's packed copy of a float32 weight, for products of `packed_rows` rows (see packed_float32)
    packed: Tensor | None = None
    packed_rows: int = 0
    # oneDNN's copy of a float32 weight (and bias): see fastest_float32
    onednn: tuple[Tensor, Tensor | None] | None = None

    @classmethod
    def packed_float32(cls, weight: Tensor, bias: Tensor | None, rows: int) -> Matrix:
        """`weight` (float32; kept as it is, so a copy made for this) with MKL's packed copy, which multiplies
        without packing the weight again on every call (the float32 head of bf16-mixed, SmolLM2's 113 MB at 16
        rows: 11.0 -> 6.4 ms a token; packing once costs 32 ms). Where MKL is absent (not an x86 CPU), the plain
        copy."""
        weight = weight.detach().float().contiguous()
        bias = None if bias is None else bias.detach().float()
        if weight.device.type != "cpu" or not torch.backends.mkl.is_available():
            return cls(weight, bias)
        packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
        return cls(weight, bias, packed=packed, packed_rows=rows)

    @classmethod
    def onednn_float32(cls, weight: Tensor, bias: Tensor | None) -> Matrix:
        """oneDNN's copy of a float32 weight; `weight` is kept as it is (a copy made for this, as a folded head's)."""
        weight = weight.detach().float().contiguous()
        bias = None if bias is None else bias.detach().float()
        return cls(weight, bias, onednn=(weight.to_mkldnn(), None if bias is None else bias.to_mkldnn()))

    @classmethod
    def fastest_float32(cls, weight: Tensor, bias: Tensor | None, rows: int) -> Matrix:
        """A float32 copy multiplied by MKL's packed product or by oneDNN's, whichever this CPU runs faster for
        `rows` rows (timed once per process and shape: MKL takes a slow path on AMD CPUs, where oneDNN multiplies
        SmolLM2's 113 MB head at 16 rows in 6.1 ms against 12.2; on an Intel Xeon MKL's packed product took it
        from 11.0 to 6.4 ms, and oneDNN was not timed there). Where MKL or oneDNN is absent, the packed or the
        plain copy."""
        if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
            return cls.packed_float32(weight, bias, rows)
        key = (tuple(weight.shape), rows)
        if key not in _FASTEST_FLOAT32:
            _FASTEST_FLOAT32[key] = _faster_float32_kind(weight, bias, rows)
        if _FASTEST_FLOAT32[key] == "onednn":
            return cls.onednn_float32(weight, bias)
        return cls.packed_float32(weight, bias, rows)

    def __call__(self, x: Tensor) -> Tensor:
        """x [rows, in] -> [rows, out] in the copy's dtype."""
        x = x.to(self.weight.dtype)
        if self.onednn is not None:  # a oneDNN op: autocast leaves it in float32
            weight, bias = self.onednn
            return torch._C._nn.mkldnn_linear(x.contiguous().to_mkldnn(), weight, bias).to_dense()
        if self.packed is not None:  # an MKL op: autocast leaves it in float32
            return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, self.bias, self.packed_rows)
        if self.weight.dtype == torch.float32 and torch.is_autocast_enabled(x.device.type):
            # the float32 head of bf16-mixed on a GPU (or a CPU without MKL): autocast would multiply it in bf16
            with torch.autocast(x.device.type, enabled=False):
                return self._plain_product(x)
        return self._plain_product(x)

    def _plain_product(self, x: Tensor) -> Tensor:
        if products.weight_first(x, self.weight):
            product = torch.mm(self.weight, x.t()).t()
            return product if self.bias is None else product + self.bias
        if self.bias is None:
            return torch.mm(x, self.weight.t())
        return torch.addmm(self.bias, x, self.weight.t())


_FASTEST_FLOAT32: dict[tuple[tuple[int, ...], int], str] = {}


def _faster_float32_kind(weight: Tensor, bias: Tensor | None, rows: int) -> str:
    """"onednn" or "mkl": the faster float32 product of `rows` rows by this weight, best of 3 calls each."""
    x = torch.full((rows, weight.shape[1]), 0.5, device=weight.device)  # never torch.randn: it would move the seeded sampling stream
    candidates = {"onednn": Matrix.onednn_float32(weight, bias)}
    if torch.backends.mkl.is_available():
        candidates["mkl"] = Matrix.packed_float32(weight, bias, rows)
    seconds = {}
    for kind, matrix in candidates.items():
        matrix(x)
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            matrix(x)
            runs.append(time.perf_counter() - started)
        seconds[kind] = min(runs)
    return min(seconds, key=seconds.get)


def _apply(module: nn.Module, matrix: Matrix | None, x: Tensor) -> Tensor:
    """module(x) through its copy, or its own forward where it has none (LoRA, ...)."""
    return module(x) if matrix is None else matrix(x)


def _nbytes(module: nn.Module) -> int:
    """Bytes a copy of a plain Linear's weight takes (0 for anything else, which is never copied)."""
    return module.weight.numel() * module.weight.element_size() if type(module) is nn.Linear else 0


@dataclass(frozen=True)
class FusedLayer:
    """One layer's projections as two matrices: [q, k, rotate_half(q), rotate_half(k), v] and [gate, up],
    each with its RMSNorm folded in (UnitRMS), and plain output projections copied.

    rotate_half is linear in the weights' rows, so the rotary embedding becomes q*cos + q_rot*sin with both
    terms from the same product.
    """

    attention_norm: UnitRMS
    attention: Matrix
    output: Matrix | None  # None when o_proj is not a plain Linear
    mlp_norm: UnitRMS
    gate_up: Matrix
    down: Matrix | None  # None when down_proj is not a plain Linear
    query_key_width: int
    head_dim: int

    def queries_keys_values(self, hidden: Tensor, rows: int, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """hidden [rows * q, H]; cos, sin [rows, q, 1, D]; returns as KVDecoder._queries_keys_values."""
        projected = self.attention(self.attention_norm(hidden))
        width = self.query_key_width
        parts = projected.view(rows, -1, projected.shape[-1]).split([width, width, projected.shape[-1] - 2 * width], dim=-1)
        query_key, query_key_rotated_half, value = (part.unflatten(-1, (-1, self.head_dim)) for part in parts)
        rotated = torch.addcmul(query_key * cos, query_key_rotated_half, sin)
        return rotated.transpose(1, 2), value.transpose(1, 2)

    def attention_output(self, o_proj: nn.Module, attended: Tensor) -> Tensor:
        return _apply(o_proj, self.output, attended)

    def mlp(self, mlp: nn.Module, hidden: Tensor) -> Tensor:
        """The gated MLP of the normed hidden [rows * q, H]."""
        gate, up = self.gate_up(self.mlp_norm(hidden)).chunk(2, dim=-1)
        return _apply(mlp.down_proj, self.down, _activation(mlp.act_fn, gate) * up)


def fused_projections(
    layers: list[nn.Module], head_dim: int, dtype: torch.dtype | None = None, *, store: CopyStore | None = None
) -> list[FusedLayer] | None:
    """Fused copies of every layer's weights in `dtype` (the weights' own by default), written into `store`'s
    buffers (fresh ones without a store), or None when a projection is not a plain Linear (LoRA, quantised), the
    model normalises heads before the rotation (Qwen3), or copies in the weights' own dtype would be too large."""
    projections = [
        (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj)
        for layer in layers
    ]
    if any(hasattr(layer.self_attn, "q_norm") for layer in layers):
        return None
    if not all(type(module) is nn.Linear for group in projections for module in group):
        return None
    weights = layers[0].self_attn.q_proj.weight.dtype
    dtype = dtype or weights
    # every projection once, and the query and key rows a second time (rotated)
    copied = sum(_nbytes(module) for group in projections for module in group)
    copied += sum(_nbytes(query) + _nbytes(key) for query, key, *_ in projections)
    copied += sum(_nbytes(layer.self_attn.o_proj) + _nbytes(layer.mlp.down_proj) for layer in layers)
    if dtype == weights and copied > FUSED_WEIGHTS_MAX_BYTES:
        return None
    store = store or CopyStore(keep=False)
    return [_fuse_layer(layer, head_dim=head_dim, dtype=dtype, store=store, index=index) for index, layer in enumerate(layers)]


class CopyStore:
    """Buffers for the decoder's copies of the weights, kept from one sampling call to the next on the CPU.

    The copies are written anew on every call (the weights change with every optimizer step), but on the CPU
    allocating them afresh costs more than writing them: glibc returns blocks this large to the kernel when they
    are freed, so each call paid a page fault per 4 KB of fresh memory (SmolLM2: about 0.5 s of a 3 s generation
    went to concatenating and casting into new tensors). On a GPU the caching allocator already reuses memory,
    and copies kept between calls would hold device memory through training, so there every call gets fresh ones.
    """

    def __init__(self, *, keep: bool) -> None:
        self.keep = keep
        self._buffers: dict[tuple, Tensor] = {}

    def buffer(self, key: tuple, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
        if not self.keep:
            return torch.empty(shape, dtype=dtype, device=device)
        kept = self._buffers.get(key)
        if kept is None or kept.shape != shape or kept.dtype != dtype or kept.device != device:
            kept = self._buffers[key] = torch.empty(shape, dtype=dtype, device=device)
        return kept


_COPY_STORES: weakref.WeakKeyDictionary[nn.Module, CopyStore] = weakref.WeakKeyDictionary()


def copy_store(body: nn.Module) -> CopyStore:
    """The store of a decoder body's copies: kept with the body on the CPU, fresh each call elsewhere."""
    if body.embed_tokens.weight.device.type != "cpu":
        return CopyStore(keep=False)
    return _kept_store(body)


def kept_copy_store(model: PreTrainedModel) -> CopyStore:
    """The copies' store kept with the model on any device: a captured decoding step (trainer.decoding.static_decode) reads
    the copies where they were when it was captured, so they are written again in place, never made anew."""
    return _kept_store(unwrapped(model).base_model)


def _kept_store(body: nn.Module) -> CopyStore:
    if body not in _COPY_STORES:
        _COPY_STORES[body] = CopyStore(keep=True)
    return _COPY_STORES[body]


def _write_folded(out: Tensor, weight: Tensor, scale: Tensor | None, scratch: Tensor | None = None) -> None:
    """out = weight * scale (per input column), or a plain copy without scale. Where out's dtype differs from the
    product's, the product goes through `scratch` (a kept buffer of the product's dtype, at least as large), since
    torch.mul into an out of another dtype allocates a temporary as large as the weight."""
    if scale is None:
        out.copy_(weight)
    elif scratch is None or out.dtype == torch.promote_types(weight.dtype, scale.dtype):
        torch.mul(weight, scale, out=out)
    else:
        product = scratch.view(-1)[: weight.numel()].view(weight.shape)
        torch.mul(weight, scale, out=product)
        out.copy_(product)


def _write_rotated_half(out: Tensor, weight: Tensor, scale: Tensor, head_dim: int, scratch: Tensor | None = None) -> None:
    """out = rotate_half applied to weight's rows head by head ([-second half; first half]), folded by scale."""
    halves, written = weight.unflatten(0, (-1, 2, head_dim // 2)), out.unflatten(0, (-1, 2, head_dim // 2))
    _write_folded(written[:, 0], halves[:, 1], -scale, scratch)
    _write_folded(written[:, 1], halves[:, 0], scale, scratch)


def _fold_scale(norm: nn.Module, hidden_size: int) -> Tensor:
    """The RMSNorm weight and sqrt(hidden size) that fold into the columns of the matrix after the norm."""
    return norm.weight.detach() * math.sqrt(hidden_size)


def _fuse_layer(layer: nn.Module, *, head_dim: int, dtype: torch.dtype, store: CopyStore, index: int) -> FusedLayer:
    attention, mlp = layer.self_attn, layer.mlp
    q, k, v = attention.q_proj, attention.k_proj, attention.v_proj
    hidden_size = q.weight.shape[1]
    device = q.weight.device

    def rotated_half(bias: Tensor) -> Tensor:
        heads = bias.unflatten(0, (-1, head_dim))
        return torch.cat([-heads[:, head_dim // 2 :], heads[:, : head_dim // 2]], dim=1).flatten()

    def joined(parts: list[Tensor | None], name: str) -> Tensor | None:
        if any(part is None for part in parts):
            return None
        joined_bias = torch.cat(parts)
        return store.buffer((index, name), tuple(joined_bias.shape), dtype, device).copy_(joined_bias)

    with torch.no_grad():
        # [q; k; rotate_half(q); rotate_half(k); v], each with the input norm folded in
        query_key_width = q.out_features + k.out_features
        attention_scale = _fold_scale(layer.input_layernorm, hidden_size)
        attention_weight = store.buffer(
            (index, "attention"), (2 * query_key_width + v.out_features, hidden_size), dtype, device
        )
        query_key, query_key_rotated, value = attention_weight.split(
            [query_key_width, query_key_width, v.out_features]
        )
        folded = (q.weight, k.weight, v.weight, mlp.gate_proj.weight, mlp.up_proj.weight)
        scratch = store.buffer(("scratch",), (max(weight.numel() for weight in folded),), q.weight.dtype, device)
        for module, rows in ((q, slice(0, q.out_features)), (k, slice(q.out_features, query_key_width))):
            _write_folded(query_key[rows], module.weight, attention_scale, scratch)
            _write_rotated_half(query_key_rotated[rows], module.weight, attention_scale, head_dim, scratch)
        _write_folded(value, v.weight, attention_scale, scratch)
        query_key_bias = None if q.bias is None or k.bias is None else torch.cat([q.bias, k.bias])
        attention_bias = (
            None if query_key_bias is None or v.bias is None
            else joined([query_key_bias, rotated_half(query_key_bias), v.bias], "attention_bias")
        )
        # [gate; up] with the post-attention norm folded in
        mlp_scale = _fold_scale(layer.post_attention_layernorm, hidden_size)
        gate_up_weight = store.buffer(
            (index, "gate_up"), (mlp.gate_proj.out_features + mlp.up_proj.out_features, hidden_size), dtype, device
        )
        gate, up = gate_up_weight.split([mlp.gate_proj.out_features, mlp.up_proj.out_features])
        _write_folded(gate, mlp.gate_proj.weight, mlp_scale, scratch)
        _write_folded(up, mlp.up_proj.weight, mlp_scale, scratch)
        return FusedLayer(
            attention_norm=UnitRMS.of(layer.input_layernorm, hidden_size, q.weight),
            attention=Matrix(attention_weight, attention_bias),
            output=_plain_copy(attention.o_proj, dtype, store, (index, "output")),
            mlp_norm=UnitRMS.of(layer.post_attention_layernorm, hidden_size, q.weight),
            gate_up=Matrix(gate_up_weight, joined([mlp.gate_proj.bias, mlp.up_proj.bias], "gate_up_bias")),
            down=_plain_copy(mlp.down_proj, dtype, store, (index, "down")),
            query_key_width=query_key_width,
            head_dim=head_dim,
        )


def _plain_copy(module: nn.Module, dtype: torch.dtype, store: CopyStore, key: tuple) -> Matrix | None:
    """A plain Linear's copy in `dtype`, in the store's buffer; None for anything else (LoRA, quantised layers),
    which runs its own forward."""
    if type(module) is not nn.Linear:
        return None
    weight = store.buffer(key, tuple(module.weight.shape), dtype, module.weight.device)
    weight.copy_(module.weight.detach())
    return Matrix(weight, _bias_copy(module.bias, dtype, store, key))


def _bias_copy(bias: Tensor | None, dtype: torch.dtype, store: CopyStore, key: tuple) -> Tensor | None:
    """A copy of a bias in the store's buffer, written in place like the weights' copies (a captured decoding
    step reads it there: trainer.decoding.static_decode)."""
    if bias is None:
        return None
    return store.buffer((*key, "bias"), tuple(bias.shape), dtype, bias.device).copy_(bias.detach())


@dataclass(frozen=True)
class FoldedHead:
    """The final RMSNorm and the LM head as one UnitRMS and one product (the head's own forward when it is
    not a plain Linear, e.g. a LoRA-adapted head or the float32 head of bf16-mixed)."""

    head: nn.Module
    norm: nn.Module
    unit: UnitRMS
    matrix: Matrix | None

    def __call__(self, hidden: Tensor) -> Tensor:
        if self.matrix is None:
            return self.head(_rms_norm(hidden, self.norm))
        return self.matrix(self.unit(hidden))


def folded_head(
    head: nn.Module, norm: nn.Module, dtype: torch.dtype | None = None, *, rows: int = 1, store: CopyStore | None = None
) -> FoldedHead:
    """The head's copy in `dtype` (its own by default) has its own FUSED_WEIGHTS_MAX_BYTES: a large vocabulary
    runs the head's own forward. A float32 head, and one that keeps float32 under bf16-mixed (models.Float32Head;
    its copy stands in for the one autocast would have made of a bf16 head), gets the faster float32 copy for
    products of `rows` rows (Matrix.fastest_float32)."""
    plain = type(head) is nn.Linear
    float32_kept = isinstance(head, nn.Linear) and getattr(head, "keeps_float32", False)
    dtype = dtype or (head.weight.dtype if plain else norm.weight.dtype)
    small = plain and _nbytes(head) <= FUSED_WEIGHTS_MAX_BYTES
    float32_copy = (float32_kept and dtype != head.weight.dtype) or (small and dtype == torch.float32 == head.weight.dtype)
    copied = plain and (dtype != head.weight.dtype or _nbytes(head) <= FUSED_WEIGHTS_MAX_BYTES)
    matrix = None
    if float32_copy or copied:
        store = store or CopyStore(keep=False)
        weight = store.buffer(("head",), tuple(head.weight.shape), torch.float32 if float32_copy else dtype, head.weight.device)
        with torch.no_grad():
            _write_folded(weight, head.weight.detach(), _fold_scale(norm, head.weight.shape[1]))
            bias = _bias_copy(head.bias, weight.dtype, store, ("head",))
            matrix = Matrix.fastest_float32(weight, bias, rows) if float32_copy else Matrix(weight, bias)
    return FoldedHead(head=head, norm=norm, unit=UnitRMS.of(norm, norm.weight.shape[0], norm.weight), matrix=matrix)


def _rms_norm(hidden: Tensor, norm: nn.Module) -> Tensor:
    if hidden.dtype == torch.float32:
        return F.rms_norm(hidden, (hidden.shape[-1],), norm.weight, eps=norm.variance_epsilon)
    # computed in float32 and cast back before the weight, as the transformers RMSNorm does
    normed = F.rms_norm(hidden.float(), (hidden.shape[-1],), eps=norm.variance_epsilon)
    return norm.weight * normed.to(hidden.dtype)


def _linear(module: nn.Module, x: Tensor) -> Tensor:
    # a plain Linear is called as a function (module dispatch costs more than the product here);
    # anything else (LoRA, quantised layers, the fp32 head of bf16-mixed) through its own forward
    if type(module) is nn.Linear:
        return products.linear(x, module.weight, module.bias)
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
