"""Log-probabilities of completion tokens of right-padded prompt + completion batches.

The log-prob of token t comes from the logits at position t - 1. Only positions from the shortest prompt
on are sent through the LM head (`logits_to_keep`), which saves most of the head's compute and memory
on long prompts.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedModel

from trainer.data import SequenceBatch


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
