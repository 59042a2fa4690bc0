"""One forward per preference pair: the tokens chosen and rejected share are computed once.

Chosen and rejected always share the prompt, and often more (a common reasoning prefix before the answers
differ). In a causal model the hidden states of a shared prefix do not depend on what follows, so each
pair is packed into one row, `[prefix | chosen suffix | rejected suffix]`, with an attention mask that
lets each suffix see the prefix and itself but not the other suffix, and position ids that restart the
rejected suffix where the prefix ends. The results equal those of two separate sequences (tested to
1e-5) at the cost of len(prefix) fewer tokens per pair: the prefix-sharing idea of Wang et al. (2024),
"Accelerating Direct Preference Optimization with Prefix Sharing".

Rows of the log-prob outputs follow `collate_pairs`: chosen 0..B-1, then rejected B..2B-1.

The same packing serves a GRPO group (`pack_groups`): `[prompt | completion 1 | ... | completion G]`, each
completion seeing the prompt and itself, so the prompt is computed once for its G completions instead of
G times, in the policy's training forward and in the reference's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel

from trainer.devices import HOST
from trainer.formats.data import PairExample
from trainer.modeling.selective_forward import (
    GroupBlocks,
    head_logits,
    hidden_states_at,
    position_ids_from_mask,
    supports_selective_forward,
    unwrapped,
)


@dataclass
class PackedPairs:
    """B pairs, one right-padded row each.

    input_ids, position_ids [B, W]; allowed [B, 1, W, W]: True where a query position may attend a key.
    chosen_last, rejected_last [B]: packed positions of each sequence's last token.
    predict_positions, targets, completion_mask [2B, K]: for every completion token (chosen rows first),
    the packed position whose logits predict it, the token, and 1 on real entries.
    read_start: the earliest predicting position of any row.
    sequence_tokens: tokens of the unpacked chosen + rejected sequences (what throughput counts).
    """

    input_ids: Tensor
    position_ids: Tensor
    allowed: Tensor
    chosen_last: Tensor
    rejected_last: Tensor
    predict_positions: Tensor
    targets: Tensor
    completion_mask: Tensor
    read_start: int
    sequence_tokens: int

    def to(self, device: torch.device) -> PackedPairs:
        counts = ("read_start", "sequence_tokens")
        moved = {name: getattr(self, name).to(device) for name in self.__dataclass_fields__ if name not in counts}
        return PackedPairs(**moved, read_start=self.read_start, sequence_tokens=self.sequence_tokens)


def shared_length(chosen: Sequence[int], rejected: Sequence[int]) -> int:
    """Length of the common prefix, leaving each sequence at least one token of its own."""
    limit = min(len(chosen), len(rejected)) - 1
    length = 0
    while length < limit and chosen[length] == rejected[length]:
        length += 1
    return max(length, 0)


def pack_pairs(pairs: Sequence[PairExample], *, pad_token_id: int) -> PackedPairs:
    layouts = [_pair_layout(pair) for pair in pairs]
    width = max(layout.width for layout in layouts)
    completions = [pair.chosen.input_ids[pair.chosen.prompt_length :] for pair in pairs]
    completions += [pair.rejected.input_ids[pair.rejected.prompt_length :] for pair in pairs]
    predicts = [layout.chosen_predict for layout in layouts] + [layout.rejected_predict for layout in layouts]
    completion_width = max(len(tokens) for tokens in completions)
    segments = _padded([layout.segments for layout in layouts], width, PADDING)
    return PackedPairs(
        input_ids=_padded([layout.ids for layout in layouts], width, pad_token_id),
        position_ids=_padded([layout.positions for layout in layouts], width, 0),
        allowed=_attention_allowed(segments)[:, None],
        chosen_last=torch.tensor([layout.chosen_length - 1 for layout in layouts], dtype=torch.long, device=HOST),
        rejected_last=torch.tensor([layout.width - 1 for layout in layouts], dtype=torch.long, device=HOST),
        predict_positions=_padded(predicts, completion_width, 0),
        targets=_padded(completions, completion_width, pad_token_id),
        completion_mask=_padded([[1] * len(tokens) for tokens in completions], completion_width, 0),
        read_start=min((predict[0] for predict in predicts if predict), default=0),
        sequence_tokens=sum(len(p.chosen.input_ids) + len(p.rejected.input_ids) for p in pairs),
    )


# segment ids of packed positions; a group's completions are numbered 1..G like CHOSEN and REJECTED
PREFIX, CHOSEN, REJECTED, PADDING = 0, 1, 2, -1


def _padded(rows: Sequence[Sequence[int]], width: int, value: int) -> Tensor:
    return torch.tensor([[*row, *([value] * (width - len(row)))] for row in rows], dtype=torch.long, device=HOST)


def _attention_allowed(segments: Tensor) -> Tensor:
    """[B, W, W]: causal; a suffix sees the prefix and itself, not the other suffixes."""
    width, device = segments.shape[1], segments.device
    query, key = segments[:, :, None], segments[:, None, :]
    causal = torch.ones((width, width), dtype=torch.bool, device=device).tril()
    visible = (key == PREFIX) | ((key == query) & (query != PADDING))
    # padding queries attend to themselves only, so no softmax row is empty (NaN)
    return (causal & visible) | torch.eye(width, dtype=torch.bool, device=device)


@dataclass(frozen=True)
class _PairLayout:
    ids: list[int]
    positions: list[int]
    segments: list[int]
    chosen_length: int
    chosen_predict: list[int]
    rejected_predict: list[int]

    @property
    def width(self) -> int:
        return len(self.ids)


def _pair_layout(pair: PairExample) -> _PairLayout:
    chosen, rejected = pair.chosen.input_ids, pair.rejected.input_ids
    shared = shared_length(chosen, rejected)
    rejected_offset = len(chosen) - shared  # packed position = original position + offset, past the prefix

    def packed_rejected(position: int) -> int:
        return position if position < shared else position + rejected_offset

    return _PairLayout(
        ids=[*chosen, *rejected[shared:]],
        positions=[*range(len(chosen)), *range(shared, len(rejected))],
        segments=[PREFIX] * shared + [CHOSEN] * (len(chosen) - shared) + [REJECTED] * (len(rejected) - shared),
        chosen_length=len(chosen),
        # token t is predicted by the logits at t - 1
        chosen_predict=list(range(pair.chosen.prompt_length - 1, len(chosen) - 1)),
        rejected_predict=[packed_rejected(t - 1) for t in range(pair.rejected.prompt_length, len(rejected))],
    )


def supports_shared_prefix(model: PreTrainedModel) -> bool:
    """Llama-family models whose head is a plain linear map of the last hidden state; others (logit
    soft-capping, sliding windows...) keep two sequences per pair."""
    if not supports_selective_forward(model):
        return False
    inner = unwrapped(model)
    head = getattr(inner, "score", None) if _is_classifier(inner) else inner.get_output_embeddings()
    return isinstance(head, nn.Module)


def _is_classifier(model: PreTrainedModel) -> bool:
    return getattr(model.config, "num_labels", None) == 1 and hasattr(model, "score")


def packed_pair_scores(model: PreTrainedModel, packed: PackedPairs) -> tuple[Tensor, Tensor]:
    """(chosen [B], rejected [B]) scalar scores of a one-label sequence classifier, at each last token."""
    read = torch.stack([packed.chosen_last, packed.rejected_last], dim=1)
    hidden = hidden_states_at(model, packed.input_ids, packed.allowed, packed.position_ids, read)
    scores = unwrapped(model).score(hidden).squeeze(-1).float()
    return scores[:, 0], scores[:, 1]


def packed_completion_logps(model: PreTrainedModel, packed: PackedPairs) -> tuple[Tensor, Tensor]:
    """(per-token log-probs [2B, K], mask [2B, K]) of the completion tokens; only those positions reach the head."""
    count, width = packed.input_ids.shape
    device = packed.input_ids.device
    # every row reads from the earliest predicting position on: one contiguous slice serves chosen and rejected
    read = torch.arange(packed.read_start, width, device=device).expand(count, -1)
    hidden = hidden_states_at(model, packed.input_ids, packed.allowed, packed.position_ids, read)
    pair_rows = torch.arange(count, device=device).repeat(2)[:, None]
    selected = hidden[pair_rows, (packed.predict_positions - packed.read_start).clamp(min=0)]
    logits = head_logits(model, selected)
    # cross_entropy is a fused log_softmax + gather
    logps = -F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), packed.targets.reshape(-1), reduction="none"
    ).view_as(packed.targets)
    return logps * packed.completion_mask, packed.completion_mask


def packed_sequence_logps(model: PreTrainedModel, packed: PackedPairs, *, average: bool = False) -> tuple[Tensor, Tensor]:
    """(logps [2B], lengths [2B]), chosen rows first: summed or length-averaged completion log-probs."""
    token_logps, mask = packed_completion_logps(model, packed)
    lengths = mask.sum(dim=1)
    summed = token_logps.sum(dim=1)
    return (summed / lengths.clamp(min=1) if average else summed), lengths


@dataclass
class PackedGroups:
    """B prompts with G completions each, one row per prompt: `[prompt | completion 1 | ... | completion G]`.

    input_ids, position_ids [B, P + G*T] (the prompt left-padded to P, each completion right-padded to T);
    allowed [B, 1, W, W]; read [B, G*T]: for token t of completion g (at g*T + t), the packed position
    whose hidden state predicts it.
    """

    input_ids: Tensor
    position_ids: Tensor
    allowed: Tensor
    read: Tensor
    completion_width: int
    blocks: GroupBlocks


def pack_groups(prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor) -> PackedGroups:
    """prompt_ids, prompt_mask [B, P] left-padded; completion_ids, completion_mask [B*G, T] right-padded,
    rows g*G .. g*G + G-1 being the completions of prompt g."""
    count, prompt_width = prompt_ids.shape
    rows, width = completion_ids.shape
    group, device = rows // count, prompt_ids.device
    completion_numbers = torch.arange(1, group + 1, device=device).repeat_interleave(width)
    segments = torch.cat(
        [
            torch.where(prompt_mask.bool(), PREFIX, PADDING),
            torch.where(completion_mask.bool().view(count, group * width), completion_numbers, PADDING),
        ],
        dim=1,
    )
    # every completion continues from the prompt's end, as it would alone behind its own copy of the prompt
    completion_positions = prompt_mask.long().sum(dim=1, keepdim=True) + torch.arange(width, device=device).repeat(group)
    # token t of a completion is predicted at its token t - 1, and its first token at the prompt's last position
    read = prompt_width - 1 + torch.arange(group * width, device=device)
    read[::width] = prompt_width - 1
    allowed = _attention_allowed(segments)[:, None]
    return PackedGroups(
        input_ids=torch.cat([prompt_ids, completion_ids.reshape(count, group * width)], dim=1),
        position_ids=torch.cat([position_ids_from_mask(prompt_mask), completion_positions], dim=1),
        allowed=allowed,
        read=read.expand(count, -1),
        completion_width=width,
        blocks=GroupBlocks.of(allowed, prompt_width, group, width),
    )


# A multiply-add of masked attention costs about three of a projection's: each score also takes a softmax
# (an exp) and a mask read, and attention kernels run dense masks well below matrix-product throughput.
# Measured (policy forward + backward, G=8, CPU): with 3 the choice was right in all 16 cases tried (hidden
# 64 x 2 and 256 x 4 layers, prompts of 8 to 230 tokens, 16 to 64 new tokens); counting 1 chose packing where
# it cost 3 %, 10 % and 31 % more (8 + 16 and 64 + 64 tokens at hidden 64, 8 + 32 at hidden 256).
ATTENTION_COST_PER_MULTIPLY_ADD = 3


def packing_groups_pays(model: PreTrainedModel, prompt_width: int, completion_width: int, group: int) -> bool:
    """Whether one packed row per group costs less than G rows of prompt + completion.

    Packing saves (G-1) copies of the prompt in every projection and MLP, but its row is longer, and the
    attention over a row grows with the square of its length (the masked-out blocks between completions are
    still computed). So it pays for long prompts and short completions, not for a short prompt before long
    completions: with hidden 64 and G=8, packing is 77 % cheaper with a 230-token prompt and 16 new tokens,
    and 12 % dearer with an 8-token prompt (41 % with a 64-token prompt and 64 new tokens).

    The count is that of whole-row attention, which still runs under gradient checkpointing; otherwise the
    layers attend block by block (selective_forward.GroupBlocks: no score between two completions), which makes
    a packed row cheaper than this count, so the rule errs on the side of not packing.
    """
    config = unwrapped(model).config
    hidden = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    key_value_width = config.num_key_value_heads * head_dim
    per_token = hidden * (2 * heads * head_dim + 2 * key_value_width) + 3 * hidden * config.intermediate_size
    per_query_key = 2 * heads * head_dim  # the scores and the weighted values

    def cost(rows: int, width: int) -> int:
        return rows * (width * per_token + ATTENTION_COST_PER_MULTIPLY_ADD * width * width * per_query_key)

    return cost(1, prompt_width + group * completion_width) < cost(group, prompt_width + completion_width)


def packed_group_hidden_states(model: PreTrainedModel, packed: PackedGroups) -> Tensor:
    """[B*G, T, H] final hidden states predicting each completion token (row g*G + i: completion i of prompt g)."""
    hidden = hidden_states_at(
        model, packed.input_ids, packed.allowed, packed.position_ids, packed.read, blocks=packed.blocks
    )
    return hidden.reshape(-1, packed.completion_width, hidden.shape[-1])
