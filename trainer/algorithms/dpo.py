"""Direct Preference Optimisation (sigmoid / IPO / hinge, label smoothing) via losses.dpo_loss.

Reference log-probs are computed once before training by default, so the reference model is freed before
the first step; `precompute_ref_logps=False` keeps a live frozen reference instead. With LoRA the reference is
the policy itself with its adapters disabled (trainer.modeling.models.Reference), never a second copy. Each pair goes through
the policy as one row whose shared prefix is computed once (trainer.modeling.shared_prefix; `share_prefix=False`
sends chosen and rejected as two rows of one forward). IPO uses length-averaged log-probs, the others
summed ones.

Held-out rows need a `prompt`; when every one has an `answer`, eval/accuracy is the policy's greedy
exact-match accuracy on them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from trainer.algorithms.evaluation import accuracy_evaluator, sample_writer
from trainer.algorithms.logprobs import sequence_logps
from trainer.algorithms.losses import dpo_loss
from trainer.config import DPOConfig, ReferenceConfig
from trainer.formats.data import PairExample, SequenceBatch, check_rows, collate_pairs, tokenize_pairs
from trainer.loop import (
    LoopParts,
    MicroBatchOutput,
    Objective,
    RunStart,
    TrainResult,
    run_steps,
    start_run,
)
from trainer.modeling.models import Reference, load_policy, load_reference_for
from trainer.modeling.shared_prefix import (
    PackedPairs,
    pack_pairs,
    packed_sequence_logps,
    supports_shared_prefix,
)
from trainer.sink import Sink

PairBatch = PackedPairs | SequenceBatch


def pair_batch(pairs: Sequence[PairExample], *, pad_token_id: int, share_prefix: bool, device: torch.device) -> PairBatch:
    """One row per pair with a shared prefix, or chosen rows then rejected rows."""
    if share_prefix:
        return pack_pairs(pairs, pad_token_id=pad_token_id).to(device)
    return collate_pairs(pairs, pad_token_id=pad_token_id).to(device)


def pair_sequence_logps(model: PreTrainedModel, batch: PairBatch, *, average: bool) -> tuple[Tensor, Tensor]:
    """(logps [2B], lengths [2B]): chosen rows first."""
    if isinstance(batch, PackedPairs):
        return packed_sequence_logps(model, batch, average=average)
    return sequence_logps(model, batch, average=average)


def batch_tokens(batch: PairBatch) -> int:
    """Tokens of the chosen and rejected sequences, however they were laid out."""
    return batch.sequence_tokens if isinstance(batch, PackedPairs) else batch.tokens


@torch.no_grad()
def reference_logps(
    reference: PreTrainedModel,
    pairs: Sequence[PairExample],
    *,
    pad_token_id: int,
    batch_size: int,
    average: bool,
    share_prefix: bool,
) -> Tensor:
    """[N, 2]: (chosen, rejected) completion log-probs of every pair under the reference."""
    share_prefix = share_prefix and supports_shared_prefix(reference)
    columns = []
    for start in range(0, len(pairs), batch_size):
        chunk = pair_batch(
            pairs[start : start + batch_size], pad_token_id=pad_token_id, share_prefix=share_prefix, device=reference.device
        )
        columns.append(pair_sequence_logps(reference, chunk, average=average)[0].view(2, -1).T)
    return torch.cat(columns)


class DPOObjective:
    def __init__(
        self,
        model: PreTrainedModel,
        pairs: Sequence[PairExample],
        config: DPOConfig,
        *,
        pad_token_id: int,
        ref_logps: Tensor | None,
        reference: Reference | None,
    ) -> None:
        if (ref_logps is None) == (reference is None):
            raise ValueError("DPO needs exactly one of precomputed reference log-probs and a reference model")
        self.model = model
        self.pairs = pairs
        self.config = config
        self.pad_token_id = pad_token_id
        self.ref_logps = ref_logps
        self.reference = reference
        self.average = config.loss_type == "ipo"
        self.share_prefix = config.share_prefix and supports_shared_prefix(model)
        if reference is not None:
            self.share_prefix = self.share_prefix and supports_shared_prefix(reference.model)

    def micro_batches(self, indices: list[int], chunks: list[list[int]]) -> Iterator[MicroBatchOutput]:
        for micro in chunks:
            batch = pair_batch(
                [self.pairs[i] for i in micro],
                pad_token_id=self.pad_token_id,
                share_prefix=self.share_prefix,
                device=self.model.device,
            )
            logps, lengths = pair_sequence_logps(self.model, batch, average=self.average)
            chosen, rejected = logps[: len(micro)], logps[len(micro) :]
            if self.ref_logps is not None:
                ref = self.ref_logps[micro].to(logps.device)
                ref_chosen, ref_rejected = ref[:, 0], ref[:, 1]
            else:
                with torch.no_grad(), self.reference.active() as reference:
                    ref = pair_sequence_logps(reference, batch, average=self.average)[0]
                ref_chosen, ref_rejected = ref[: len(micro)], ref[len(micro) :]
            losses, chosen_rewards, rejected_rewards = dpo_loss(
                chosen,
                rejected,
                ref_chosen,
                ref_rejected,
                beta=self.config.beta,
                loss_type=self.config.loss_type,
                label_smoothing=self.config.label_smoothing,
            )
            if self.config.rpo_alpha:
                chosen_per_token = chosen if self.average else chosen / lengths[: len(micro)].clamp(min=1)
                losses = losses - self.config.rpo_alpha * chosen_per_token
            metrics = {
                "rewards/chosen": chosen_rewards.mean().item(),
                "rewards/rejected": rejected_rewards.mean().item(),
                "rewards/accuracy": (chosen_rewards > rejected_rewards).float().mean().item(),
                "rewards/margin": (chosen_rewards - rejected_rewards).mean().item(),
                "logps/chosen": chosen.detach().mean().item(),
                "logps/rejected": rejected.detach().mean().item(),
            }
            yield MicroBatchOutput(losses.sum() / len(indices), metrics, batch_tokens(batch))


def train(config: DPOConfig, data: Sequence[dict], sink: Sink, *, eval_data: Sequence[dict] | None = None) -> TrainResult:
    start = start_run(config)
    tokenizer = start.tokenizer
    pairs = tokenize_pairs(data, tokenizer, start.limits, add_eos=True)
    if eval_data:
        # held-out rows only need a prompt (and an answer, for eval/accuracy): the policy is judged by generation
        check_rows(eval_data, ("prompt",), name="eval data")
    pad_token_id = tokenizer.pad_token_id

    # with LoRA the policy comes first: it is its own reference. Otherwise the reference is loaded first and,
    # when its log-probs are precomputed, freed before the policy is loaded.
    policy = load_policy(start.weights, **start.model_options) if config.use_lora else None
    reference = load_reference_for(config.reference_model or config.model, policy, precision=start.precision)
    ref_logps = None
    if config.precompute_ref_logps:
        with reference.active() as reference_model, start.precision.autocast(reference_model.device):
            ref_logps = reference_logps(
                reference_model,
                pairs,
                pad_token_id=pad_token_id,
                batch_size=config.batch_size,
                average=config.loss_type == "ipo",
                share_prefix=config.share_prefix,
            )
        del reference, reference_model
        gc.collect()
        reference = None

    model = policy or load_policy(start.weights, **start.model_options)
    objective = DPOObjective(model, pairs, config, pad_token_id=pad_token_id, ref_logps=ref_logps, reference=reference)
    return run_policy_steps(config, start, model, objective, len(pairs), data, eval_data, sink)


def run_policy_steps(
    config: ReferenceConfig,
    start: RunStart,
    model: PreTrainedModel,
    objective: Objective,
    dataset_size: int,
    data: Sequence[dict],
    eval_data: Sequence[dict] | None,
    sink: Sink,
) -> TrainResult:
    """The steps of a policy trained against a reference (DPO, KTO): held-out accuracy and format rate by greedy
    generation when every held-out row has an answer, samples from the held-out prompts (else the training ones)."""

    parts = LoopParts(
        config=config,
        model=model,
        tokenizer=start.tokenizer,
        objective=objective,
        dataset_size=dataset_size,
        evaluate=accuracy_evaluator(model, start.tokenizer, eval_data, config.eval_max_new_tokens),
        write_samples=sample_writer(
            sink, model, start.tokenizer, eval_data or data, max_new_tokens=config.eval_max_new_tokens
        ),
        resume_state=start.resume_state,
        precision=start.precision,
    )
    return run_steps(parts, sink)
