"""Group sampling: G completions per prompt in one batched call, with the sampling log-probs.

Log-prob convention (TRL issue 4159): the log-prob of a sampled token is taken from the *tempered*
distribution `log_softmax(logits / temperature)` over the whole vocabulary, before top-k / top-p
truncation. The training forward (trainer.algorithms.logprobs.completion_logprobs) divides logits by the same temperature, so at
the first inner iteration the policy ratio is exactly 1 and the sampling log-probs can serve as the
old log-probs without a second forward. Truncation only shapes which tokens get drawn; using the
truncated distribution would make the ratio depend on the filter instead of the policy.
Temperature 0 means greedy decoding; its log-probs are then those of the untempered distribution.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor, nn
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from trainer.decoding.fast_decode import KVDecoder, supports_fast_decode
from trainer.decoding.static_decode import DrawRule, static_decoder
from trainer.devices import HOST
from trainer.formats.chat import TextOrConversation, encode_prompt, end_token_ids
from trainer.modeling.distributed import gathered_weights, is_sharded
from trainer.modeling.selective_forward import (
    additive_mask,
    position_ids_from_mask,
)


@dataclass(frozen=True)
class SamplingParams:
    group_size: int = 1
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 turns top-k off
    # no end token is drawn before this many tokens (as transformers' min_new_tokens); for benchmarks that need
    # every completion at full length. Recorded log-probs stay those of the whole distribution.
    min_new_tokens: int = 0

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be >= 0, got {self.min_new_tokens}")


@dataclass
class GroupSamples:
    """Completions of B prompts, G each; row i*G + g is completion g of prompt i.

    prompt_ids, prompt_mask: [B, P], left-padded.
    completion_ids: [B*G, T], right-padded; completion_mask [B*G, T] is 1 on real tokens, up to and including
    the first end token (any of HFGenerationBackend.end_token_ids: EOS, <|im_end|>...).
    truncated: [B*G] bool, True when no end token came within max_new_tokens.
    logprobs: [B*G, T] sampling log-probs (see module docstring), 0 on padding.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor
    truncated: Tensor
    logprobs: Tensor
    texts: list[str]
    group_size: int

    @property
    def lengths(self) -> Tensor:
        return self.completion_mask.sum(dim=1)

    def select_groups(self, groups: Sequence[int]) -> GroupSamples:
        """Whole groups, in the given order."""
        size = self.group_size
        rows = torch.tensor([g * size + i for g in groups for i in range(size)], dtype=torch.long, device=HOST)
        return self._take(torch.tensor(list(groups), dtype=torch.long, device=HOST), rows, size)

    def to(self, device: torch.device | str) -> GroupSamples:
        return dataclasses.replace(
            self,
            prompt_ids=self.prompt_ids.to(device),
            prompt_mask=self.prompt_mask.to(device),
            completion_ids=self.completion_ids.to(device),
            completion_mask=self.completion_mask.to(device),
            truncated=self.truncated.to(device),
            logprobs=self.logprobs.to(device),
        )

    def select_rows(self, rows: Tensor) -> GroupSamples:
        """Any completion rows (e.g. a minibatch); each keeps its own copy of its prompt, so group_size is 1."""
        return self._take(rows // self.group_size, rows, 1)

    def _take(self, prompt_rows: Tensor, rows: Tensor, group_size: int) -> GroupSamples:
        return GroupSamples(
            prompt_ids=self.prompt_ids[prompt_rows],
            prompt_mask=self.prompt_mask[prompt_rows],
            completion_ids=self.completion_ids[rows],
            completion_mask=self.completion_mask[rows],
            truncated=self.truncated[rows],
            logprobs=self.logprobs[rows],
            texts=[self.texts[i] for i in rows.tolist()],
            group_size=group_size,
        )


def concat_samples(parts: Sequence[GroupSamples], *, pad_token_id: int) -> GroupSamples:
    """Join sample batches (e.g. rounds of dynamic sampling), re-padding prompts left and completions right."""
    if len(parts) == 1:
        return parts[0]
    prompt_width = max(p.prompt_ids.shape[1] for p in parts)
    completion_width = max(p.completion_ids.shape[1] for p in parts)

    def pad_left(t: Tensor, value: int) -> Tensor:
        return torch.nn.functional.pad(t, (prompt_width - t.shape[1], 0), value=value)

    def pad_right(t: Tensor, value: float) -> Tensor:
        return torch.nn.functional.pad(t, (0, completion_width - t.shape[1]), value=value)

    return GroupSamples(
        prompt_ids=torch.cat([pad_left(p.prompt_ids, pad_token_id) for p in parts]),
        prompt_mask=torch.cat([pad_left(p.prompt_mask, 0) for p in parts]),
        completion_ids=torch.cat([pad_right(p.completion_ids, pad_token_id) for p in parts]),
        completion_mask=torch.cat([pad_right(p.completion_mask, 0) for p in parts]),
        truncated=torch.cat([p.truncated for p in parts]),
        logprobs=torch.cat([pad_right(p.logprobs, 0.0) for p in parts]),
        texts=[text for p in parts for text in p.texts],
        group_size=parts[0].group_size,
    )


class GenerationBackend(Protocol):
    """Where completions come from: HFGenerationBackend samples from the policy in-process (eagerly, or through a
    captured static-cache step on GPUs); an engine such as vLLM would be another implementation, given the policy's
    weights through sync_weights. The learners, evaluation and the sampling job use only what is declared here."""

    tokenizer: PreTrainedTokenizerBase
    pad_token_id: int
    end_token_ids: list[int]
    # seconds the backend spent preparing to decode (capturing CUDA graphs) since last asked; 0 once it is ready
    setup_seconds: float

    def generate(
        self, prompts: Sequence[TextOrConversation], params: SamplingParams, *, seeds: Sequence[int] | None = None
    ) -> GroupSamples:
        """Sample params.group_size completions for each prompt (text or a conversation), in one batched call;
        `seeds`, one per prompt, make each prompt's completions independent of the batch they are drawn in."""

    def sync_weights(self, model: PreTrainedModel) -> None:
        """Make the backend sample from `model`'s current weights (called after each optimizer step)."""


# how HFGenerationBackend decodes: "eager" (the lean decoder, or the transformers forward where it does not apply),
# "static" (trainer.decoding.static_decode: a static KV cache, its step captured as a CUDA graph on a GPU), "auto" (static on a
# GPU, eager on the CPU, where launching kernels from Python costs little next to the arithmetic)
DECODING_MODES = ("auto", "eager", "static")


def filter_top_k_top_p(logits: Tensor, *, top_k: int, top_p: float) -> Tensor:
    """Set logits outside the top-k / nucleus to -inf. logits [N, V]; keeps at least one token per row."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a token when the mass before it already reaches top_p; the first token always stays
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _sample_next(
    logits: Tensor,
    params: SamplingParams,
    banned: Tensor | None = None,
    uniform: Tensor | None = None,
    ban: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Next tokens [N] and their log-probs [N] under the tempered, untruncated distribution; never a token of
    `banned` (ids), which still count in the log-probs. `uniform` [N]: the draws in [0, 1) to sample with
    (default: fresh ones from torch's generator). `ban`, a 1-element bool tensor: whether `banned` applies to this
    draw, decided on the device (a captured decoding step cannot branch on it in Python); None: it applies."""
    logits = logits.float()
    if params.temperature == 0:
        allowed = logits if banned is None else _without(logits, banned, ban)
        tokens = allowed.argmax(dim=-1)
        return tokens, logits.log_softmax(dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    scaled = logits if params.temperature == 1.0 else logits / params.temperature
    logprobs = scaled.log_softmax(dim=-1)
    allowed = scaled if banned is None else _without(scaled, banned, ban)
    if params.top_k == 1:
        tokens = allowed.argmax(dim=-1)
    else:
        truncating = params.top_k > 0 or params.top_p < 1.0
        filtered = filter_top_k_top_p(allowed, top_k=params.top_k, top_p=params.top_p) if truncating else None
        if truncating:
            probs = filtered.softmax(dim=-1)
        elif banned is None:
            probs = logprobs.exp()
        elif ban is None:
            probs = allowed.softmax(dim=-1)
        else:  # the same numbers as the two branches above, whichever ban says
            probs = torch.where(ban[:, None], allowed.softmax(dim=-1), logprobs.exp())
        tokens = _inverse_cdf_draw(probs, uniform)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def _without(logits: Tensor, banned: Tensor, ban: Tensor | None) -> Tensor:
    """logits with the banned ids at -inf (where `ban` says so, when given)."""
    filled = logits.index_fill(-1, banned, float("-inf"))
    return filled if ban is None else torch.where(ban[:, None], filled, logits)


def _inverse_cdf_draw(probs: Tensor, uniform: Tensor | None = None) -> Tensor:
    """One token per row of probs [N, V]: one uniform number a row against the cumulative distribution
    (a race over V exponential draws costs V random numbers a row, and drawing them dominates sampling).
    The uniform is scaled by the row's own total, so float rounding in the sum can never select past the
    last token, and the first index whose cumulative mass exceeds it always has a probability above 0."""
    cumulative = probs.cumsum(dim=-1)
    if uniform is None:
        uniform = torch.rand(probs.shape[0], device=probs.device, dtype=probs.dtype)
    uniform = uniform.to(probs.dtype)[:, None] * cumulative[:, -1:]
    return torch.searchsorted(cumulative, uniform, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)


class HFGenerationBackend:
    """Samples from an in-process transformers causal LM.

    Each prompt is prefilled once; its KV cache is then repeated G times and the B*G rows decode together
    with our own loop, which records the sampling log-probs on the way. Llama-family models decode through
    trainer.decoding.fast_decode (same numbers, far less per-token overhead); others, or `fast_decode=False`, through
    the model's own forward with a DynamicCache.
    """

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, fast_decode: bool = True, decoding: str = "auto"
    ) -> None:
        if decoding not in DECODING_MODES:
            raise ValueError(f"decoding must be one of {', '.join(DECODING_MODES)}, got {decoding!r}")
        self.tokenizer = tokenizer
        self.fast_decode = fast_decode
        self.decoding = decoding
        self.setup_seconds = 0.0
        self._use(model)
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos_token_id: generation could never stop")
        self.eos_token_id = int(eos)
        # chat models end a turn with other tokens too (<|im_end|>, <|eot_id|>): a completion ends at any of them
        self.end_token_ids = end_token_ids(tokenizer, getattr(model, "generation_config", None))
        self._end_ids = torch.tensor(self.end_token_ids, dtype=torch.long, device=HOST)
        self.pad_token_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)

    def sync_weights(self, model: PreTrainedModel) -> None:
        # Sampling reads the very module being trained (and a static decoding writes its copies of the weights
        # again at every call), so it always sees the current weights; only another model needs deciding anew.
        if model is not self.model:
            self._use(model)

    def _use(self, model: PreTrainedModel) -> None:
        """Sample from `model`, deciding once (not per call) how: the fast decoder or the transformers forward,
        and whether sampling must switch the model to eval mode, which walks every module twice.

        The transformers forward turns its KV cache off under gradient checkpointing in train mode; the fast
        decoder calls no module that behaves differently in train mode except dropout (LoRA's, say).
        """
        self.model = model
        self._fast = self.fast_decode and supports_fast_decode(model)
        # fsdp gathers the weights anew for every call, where a captured step reads them where they were
        on_gpu = model.device.type == "cuda" and not is_sharded(model)
        self._static = self._fast and (self.decoding == "static" or (self.decoding == "auto" and on_gpu))
        self._needs_eval_mode = not self._fast or any(
            isinstance(module, nn.Dropout) and module.p > 0 for module in model.modules()
        )

    def encode_prompts(self, prompts: Sequence[TextOrConversation]) -> tuple[Tensor, Tensor]:
        """Left-padded ids and mask of the prompts, each formatted by trainer.formats.chat.encode_prompt (a conversation
        through the chat template with the generation prompt, text with the tokenizer's special tokens), so a
        sampled prompt has exactly the ids of the training prompt."""
        encoded = [encode_prompt(self.tokenizer, prompt, index=index, name="prompts") for index, prompt in enumerate(prompts)]
        width = max(len(ids) for ids in encoded)
        input_ids = torch.full((len(encoded), width), self.pad_token_id, dtype=torch.long, device=HOST)
        attention_mask = torch.zeros((len(encoded), width), dtype=torch.long, device=HOST)
        for row, ids in enumerate(encoded):
            if ids:
                input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long, device=HOST)
                attention_mask[row, width - len(ids) :] = 1
        device = self.model.device
        return input_ids.to(device), attention_mask.to(device)

    def generate(
        self, prompts: Sequence[TextOrConversation], params: SamplingParams, *, seeds: Sequence[int] | None = None
    ) -> GroupSamples:
        """`seeds`, one per prompt: its completions draw from their own stream seeded by it, so a prompt's
        completions do not depend on which other prompts share the batch (or the process, in a multi-process
        run), and torch's global generator is left untouched. Without seeds, draws come from torch's generator."""
        if not prompts:
            raise ValueError("generate needs at least one prompt")
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        with gathered_weights(self.model) if is_sharded(self.model) else nullcontext():
            if not (self.model.training and self._needs_eval_mode):
                return self._generate(prompts, params, seeds)
            self.model.eval()
            try:
                return self._generate(prompts, params, seeds)
            finally:
                self.model.train()

    @torch.no_grad()
    def _generate(
        self, prompts: Sequence[TextOrConversation], params: SamplingParams, seeds: Sequence[int] | None
    ) -> GroupSamples:
        prompt_ids, prompt_mask = self.encode_prompts(prompts)
        rows = prompt_ids.shape[0] * params.group_size
        device = prompt_ids.device
        end_ids = self._end_ids.to(device)
        # every draw's uniform number is made before the first token (a captured step cannot draw its own)
        if seeds is not None:
            uniforms = seeded_uniforms(seeds, params.group_size, params.max_new_tokens).to(device)
        elif params.temperature > 0 and params.top_k != 1:
            uniforms = torch.rand(rows, params.max_new_tokens, device=device)
        else:  # greedy: nothing is drawn, and torch's generator is left as it is
            uniforms = torch.zeros(rows, params.max_new_tokens, device=device)
        decode = self._decode_static if self._static else self._decode_eager
        tokens, logprobs = decode(prompt_ids, prompt_mask, params, uniforms, end_ids)
        # a static decoding reads whether every row ended only now and then; the batch ends where the eager one would
        steps = steps_until_every_row_ended(tokens, end_ids)
        tokens, logprobs = tokens[:, :steps], logprobs[:, :steps]
        mask = completion_mask_until_end(tokens, end_ids)
        truncated = ~ends_in(tokens, end_ids).any(dim=1)
        tokens = tokens.masked_fill(mask == 0, self.pad_token_id)
        logprobs = logprobs * mask
        return GroupSamples(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=tokens,
            completion_mask=mask,
            truncated=truncated,
            logprobs=logprobs,
            # an end token from generation_config need not be a special token the decoder skips
            texts=self.tokenizer.batch_decode(
                tokens.masked_fill(torch.isin(tokens, end_ids), self.pad_token_id), skip_special_tokens=True
            ),
            group_size=params.group_size,
        )


    def _decode_eager(
        self, prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams, uniforms: Tensor, end_ids: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Tokens and log-probs [B*G, steps], one Python-driven step a token, stopping once every row has ended."""
        group, max_new = params.group_size, params.max_new_tokens
        stepper_class = FastDecodeStepper if self._fast else TransformersStepper
        stepper = stepper_class(self.model, prompt_ids, prompt_mask, group=group, max_new_tokens=max_new)
        logits = stepper.prefill()
        rows = logits.shape[0]
        tokens = torch.full((rows, max_new), self.pad_token_id, dtype=torch.long, device=logits.device)
        logprobs = torch.zeros(rows, max_new, device=logits.device)
        alive = torch.ones(rows, dtype=torch.bool, device=logits.device)
        steps = 0
        for step in range(max_new):
            # rows that already ended keep decoding with the rest; what follows their end token is masked after
            banned = end_ids if step < params.min_new_tokens else None
            tokens[:, step], logprobs[:, step] = _sample_next(logits, params, banned, uniforms[:, step])
            steps = step + 1
            alive &= ~ends_in(tokens[:, step : step + 1], end_ids)[:, 0]
            if step == max_new - 1 or not alive.any():
                break
            logits = stepper.decode(tokens[:, step : step + 1], step)
        return tokens[:, :steps], logprobs[:, :steps]

    def _decode_static(
        self, prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams, uniforms: Tensor, end_ids: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The same tokens through trainer.decoding.static_decode (a captured step on a GPU)."""
        rule = DrawRule(params.temperature, params.top_k, params.top_p, bans_ends=params.min_new_tokens > 0)
        decoded = static_decoder(self.model).decode(
            prompt_ids, prompt_mask, group=params.group_size, max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.min_new_tokens, rule=rule, uniforms=uniforms, end_ids=end_ids,
            sample=lambda logits, banned, uniform, ban: _sample_next(logits, params, banned, uniform, ban),
        )
        self.setup_seconds += decoded.capture_seconds
        return decoded.tokens, decoded.logprobs


def ends_in(tokens: Tensor, end_ids: Tensor) -> Tensor:
    """[N, T] bool: which tokens are end tokens."""
    return (tokens[..., None] == end_ids).any(dim=-1)


def steps_until_every_row_ended(tokens: Tensor, end_ids: Tensor) -> int:
    """The tokens a batch decodes before it stops: up to the last row's first end token, or all of them when a row
    has none."""
    is_end = ends_in(tokens, end_ids)
    if not bool(is_end.any(dim=1).all()):
        return tokens.shape[1]
    return int(is_end.int().argmax(dim=1).max()) + 1


def seeded_uniforms(seeds: Sequence[int], group: int, max_new_tokens: int) -> Tensor:
    """[len(seeds) * group, max_new_tokens] draws in [0, 1): the group rows of prompt i from a generator seeded by
    seeds[i]."""
    return torch.cat([
        torch.rand(group, max_new_tokens, generator=torch.Generator(device=HOST).manual_seed(seed), device=HOST)
        for seed in seeds
    ])


class TransformersStepper:
    """Any transformers causal LM: its own forward with a DynamicCache."""

    def __init__(self, model: PreTrainedModel, prompt_ids: Tensor, prompt_mask: Tensor, *, group: int, max_new_tokens: int) -> None:
        self.model, self.prompt_ids, self.prompt_mask, self.group = model, prompt_ids, prompt_mask, group
        self.cache = DynamicCache(config=model.config)
        self.positions = position_ids_from_mask(prompt_mask)
        rows, width = prompt_ids.shape[0] * group, prompt_ids.shape[1]
        self.attention = torch.ones(rows, width + max_new_tokens, dtype=prompt_mask.dtype, device=prompt_ids.device)
        self.attention[:, :width] = prompt_mask.repeat_interleave(group, dim=0)
        self.next_position = self.positions[:, -1].repeat_interleave(group) + 1

    def prefill(self) -> Tensor:
        """Logits [B*G, V] after each prompt; the prompt is computed once and its cache repeated G times."""
        out = self.model(
            input_ids=self.prompt_ids,
            attention_mask=self.prompt_mask,
            position_ids=self.positions,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache.batch_repeat_interleave(self.group)
        return out.logits[:, -1].repeat_interleave(self.group, dim=0)

    def decode(self, tokens: Tensor, step: int) -> Tensor:
        """Logits [B*G, V] after completion token `step` (tokens [B*G, 1])."""
        width = self.prompt_ids.shape[1]
        out = self.model(
            input_ids=tokens,
            attention_mask=self.attention[:, : width + step + 1],
            position_ids=(self.next_position + step)[:, None],
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits[:, -1]


class FastDecodeStepper:
    """Llama-family models through trainer.decoding.fast_decode: the same numbers, a fraction of the overhead."""

    def __init__(self, model: PreTrainedModel, prompt_ids: Tensor, prompt_mask: Tensor, *, group: int, max_new_tokens: int) -> None:
        self.prompt_ids, self.group = prompt_ids, group
        count, width = prompt_ids.shape
        device = prompt_ids.device
        prompt_positions = position_ids_from_mask(prompt_mask)
        continued = prompt_positions[:, -1:] + 1 + torch.arange(max_new_tokens, device=device)
        self.decoder = KVDecoder(
            model, rows=count, capacity=width + max_new_tokens, positions=torch.cat([prompt_positions, continued], dim=1),
            decode_rows=count * group,
        )
        valid = torch.cat([prompt_mask.bool(), torch.ones(count, max_new_tokens, dtype=torch.bool, device=device)], dim=1)
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        # a left-padding query sees only itself, so no softmax row is empty
        prefill_allowed = (causal & valid[:, None, :width]) | torch.eye(width, dtype=torch.bool, device=device)
        dtype = self.decoder.keys[0].dtype
        self.prefill_bias = additive_mask(prefill_allowed[:, None], dtype)
        self.decode_bias = additive_mask(valid.repeat_interleave(group, dim=0)[:, None, None, :], dtype)

    def prefill(self) -> Tensor:
        logits = self.decoder.forward(self.prompt_ids, self.prefill_bias)
        self.decoder.repeat_rows(self.group)
        return logits.repeat_interleave(self.group, dim=0)

    def decode(self, tokens: Tensor, step: int) -> Tensor:
        return self.decoder.forward(tokens, self.decode_bias[..., : self.prompt_ids.shape[1] + step + 1])


def completion_mask_until_end(tokens: Tensor, end_ids: Tensor) -> Tensor:
    """1 up to and including the first end token (any of `end_ids`; everything when there is none)."""
    is_end = torch.isin(tokens, end_ids).long()
    ends_before = is_end.cumsum(dim=1) - is_end
    return (ends_before == 0).long()
