"""GRPO (DeepSeekMath) with the DAPO and Dr. GRPO options.

One step: draw batch_size prompts, sample group_size completions of each from the current (old) policy,
score them, turn rewards into group advantages, then num_iterations optimizer updates of the clipped
surrogate with the k3 KL to a frozen reference. In fp32 the sampling log-probs are the old log-probs (taken at
the sampling temperature, see trainer.decoding.generation), so no forward pass is spent on them; in bf16 the training
forward's own log-probs are the old ones (sampling would not match it): with one update per batch
(num_iterations 1) the update's forward gives them, detached, as TRL does; with more, a forward before the updates
takes them. The reference model is run only when beta > 0 (with LoRA it is the policy with its adapters disabled).

Timing metrics: time/generation_s (sampling), time/scoring_s (rewards, reference log-probs and, in bf16 with
num_iterations > 1, the old log-probs), time/backward_s (policy forward, backward and optimizer updates).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from transformers import PreTrainedModel

from trainer.algorithms.logprobs import completion_logprobs
from trainer.algorithms.losses import (
    aggregation_units,
    group_advantages,
    informative_groups,
    masked_mean,
    policy_loss,
)
from trainer.algorithms.rollout import (
    ScoredGroups,
    build_rewarder,
    concat_scored,
    prepare_online,
    record_rollout_samples,
    reward_metrics,
    run_learner,
    sample_and_score_shared,
    sampling_params,
)
from trainer.config import GRPOConfig
from trainer.decoding.generation import GenerationBackend, GroupSamples, HFGenerationBackend
from trainer.devices import HOST
from trainer.loop import (
    TrainResult,
    backward,
    build_optimizer,
    build_scheduler,
    optimizer_update,
    total_steps,
)
from trainer.modeling import distributed
from trainer.modeling.models import Reference, load_reference_for
from trainer.rewards import Rewarder
from trainer.sink import Sink


def micro_batch_rows(count: int, chunks: int, group_size: int = 1) -> list[Tensor]:
    """Row chunks for gradient accumulation: whole groups when there are at least `chunks` groups, so that
    each micro-batch still computes a prompt once for its group (share_prompt). Exactly `chunks` of them (sizes
    differing by at most one) unless there are fewer rows: torch.chunk may give fewer (5 groups in 4: 2, 2, 1),
    and the processes of a step must each get as many micro-batches (see ProcessPart.of)."""
    groups = count // group_size
    if group_size > 1 and groups >= chunks:
        return [
            torch.arange(int(part[0]) * group_size, (int(part[-1]) + 1) * group_size, device=HOST)
            for part in torch.arange(groups, device=HOST).tensor_split(chunks)
        ]
    return list(torch.arange(count, device=HOST).tensor_split(min(chunks, count)))


def micro_batch(samples: GroupSamples, rows: Tensor) -> GroupSamples:
    """The samples of one micro-batch (consecutive rows from micro_batch_rows); whole groups stay groups."""
    size, first = samples.group_size, int(rows[0])
    if first % size == 0 and rows.numel() % size == 0:
        return samples.select_groups(range(first // size, (first + rows.numel()) // size))
    return samples.select_rows(rows)


@dataclass(frozen=True)
class ProcessPart:
    """The micro-batches of a step one process trains on: `rows` (a contiguous range of the step's completion
    rows) and, for each micro-batch, its rows counted from rows[0], the weight of its loss in the step's loss and
    its fraction of the step's rows (what its metrics weigh). `partial` when rows are not the whole step."""

    rows: Tensor
    chunks: list[tuple[Tensor, float, float]]
    partial: bool

    @classmethod
    def whole(cls, shares: list[tuple[Tensor, float]], count: int) -> ProcessPart:
        return cls(torch.arange(count, device=HOST), [(rows, share, rows.numel() / count) for rows, share in shares], False)

    @classmethod
    def of(cls, shares: list[tuple[Tensor, float]], count: int, processes: distributed.Processes) -> ProcessPart:
        """This process's consecutive micro-batches of the step's `shares` (the step's chunks cut for every
        process's micro-batches). Every process must run as many forwards and backwards (fsdp gathers weights in
        them): when the step has fewer rows than processes x micro-batches, a process short of micro-batches runs
        its last one again (or, left without any, the step's last) with weight 0."""
        if not processes.distributed:
            return cls.whole(shares, count)
        per_process = -(-len(shares) // processes.world_size)
        mine = shares[processes.rank * per_process : (processes.rank + 1) * per_process]
        weighted = [(rows, share, rows.numel() / count) for rows, share in mine]
        repeated = (mine or shares)[-1][0]
        weighted += [(repeated, 0.0, 0.0)] * (per_process - len(weighted))
        first = int(weighted[0][0][0])
        rows = torch.arange(first, int(weighted[-1][0][-1]) + 1, device=HOST)
        return cls(rows, [(chunk - first, share, row_share) for chunk, share, row_share in weighted], True)


@dataclass(frozen=True)
class SamplingRounds:
    """What a step's sampling took: `rounds` of batch_size prompts (more than one when dynamic sampling drew fresh
    prompts for uninformative groups) and the fraction of the groups generated in them that were informative."""

    rounds: int
    informative_ratio: float

    def metrics(self) -> dict[str, float]:
        return {"groups/informative_ratio": self.informative_ratio, "groups/rounds": float(self.rounds)}


class GRPOLearner:
    """Rollout (with DAPO dynamic sampling) and the num_iterations updates of one GRPO step."""

    def __init__(
        self,
        config: GRPOConfig,
        policy: PreTrainedModel,
        reference: Reference | None,
        backend: GenerationBackend,
        rewarder: Rewarder,
        optimizer: Optimizer,
        scheduler: LambdaLR,
        *,
        recompute_old_logprobs: bool = False,
    ) -> None:
        """`recompute_old_logprobs`: take the old log-probs from the training forward instead of sampling (needed
        in bf16, where the two differ: trainer.modeling.models.Precision.sampling_logprobs_exact)."""
        self.config = config
        self.policy = policy
        self.reference = reference
        self.backend = backend
        self.rewarder = rewarder
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.recompute_old_logprobs = recompute_old_logprobs
        # one update per batch: the policy the update's forward runs is the one that sampled (ratio exactly 1)
        self.old_logprobs_from_the_update = recompute_old_logprobs and config.num_iterations == 1
        self.parameters = [p for p in policy.parameters() if p.requires_grad]
        self.params = sampling_params(config, config.group_size)

    def rollout(
        self, draw_rows: Callable[[], list[dict]], timings: dict[str, float], *, step: int = 0
    ) -> tuple[ScoredGroups, SamplingRounds]:
        """Sampled, scored groups for one step, and how many rounds of prompts that took.

        With dynamic sampling, rounds of fresh prompts are drawn until batch_size informative groups are
        kept or max_generation_rounds is reached; if no group was informative, the last round is used as is
        (its advantages are 0, so only the KL term moves the policy).
        """
        config = self.config
        rounds = config.max_generation_rounds if config.dynamic_sampling else 1
        kept: list[ScoredGroups] = []
        kept_groups = generated = informative_count = 0
        scored = None
        for round_ in range(rounds):
            scored = sample_and_score_shared(
                self.backend, self.rewarder, draw_rows(), self.params, config, timings, step=step, round_=round_
            )
            informative = informative_groups(torch.tensor(scored.rewards, device=HOST), config.group_size)
            generated += informative.numel()
            informative_count += int(informative.sum())
            if not config.dynamic_sampling:
                return scored, SamplingRounds(1, informative_count / generated)
            wanted = informative.nonzero().flatten().tolist()[: config.batch_size - kept_groups]
            if wanted:
                kept.append(scored.keep_groups(wanted))
                kept_groups += len(wanted)
            if kept_groups == config.batch_size:
                break
        sampling = SamplingRounds(round_ + 1, informative_count / generated)
        if not kept:
            return scored, sampling
        return concat_scored(kept, pad_token_id=self.backend.pad_token_id), sampling

    @torch.no_grad()
    def with_training_logprobs(self, samples: GroupSamples) -> GroupSamples:
        """The samples with the policy's log-probs from the training forward as their old log-probs."""
        config = self.config
        logprobs = completion_logprobs(
            self.policy, samples, temperature=config.temperature, share_prompt=config.share_prompt
        )[0]
        return dataclasses.replace(samples, logprobs=logprobs)

    @torch.no_grad()
    def reference_logprobs(self, samples: GroupSamples) -> Tensor | None:
        if self.reference is None:
            return None
        config = self.config
        with self.reference.active() as reference:
            return completion_logprobs(
                reference, samples, temperature=config.temperature, share_prompt=config.share_prompt
            )[0]

    def loss_mask(self, samples: GroupSamples) -> Tensor:
        loss_mask = samples.completion_mask.float()
        if self.config.overlong_filtering:
            loss_mask = loss_mask * (~samples.truncated).float()[:, None]
        return loss_mask

    def update(
        self,
        step: int,
        samples: GroupSamples,
        advantages: Tensor,
        ref_logprobs: Tensor | None,
        *,
        part: ProcessPart | None = None,
    ) -> dict[str, float]:
        """num_iterations optimizer updates on the same samples; metrics averaged over them. `part`: the
        micro-batches of `samples` this process trains on, when `samples` is its part of a multi-process step."""
        config = self.config
        loss_mask = self.loss_mask(samples)
        part = part or ProcessPart.whole(self._micro_batch_shares(loss_mask), loss_mask.shape[0])
        processes = distributed.active()
        totals: dict[str, float] = {}
        for _ in range(config.num_iterations):
            metrics: dict[str, float] = {"loss": 0.0}
            for rows, share, row_share in part.chunks:
                chunk = micro_batch(samples, rows) if len(part.chunks) > 1 or part.partial else samples
                logprobs, entropy = completion_logprobs(
                    self.policy, chunk, temperature=config.temperature, with_entropy=True, share_prompt=config.share_prompt
                )
                loss, loss_metrics = policy_loss(
                    logprobs,
                    logprobs.detach() if self.old_logprobs_from_the_update else chunk.logprobs,
                    advantages[rows],
                    loss_mask[rows],
                    eps_low=config.epsilon_low,
                    eps_high=config.epsilon_high,
                    ref_logp=None if ref_logprobs is None else ref_logprobs[rows],
                    beta=config.beta,
                    aggregation=config.loss_aggregation,
                )
                if config.debug_nan_at_step == step:
                    loss = loss * float("nan")
                backward(loss * share)
                metrics["loss"] += loss.item() * share
                loss_metrics["entropy"] = masked_mean(entropy, chunk.completion_mask).item()
                for name, value in loss_metrics.items():
                    metrics[name] = metrics.get(name, 0.0) + value * row_share
            metrics = processes.sum_metrics(metrics)
            metrics["grad_norm"] = optimizer_update(
                self.optimizer, self.scheduler, self.parameters, config.max_grad_norm, loss=metrics["loss"]
            )
            for name, value in metrics.items():
                totals[name] = totals.get(name, 0.0) + value / config.num_iterations
        return totals

    def _micro_batch_shares(self, loss_mask: Tensor) -> list[tuple[Tensor, float]]:
        """Row chunks of the step and the weight of each chunk's loss, so the weighted chunk losses sum to
        the loss of the whole batch under the configured aggregation."""
        chunks = micro_batch_rows(
            loss_mask.shape[0], self.config.grad_accum_steps * distributed.active().world_size, self.config.group_size
        )
        aggregation = self.config.loss_aggregation
        if aggregation == "constant":
            # policy_loss divides by B_chunk * T; Dr. GRPO's constant is B * max_new_tokens
            width = loss_mask.shape[1]
            return [
                (rows, rows.numel() * width / (loss_mask.shape[0] * self.config.max_new_tokens)) for rows in chunks
            ]
        sizes = [aggregation_units(loss_mask[rows], aggregation).item() for rows in chunks]
        total = sum(sizes)
        return [(rows, size / total if total else 0.0) for rows, size in zip(chunks, sizes, strict=True)]

    def step(
        self, step: int, draw_rows: Callable[[], list[dict]], sink: Sink, *, record_samples: bool
    ) -> tuple[dict[str, float], int]:
        config = self.config
        timings: dict[str, float] = {}
        scored, sampling = self.rollout(draw_rows, timings, step=step)
        rewards = torch.tensor(scored.rewards, device=scored.samples.completion_ids.device)
        advantages = group_advantages(rewards, config.group_size, scale=config.advantage_scale)
        # every process holds the whole rollout; each trains on its part of the step's micro-batches
        loss_mask = self.loss_mask(scored.samples)
        part = ProcessPart.of(self._micro_batch_shares(loss_mask), loss_mask.shape[0], distributed.active())
        samples = micro_batch(scored.samples, part.rows) if part.partial else scored.samples
        reference_started = time.perf_counter()
        if self.recompute_old_logprobs and not self.old_logprobs_from_the_update:
            samples = self.with_training_logprobs(samples)
        ref_logprobs = self.reference_logprobs(samples)
        updates_started = time.perf_counter()
        timings["time/scoring_s"] += updates_started - reference_started
        metrics = self.update(step, samples, advantages[part.rows], ref_logprobs, part=part)
        self.backend.sync_weights(self.policy)
        timings["time/backward_s"] = time.perf_counter() - updates_started
        metrics.update(timings)
        metrics.update(reward_metrics(scored))
        metrics["advantage/mean"] = advantages.mean().item()
        metrics.update(sampling.metrics())
        if record_samples:
            record_rollout_samples(sink, step, scored, advantages, config.samples_per_log)
        whole = scored.samples
        tokens = int(whole.prompt_mask.sum()) * config.group_size + int(whole.completion_mask.sum())
        return metrics, tokens


def train(
    config: GRPOConfig, data: Sequence[dict], sink: Sink, *, eval_data: Sequence[dict] | None = None
) -> TrainResult:
    resume_state, tokenizer, policy, precision = prepare_online(config, data)
    reference = (
        load_reference_for(config.reference_model or config.model, policy, precision=precision)
        if config.beta > 0 else None
    )
    steps = total_steps(config, len(data))
    optimizer = build_optimizer(policy, config)
    scheduler = build_scheduler(optimizer, config, steps * config.num_iterations)
    learner = GRPOLearner(
        config, policy, reference, HFGenerationBackend(policy, tokenizer, decoding=config.decoding), build_rewarder(config, precision), optimizer,
        scheduler, recompute_old_logprobs=not precision.sampling_logprobs_exact,
    )
    return run_learner(
        learner, data, sink, eval_data=eval_data, tokenizer=tokenizer, steps=steps, resume_state=resume_state,
        precision=precision,
    )
