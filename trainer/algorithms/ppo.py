"""PPO with a critic, as seed 003 writes it (InstructGPT style RLHF).

One step: sample one completion per prompt from the policy; score it (reward model and/or rule-based
functions); per-token reward = -kl_coef * (logp - ref_logp) on every token plus the score on the last
real token; GAE over the critic's values; whitened advantages; then ppo_epochs passes of shuffled
minibatches, each one optimizer update of clipped surrogate + vf_coef * clipped value loss - entropy_coef
* entropy. The critic is a sequence classifier (scalar head) read at every position: initialised from
critic_model, else the reward model, else the policy's weights with a fresh head.

`kl` is the mean per-token k1 estimate logp - ref_logp of the rollout (what the reward is penalised by).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.optim import AdamW
from transformers import PreTrainedModel

from trainer.algorithms.logprobs import completion_logprobs
from trainer.algorithms.losses import gae, masked_mean, policy_loss, value_loss
from trainer.algorithms.rollout import (
    ScoredGroups,
    build_rewarder,
    prepare_online,
    record_rollout_samples,
    reward_metrics,
    run_learner,
    sample_and_score_shared,
    sampling_params,
)
from trainer.config import ConfigError, PPOConfig
from trainer.decoding.generation import GenerationBackend, GroupSamples, HFGenerationBackend
from trainer.devices import HOST
from trainer.loop import TrainResult, backward, build_scheduler, optimizer_update, total_steps
from trainer.modeling import distributed
from trainer.modeling.models import Reference, load_reference_for, load_reward_model
from trainer.modeling.selective_forward import position_ids_from_mask
from trainer.rewards import Rewarder
from trainer.sink import Sink

CRITIC_DIR = "critic"


def token_values(critic: PreTrainedModel, samples: GroupSamples) -> Tensor:
    """V(s_t) [N, T] for every completion token t: the critic's head on the hidden state that predicts it."""
    input_ids = torch.cat([samples.prompt_ids, samples.completion_ids], dim=1)
    attention = torch.cat([samples.prompt_mask, samples.completion_mask], dim=1)
    inputs = {"input_ids": input_ids, "attention_mask": attention, "position_ids": position_ids_from_mask(attention),
              "use_cache": False}
    width = samples.completion_ids.shape[1]
    if distributed.is_sharded(critic):
        # a sharded model runs only through its own forward, which keeps the head's output at the last token
        # alone: the head's output at every position is taken as it passes
        scores = _head_outputs(critic, inputs)
    else:
        scores = critic.score(critic.base_model(**inputs).last_hidden_state)
    values = scores[:, -width - 1 : -1].squeeze(-1).float()
    return values * samples.completion_mask


def _head_outputs(critic: PreTrainedModel, inputs: dict) -> Tensor:
    outputs: list[Tensor] = []
    handle = critic.score.register_forward_hook(lambda _module, _inputs, output: outputs.append(output))
    try:
        critic(**inputs)
    finally:
        handle.remove()
    return outputs[0]


def whiten(values: Tensor, mask: Tensor) -> Tensor:
    """(values - mean) / std over the real tokens; 0 on padding."""
    real = mask.bool()
    mean = values[real].mean()
    std = values[real].std() if real.sum() > 1 else values.new_ones(())
    return torch.where(real, (values - mean) / (std + 1e-8), torch.zeros_like(values))


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over real tokens (1: perfect critic, <= 0: useless)."""
    real = mask.bool()
    target_variance = returns[real].var()
    return (1 - (returns[real] - values[real]).var() / target_variance).item() if target_variance > 0 else 0.0


@dataclass
class Rollout:
    scored: ScoredGroups
    old_values: Tensor
    advantages: Tensor
    returns: Tensor
    kl: Tensor  # per-token logp - ref_logp


class PPOLearner:
    def __init__(
        self,
        config: PPOConfig,
        policy: PreTrainedModel,
        critic: PreTrainedModel,
        reference: Reference | None,
        backend: GenerationBackend,
        rewarder: Rewarder,
        optimizer: AdamW,
        scheduler: torch.optim.lr_scheduler.LambdaLR,
        *,
        recompute_old_logprobs: bool = False,
    ) -> None:
        """`recompute_old_logprobs`: as in trainer.algorithms.grpo.GRPOLearner (bf16: the training forward's log-probs)."""
        self.recompute_old_logprobs = recompute_old_logprobs
        self.config = config
        self.policy = policy
        self.critic = critic
        self.reference = reference
        self.backend = backend
        self.rewarder = rewarder
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.parameters = [p for group in optimizer.param_groups for p in group["params"]]
        self.params = sampling_params(config, 1)

    @torch.no_grad()
    def rollout(self, rows: list[dict], timings: dict[str, float], *, step: int = 0) -> Rollout:
        """Sample and score the step's prompts, then the per-token values, KL and advantages: each process
        computes them for its share of the rows (they are per row) and every process gets all of them."""
        scored = sample_and_score_shared(self.backend, self.rewarder, rows, self.params, self.config, timings, step=step)
        started = time.perf_counter()
        processes = distributed.active()
        first, last = processes.share_bounds(len(scored.rewards))
        share = scored.samples if not processes.distributed else scored.samples.select_rows(torch.arange(first, last, device=HOST))
        parts = self._per_token(share, scored.rewards[first:last])
        if processes.distributed:
            device = share.completion_ids.device
            gathered = processes.gather(tuple(part.cpu() for part in parts))
            parts = tuple(torch.cat(column).to(device) for column in zip(*gathered, strict=True))
        logprobs, old_values, kl, advantages, returns = parts
        scored = dataclasses.replace(scored, samples=dataclasses.replace(scored.samples, logprobs=logprobs))
        timings["time/scoring_s"] += time.perf_counter() - started
        return Rollout(scored, old_values, advantages, returns, kl)

    def _per_token(self, samples: GroupSamples, scores: list[float]) -> tuple[Tensor, ...]:
        """(old log-probs, values, KL to the reference, advantages, returns), each [rows, T], of `samples`."""
        config = self.config
        logprobs = samples.logprobs
        if self.recompute_old_logprobs:
            logprobs = completion_logprobs(self.policy, samples, temperature=config.temperature)[0]
        mask = samples.completion_mask
        old_values = token_values(self.critic, samples)
        kl = torch.zeros_like(logprobs)
        if self.reference is not None:
            with self.reference.active() as reference:
                ref_logprobs = completion_logprobs(reference, samples, temperature=config.temperature)[0]
            kl = (logprobs - ref_logprobs) * mask
        rewards = -config.kl_coef * kl
        last = (mask.sum(dim=1) - 1).clamp(min=0)
        rewards[torch.arange(len(last), device=rewards.device), last] += torch.tensor(scores, dtype=rewards.dtype, device=rewards.device)
        advantages, returns = gae(rewards, old_values, mask, gamma=config.gamma, lam=config.lam)
        return logprobs, old_values, kl, advantages, returns

    def update(self, step: int, rollout: Rollout) -> dict[str, float]:
        config = self.config
        samples = rollout.scored.samples
        mask = samples.completion_mask
        advantages = whiten(rollout.advantages, mask) if config.whiten_advantages else rollout.advantages
        totals: dict[str, float] = {}
        updates = config.ppo_epochs * config.num_mini_batches
        processes = distributed.active()
        for _ in range(config.ppo_epochs):
            for minibatch in torch.randperm(mask.shape[0], device=HOST).chunk(config.num_mini_batches):
                rows, weight = process_rows(minibatch, mask, processes)
                metrics = self._minibatch(step, samples.select_rows(rows), rows, rollout, advantages, weight)
                metrics = processes.sum_metrics(metrics)
                metrics["grad_norm"] = optimizer_update(
                    self.optimizer, self.scheduler, self.parameters, config.max_grad_norm, loss=metrics["loss"]
                )
                for name, value in metrics.items():
                    totals[name] = totals.get(name, 0.0) + value / updates
        return totals

    def _minibatch(
        self, step: int, chunk: GroupSamples, rows: Tensor, rollout: Rollout, advantages: Tensor, weight: float = 1.0
    ) -> dict[str, float]:
        """One process's rows of a minibatch; `weight`, their share of the minibatch's tokens, scales the loss
        (its means over these rows become their part of the means over the whole minibatch) and the metrics."""
        config = self.config
        mask = chunk.completion_mask
        logprobs, entropy = completion_logprobs(
            self.policy,
            chunk,
            temperature=config.temperature,
            with_entropy=True,
            entropy_grad=config.entropy_coef > 0,
        )
        surrogate, metrics = policy_loss(
            logprobs,
            chunk.logprobs,
            advantages[rows],
            mask,
            eps_low=config.epsilon,
            eps_high=config.epsilon,
            aggregation="token-mean",
        )
        values = token_values(self.critic, chunk)
        critic_loss = value_loss(values, rollout.old_values[rows], rollout.returns[rows], mask, clip=config.value_clip)
        mean_entropy = masked_mean(entropy, mask)
        loss = surrogate + config.vf_coef * critic_loss - config.entropy_coef * mean_entropy
        if config.debug_nan_at_step == step:
            loss = loss * float("nan")
        backward(loss * weight)
        metrics.update(
            {"loss": loss.item(), "policy/loss": surrogate.item(), "value/loss": critic_loss.item(),
             "entropy": mean_entropy.item()}
        )
        return {name: value * weight for name, value in metrics.items()}

    def step(
        self, step: int, draw_rows: Callable[[], list[dict]], sink: Sink, *, record_samples: bool
    ) -> tuple[dict[str, float], int]:
        config = self.config
        timings: dict[str, float] = {}
        rollout = self.rollout(draw_rows(), timings, step=step)
        started = time.perf_counter()
        metrics = self.update(step, rollout)
        self.backend.sync_weights(self.policy)
        timings["time/backward_s"] = time.perf_counter() - started
        samples = rollout.scored.samples
        mask = samples.completion_mask
        metrics.update(reward_metrics(rollout.scored))
        metrics.update(timings)
        metrics["kl"] = masked_mean(rollout.kl, mask).item()
        metrics["advantage/mean"] = masked_mean(rollout.advantages, mask).item()
        metrics["value/explained_variance"] = explained_variance(rollout.old_values, rollout.returns, mask)
        if record_samples:
            first_token_advantages = rollout.advantages[:, :1]
            record_rollout_samples(sink, step, rollout.scored, first_token_advantages, config.samples_per_log)
        tokens = int(samples.prompt_mask.sum()) + int(mask.sum())
        return metrics, tokens


def process_rows(minibatch: Tensor, mask: Tensor, processes: distributed.Processes) -> tuple[Tensor, float]:
    """This process's rows of a minibatch and their share of its tokens. A process left without rows (a
    minibatch smaller than the number of processes) runs the first row with weight 0: every process must run
    as many forwards and backwards."""
    if not processes.distributed:
        return minibatch, 1.0
    parts = minibatch.chunk(processes.world_size)
    if processes.rank >= len(parts):
        return minibatch[:1], 0.0
    rows = parts[processes.rank]
    total = mask[minibatch].sum().item()
    return rows, mask[rows].sum().item() / total if total else 0.0


def critic_source(config: PPOConfig) -> str:
    if config.resume_from is not None:
        return f"{config.resume_from}/{CRITIC_DIR}"
    return config.critic_model or config.reward_model or config.model


def train(
    config: PPOConfig, data: Sequence[dict], sink: Sink, *, eval_data: Sequence[dict] | None = None
) -> TrainResult:
    if config.grad_accum_steps != 1:
        raise ConfigError("grad_accum_steps", "PPO splits each rollout with num_mini_batches; leave this at 1")
    resume_state, tokenizer, policy, precision = prepare_online(config, data)
    critic = load_reward_model(
        critic_source(config), pad_token_id=tokenizer.pad_token_id, device=policy.device, precision=precision
    )
    reference = (
        load_reference_for(config.reference_model or config.model, policy, precision=precision)
        if config.kl_coef > 0 else None
    )
    optimizer = AdamW(
        [
            {"params": [p for p in policy.parameters() if p.requires_grad], "lr": config.lr},
            {"params": list(critic.parameters()), "lr": config.critic_lr or config.lr},
        ],
        weight_decay=config.weight_decay,
    )
    steps = total_steps(config, len(data))
    scheduler = build_scheduler(optimizer, config, steps * config.ppo_epochs * config.num_mini_batches)
    learner = PPOLearner(
        config, policy, critic, reference, HFGenerationBackend(policy, tokenizer, decoding=config.decoding), build_rewarder(config, precision),
        optimizer, scheduler, recompute_old_logprobs=not precision.sampling_logprobs_exact,
    )
    return run_learner(
        learner, data, sink, eval_data=eval_data, tokenizer=tokenizer, steps=steps, resume_state=resume_state,
        precision=precision, extra_models={CRITIC_DIR: critic},
    )
