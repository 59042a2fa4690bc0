"""Log-probabilities of completion tokens: of right-padded prompt + completion batches (offline kinds) and
of sampled groups (`completion_logprobs`, online kinds, at the sampling temperature: trainer.decoding.generation).

The log-prob of token t comes from the logits at position t - 1. Only positions from the shortest prompt
on are sent through the LM head (`logits_to_keep`), which saves most of the head's compute and memory
on long prompts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedModel

from trainer.algorithms.losses import entropy_from_logprobs
from trainer.decoding.generation import GroupSamples
from trainer.formats.data import SequenceBatch
from trainer.modeling.selective_forward import (
    head_logits,
    hidden_states_at,
    padded_causal_allowed,
    position_ids_from_mask,
    supports_selective_forward,
)
from trainer.modeling.shared_prefix import (
    pack_groups,
    packed_group_hidden_states,
    packing_groups_pays,
    supports_shared_prefix,
)


def completion_token_logps(
    model: PreTrainedModel, batch: SequenceBatch, *, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """(logps [N, K], mask [N, K]): per-token log-probs of the completion tokens, 0 elsewhere.

    K = T - min_prompt_length: the positions from the shortest prompt's end to the last token.
    """
    width = batch.input_ids.shape[1]
    keep = width - batch.min_prompt_length + 1
    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        use_cache=False,
        logits_to_keep=keep,
    ).logits[:, :-1]
    targets = batch.input_ids[:, width - keep + 1 :]
    mask = batch.completion_mask[:, width - keep + 1 :]
    if temperature != 1.0:
        logits = logits / temperature
    # cross_entropy is a fused log_softmax + gather: no [N, K, V] log-prob tensor is materialised
    logps = -F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    ).view_as(targets)
    return logps * mask, mask


def sequence_logps(
    model: PreTrainedModel, batch: SequenceBatch, *, average: bool = False
) -> tuple[Tensor, Tensor]:
    """(logps [N], lengths [N]): summed (or, with `average`, length-averaged) completion log-probs."""
    token_logps, mask = completion_token_logps(model, batch)
    lengths = mask.sum(dim=1)
    summed = token_logps.sum(dim=1)
    return (summed / lengths.clamp(min=1) if average else summed), lengths


def completion_logprobs(
    model: PreTrainedModel,
    samples: GroupSamples,
    *,
    temperature: float,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    share_prompt: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs [B*G, T] of the sampled completions under `model`, at the sampling temperature.

    The same convention as sampling (module docstring), so ratio = exp(this - samples.logprobs) is 1 for
    the sampling weights. With `with_entropy`, also the per-token entropy [B*G, T] of that distribution,
    detached unless `entropy_grad` (an entropy bonus needs its gradient, a logged metric does not).
    With `share_prompt`, where the architecture allows it, a group's prompt is computed once for its G
    completions (trainer.modeling.shared_prefix.pack_groups); the numbers are those of G separate sequences.
    """
    completion = samples.completion_ids
    if share_prompt and _packing_groups_pays(model, samples):
        packed = pack_groups(samples.prompt_ids, samples.prompt_mask, completion, samples.completion_mask)
        hidden = packed_group_hidden_states(model, packed)
        logits = head_logits(model, hidden)
    else:
        logits = _unshared_completion_logits(model, samples)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    # one log_softmax over the vocabulary serves the log-probs and the entropy (each pass is B*G*T*V floats)
    all_logprobs = logits.log_softmax(dim=-1)
    logprobs = all_logprobs.gather(-1, completion[..., None]).squeeze(-1)
    logprobs = logprobs * samples.completion_mask
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_logprobs(all_logprobs if entropy_grad else all_logprobs.detach())
    return logprobs, entropy


def _packing_groups_pays(model: PreTrainedModel, samples: GroupSamples) -> bool:
    group = samples.group_size
    return (
        group > 1
        and supports_shared_prefix(model)
        and packing_groups_pays(model, samples.prompt_ids.shape[1], samples.completion_ids.shape[1], group)
    )


def _unshared_completion_logits(model: PreTrainedModel, samples: GroupSamples) -> Tensor:
    """[B*G, T, V] logits predicting each completion token, every completion behind its own prompt copy."""
    group = samples.group_size
    completion = samples.completion_ids
    width = completion.shape[1]
    input_ids = torch.cat([samples.prompt_ids.repeat_interleave(group, dim=0), completion], dim=1)
    attention = torch.cat([samples.prompt_mask.repeat_interleave(group, dim=0), samples.completion_mask], dim=1)
    positions = position_ids_from_mask(attention)
    if supports_selective_forward(model):
        # the logits that predict the completion tokens: positions P-1 .. P+T-2 of the left-padded prompt P
        prompt_width = samples.prompt_ids.shape[1]
        read = torch.arange(prompt_width - 1, prompt_width + width - 1, device=input_ids.device).expand(len(input_ids), -1)
        hidden = hidden_states_at(model, input_ids, padded_causal_allowed(attention), positions, read)
        return head_logits(model, hidden)
    return model(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=False, logits_to_keep=width + 1
    ).logits[:, :-1].float()
