"""Reward model: a sequence classifier with one output, trained with the Bradley-Terry loss on
preference pairs (optional per-pair weight and margin, optional centring term). Each pair goes through
the model as one row whose shared prefix is computed once, and the last layer runs only at the two
scored tokens (trainer.modeling.shared_prefix, trainer.modeling.selective_forward).

eval/accuracy is the fraction of held-out pairs scored chosen > rejected; eval/margin their mean gap.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from trainer.algorithms.losses import bradley_terry_loss
from trainer.config import RewardModelConfig
from trainer.formats.data import PairExample, collate_pairs, tokenize_pairs
from trainer.loop import (
    LoopParts,
    MicroBatchOutput,
    TrainResult,
    run_steps,
    start_run,
)
from trainer.modeling.models import load_reward_model
from trainer.modeling.shared_prefix import pack_pairs, packed_pair_scores, supports_shared_prefix
from trainer.sink import Sink


def pair_scores(
    model: PreTrainedModel, pairs: Sequence[PairExample], *, pad_token_id: int, share_prefix: bool
) -> tuple[Tensor, Tensor, int]:
    """(chosen scores [B], rejected scores [B], tokens of the chosen and rejected sequences)."""
    if share_prefix:
        packed = pack_pairs(pairs, pad_token_id=pad_token_id).to(model.device)
        chosen, rejected = packed_pair_scores(model, packed)
        return chosen, rejected, packed.sequence_tokens
    batch = collate_pairs(pairs, pad_token_id=pad_token_id).to(model.device)
    scores = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits
    scores = scores.squeeze(-1).float()
    return scores[: len(pairs)], scores[len(pairs) :], batch.tokens


def preference_metrics(chosen: Tensor, rejected: Tensor) -> dict[str, float]:
    """The dashboards' metric names, means over the pairs; `chosen`/`rejected` are rewards [B]."""
    return {
        "rewards/chosen": chosen.mean().item(),
        "rewards/rejected": rejected.mean().item(),
        "rewards/accuracy": (chosen > rejected).float().mean().item(),
        "rewards/margin": (chosen - rejected).mean().item(),
    }


class RewardObjective:
    def __init__(
        self,
        model: PreTrainedModel,
        pairs: Sequence[PairExample],
        *,
        pad_token_id: int,
        center_coef: float,
        share_prefix: bool,
    ) -> None:
        self.model = model
        self.share_prefix = share_prefix and supports_shared_prefix(model)
        self.pairs = pairs
        self.pad_token_id = pad_token_id
        self.center_coef = center_coef

    def micro_batches(self, indices: list[int], chunks: list[list[int]]) -> Iterator[MicroBatchOutput]:
        step_weight = sum(self.pairs[i].weight for i in indices)
        for chunk in chunks:
            pairs = [self.pairs[i] for i in chunk]
            chosen, rejected, tokens = pair_scores(self.model, pairs, pad_token_id=self.pad_token_id, share_prefix=self.share_prefix)
            weights = torch.tensor([pair.weight for pair in pairs], device=chosen.device)
            margins = torch.tensor([pair.margin for pair in pairs], device=chosen.device)
            loss = bradley_terry_loss(
                chosen,
                rejected,
                margin=margins if margins.any() else None,
                weights=weights,
                center_coef=self.center_coef,
            )
            # bradley_terry_loss normalises by this micro-batch's weight; rescale to the step's total weight
            scale = weights.sum().item() / step_weight if step_weight > 0 else 0.0
            yield MicroBatchOutput(loss * scale, preference_metrics(chosen.detach(), rejected.detach()), tokens)

    @torch.no_grad()
    def evaluate(self, pairs: Sequence[PairExample], batch_size: int) -> dict[str, float]:
        self.model.eval()
        chosen, rejected = [], []
        for start in range(0, len(pairs), batch_size):
            c, r, _ = pair_scores(
                self.model, pairs[start : start + batch_size], pad_token_id=self.pad_token_id, share_prefix=self.share_prefix
            )
            chosen.append(c)
            rejected.append(r)
        self.model.train()
        metrics = preference_metrics(torch.cat(chosen), torch.cat(rejected))
        return {"eval/accuracy": metrics["rewards/accuracy"], "eval/margin": metrics["rewards/margin"]}


def train(
    config: RewardModelConfig, data: Sequence[dict], sink: Sink, *, eval_data: Sequence[dict] | None = None
) -> TrainResult:
    start = start_run(config)
    tokenizer = start.tokenizer
    pairs = tokenize_pairs(data, tokenizer, start.limits, add_eos=True)
    eval_pairs = tokenize_pairs(eval_data, tokenizer, start.limits, add_eos=True, name="eval data") if eval_data else None
    model = load_reward_model(start.weights, pad_token_id=tokenizer.pad_token_id, **start.model_options)
    objective = RewardObjective(
        model,
        pairs,
        pad_token_id=tokenizer.pad_token_id,
        center_coef=config.center_coef,
        share_prefix=config.share_prefix,
    )
    parts = LoopParts(
        config=config,
        model=model,
        tokenizer=tokenizer,
        objective=objective,
        dataset_size=len(pairs),
        evaluate=(lambda: objective.evaluate(eval_pairs, config.batch_size)) if eval_pairs else None,
        resume_state=start.resume_state,
        precision=start.precision,
    )
    return run_steps(parts, sink)
