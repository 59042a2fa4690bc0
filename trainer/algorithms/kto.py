"""Kahneman-Tversky Optimisation (Ethayarajh et al. 2024) on unpaired rows: a prompt, one completion and whether it
is desirable (a thumbs up) or not; the loss is losses.kto_loss, as TRL 1.16's KTOTrainer (loss_type "kto") computes it.

The reference point z0 is estimated per micro-batch as TRL does: each prompt is paired with the previous row's
completion (the first row with the last one's), and z0 = max(0, mean(policy - reference log-ratio)) over those
mismatched sequences, detached. The policy scores the rows' own sequences with a gradient and the mismatched ones in
a forward without; the reference scores both at once, each row's pair packed into one row whose shared prompt is
computed once (the DPO machinery: dpo.pair_batch, the row's own sequence as `chosen`, the mismatched one as
`rejected`).

The reference is kept for the whole run (a model of its own, or with LoRA the policy with its adapters disabled):
the mismatched pairs change with every step's rows, so their reference log-probs cannot be computed beforehand.

Metrics: rewards/chosen and rewards/rejected (the mean implicit reward beta * log-ratio of the step's desirable and
undesirable rows), rewards/margin (their difference), kl (z0), logps/chosen, logps/rejected.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from trainer.algorithms.dpo import pair_batch, pair_sequence_logps, run_policy_steps
from trainer.algorithms.logprobs import sequence_logps
from trainer.algorithms.losses import kto_kl, kto_loss
from trainer.config import KTOConfig
from trainer.formats.data import UnpairedExample, check_rows, collate, mismatched_pairs, tokenize_unpaired
from trainer.loop import MicroBatchOutput, TrainResult, start_run
from trainer.modeling.models import Reference, load_policy, load_reference_for
from trainer.modeling.shared_prefix import supports_shared_prefix
from trainer.sink import Sink


class KTOObjective:
    def __init__(
        self,
        model: PreTrainedModel,
        examples: Sequence[UnpairedExample],
        config: KTOConfig,
        *,
        pad_token_id: int,
        reference: Reference,
    ) -> None:
        self.model = model
        self.examples = examples
        self.config = config
        self.pad_token_id = pad_token_id
        self.reference = reference
        self.share_prefix = config.share_prefix and supports_shared_prefix(reference.model)

    def micro_batches(self, indices: list[int], chunks: list[list[int]]) -> Iterator[MicroBatchOutput]:
        step_labels = [self.examples[i].label for i in indices]
        desirable, undesirable = sum(step_labels), len(step_labels) - sum(step_labels)
        device = self.model.device
        for micro in chunks:
            examples = [self.examples[i] for i in micro]
            rows = len(micro)
            pairs = mismatched_pairs(examples, max_length=self.config.max_length)
            own = collate([pair.chosen for pair in pairs], pad_token_id=self.pad_token_id).to(device)
            logps = sequence_logps(self.model, own)[0]
            with torch.no_grad():
                # the KL sequences take no gradient: a forward of their own costs less than backward through them
                mismatched = collate([pair.rejected for pair in pairs], pad_token_id=self.pad_token_id).to(device)
                kl_logps = sequence_logps(self.model, mismatched)[0]
                both = pair_batch(pairs, pad_token_id=self.pad_token_id, share_prefix=self.share_prefix, device=device)
                with self.reference.active() as reference:
                    ref_logps = pair_sequence_logps(reference, both, average=False)[0]
            labels = torch.tensor([example.label for example in examples], device=logps.device)
            kl = kto_kl(kl_logps, ref_logps[rows:])
            losses, rewards = kto_loss(
                logps,
                ref_logps[:rows],
                labels,
                kl,
                beta=self.config.beta,
                desirable_weight=self.config.desirable_weight,
                undesirable_weight=self.config.undesirable_weight,
            )
            metrics = _metrics(kl, rewards, logps.detach(), labels, desirable, undesirable, len(indices) / rows)
            yield MicroBatchOutput(losses.sum() / len(indices), metrics, own.tokens + mismatched.tokens)


def _metrics(
    kl: Tensor, rewards: Tensor, logps: Tensor, labels: Tensor, desirable: int, undesirable: int, micro_batches: float
) -> dict[str, float]:
    """A micro-batch's metrics. The loop averages a metric over a step's micro-batches; the chosen and rejected ones
    are means over the step's desirable and undesirable rows, of which a micro-batch may hold few or none."""
    metrics = {"kl": kl.item()}
    for name, rows, count in (("chosen", labels, desirable), ("rejected", ~labels, undesirable)):
        if count:
            metrics[f"rewards/{name}"] = _step_mean(rewards[rows], count, micro_batches)
            metrics[f"logps/{name}"] = _step_mean(logps[rows], count, micro_batches)
    if desirable and undesirable:
        metrics["rewards/margin"] = metrics["rewards/chosen"] - metrics["rewards/rejected"]
    return metrics


def _step_mean(values: Tensor, step_count: int, micro_batches: float) -> float:
    """This micro-batch's part of a mean over `step_count` rows of the step, scaled so that the loop's average over
    the step's `micro_batches` micro-batches is that mean."""
    return values.sum().item() * micro_batches / step_count


def train(config: KTOConfig, data: Sequence[dict], sink: Sink, *, eval_data: Sequence[dict] | None = None) -> TrainResult:
    start = start_run(config)
    examples = tokenize_unpaired(data, start.tokenizer, start.limits)
    if eval_data:
        # held-out rows only need a prompt (and an answer, for eval/accuracy): the policy is judged by generation
        check_rows(eval_data, ("prompt",), name="eval data", unpaired=True)
    # with LoRA the policy is its own reference (adapters off): it is loaded first
    model = load_policy(start.weights, **start.model_options)
    reference = load_reference_for(config.reference_model or config.model, model, precision=start.precision)
    objective = KTOObjective(model, examples, config, pad_token_id=start.tokenizer.pad_token_id, reference=reference)
    return run_policy_steps(config, start, model, objective, len(examples), data, eval_data, sink)
