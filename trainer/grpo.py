"""GRPO (DeepSeekMath) with the DAPO and Dr. GRPO options, and the online step driver PPO shares.

One step: draw batch_size prompts, sample group_size completions of each from the current (old) policy,
score them, turn rewards into group advantages, then num_iterations optimizer updates of the clipped
surrogate with the k3 KL to a frozen reference. The sampling log-probs are the old log-probs (taken at
the sampling temperature, see trainer.generation), so no forward pass is spent on them; the reference
model is loaded and run only when beta > 0.

Timing metrics: time/generation_s (sampling), time/scoring_s (rewards and reference log-probs),
time/backward_s (policy forward, backward and optimizer updates).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.answers import answers_match, extract_answer
from trainer.config import GRPOConfig, OnlineConfig
from trainer.data import DataError, Limits, check_rows, encode_prompt
from trainer.evaluation import generation_accuracy, has_answers
from trainer.generation import (
    GroupSamples,
    HFGenerationBackend,
    SamplingParams,
    completion_logprobs,
    concat_samples,
)
from trainer.loop import (
    DataOrder,
    TrainResult,
    build_optimizer,
    build_scheduler,
    check_finite,
    checkpoint_dir,
    model_source,
    restore_training_state,
    resume_state_for,
    retain_checkpoints,
    save_checkpoint,
    seed_everything,
    total_steps,
)
from trainer.losses import group_advantages, informative_groups, policy_loss
from trainer.models import LoraOptions, load_policy, load_reference, load_tokenizer
from trainer.rewards import Rewarder, RewardModelScorer, reward_inputs
from trainer.sink import Sink


@dataclass
class ScoredGroups:
    """Sampled completions of `rows` (one row per prompt) with their rewards; per_function is unweighted."""

    samples: GroupSamples
    rows: list[dict]
    rewards: list[float]
    per_function: dict[str, list[float]]

    def keep_groups(self, groups: list[int]) -> ScoredGroups:
        size = self.samples.group_size
        completion_rows = [g * size + i for g in groups for i in range(size)]
        return ScoredGroups(
            samples=self.samples.select_groups(groups),
            rows=[self.rows[g] for g in groups],
            rewards=[self.rewards[i] for i in completion_rows],
            per_function={name: [values[i] for i in completion_rows] for name, values in self.per_function.items()},
        )


def concat_scored(parts: Sequence[ScoredGroups], *, pad_token_id: int) -> ScoredGroups:
    return ScoredGroups(
        samples=concat_samples([p.samples for p in parts], pad_token_id=pad_token_id),
        rows=[row for p in parts for row in p.rows],
        rewards=[r for p in parts for r in p.rewards],
        per_function={name: [v for p in parts for v in p.per_function[name]] for name in parts[0].per_function},
    )


def build_rewarder(config: OnlineConfig) -> Rewarder:
    scorer = RewardModelScorer(config.reward_model) if config.reward_model else None
    return Rewarder(config.rewards, scorer=scorer, scorer_weight=config.reward_model_weight)


def check_prompt_rows(rows: Sequence[dict], config: OnlineConfig, *, name: str = "training data") -> None:
    """Every row needs a prompt; `answer_match` also needs an answer in every row."""
    check_rows(rows, ("prompt",), name=name)
    if "answer_match" in config.rewards:
        for index, row in enumerate(rows):
            if not isinstance(row.get("answer"), str | int | float):
                raise DataError(f"{name} row {index}: missing field 'answer' (the answer_match reward needs it)")


def check_prompt_lengths(
    rows: Sequence[dict], tokenizer: PreTrainedTokenizerBase, config: OnlineConfig, *, name: str = "training data"
) -> None:
    """Every prompt has at least one token and at most max_prompt_length (a DataError names the row)."""
    limits = Limits(max_length=config.max_length, max_prompt_length=config.max_prompt_length)
    for index, row in enumerate(rows):
        encode_prompt(tokenizer, row["prompt"], limits, index=index, name=name)


def sample_and_score(
    backend: HFGenerationBackend,
    rewarder: Rewarder,
    rows: list[dict],
    params: SamplingParams,
    config: OnlineConfig,
    timings: dict[str, float],
) -> ScoredGroups:
    """Sample and score; adds the seconds spent to timings["time/generation_s"] and ["time/scoring_s"]."""
    started = time.perf_counter()
    samples = backend.generate([row["prompt"] for row in rows], params)
    generated = time.perf_counter()
    group = params.group_size
    breakdown = rewarder(
        reward_inputs(
            [row["prompt"] for row in rows for _ in range(group)],
            samples.texts,
            [row.get("answer") for row in rows for _ in range(group)],
            lengths=samples.lengths.tolist(),
            truncated=samples.truncated.tolist(),
            max_length=config.max_new_tokens,
            overlong_buffer=config.overlong_buffer,
        )
    )
    timings["time/generation_s"] = timings.get("time/generation_s", 0.0) + generated - started
    timings["time/scoring_s"] = timings.get("time/scoring_s", 0.0) + time.perf_counter() - generated
    return ScoredGroups(samples, rows, breakdown.total, breakdown.per_function)


def sampling_params(config: OnlineConfig, group_size: int) -> SamplingParams:
    return SamplingParams(
        group_size=group_size,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=config.top_k,
    )


def reward_metrics(scored: ScoredGroups) -> dict[str, float]:
    rewards = torch.tensor(scored.rewards)
    samples = scored.samples
    metrics = {
        "reward/mean": rewards.mean().item(),
        "reward/std": rewards.std().item() if rewards.numel() > 1 else 0.0,
        "completion/mean_length": samples.lengths.float().mean().item(),
        "completion/clipped_ratio": samples.truncated.float().mean().item(),
    }
    for name, values in scored.per_function.items():
        metrics[f"reward/{name}"] = sum(values) / len(values)
    return metrics


def record_rollout_samples(
    sink: Sink, step: int, scored: ScoredGroups, advantages: Tensor, count: int
) -> None:
    """The first `count` completions of the step, with each function's reward and the advantage."""
    size = scored.samples.group_size
    for i in range(min(count, len(scored.rewards))):
        sink.sample(
            step,
            scored.rows[i // size]["prompt"],
            scored.samples.texts[i],
            {name: values[i] for name, values in scored.per_function.items()},
            advantage=float(advantages[i].mean()),
        )


def masked_mean(values: Tensor, mask: Tensor) -> float:
    return ((values * mask).sum() / mask.sum().clamp(min=1)).item()


def micro_batch_rows(count: int, chunks: int, group_size: int = 1) -> list[Tensor]:
    """Row chunks for gradient accumulation: whole groups when there are at least `chunks` groups, so that
    each micro-batch still computes a prompt once for its group (share_prompt)."""
    groups = count // group_size
    if group_size > 1 and groups >= chunks:
        return [
            torch.arange(int(part[0]) * group_size, (int(part[-1]) + 1) * group_size)
            for part in torch.arange(groups).chunk(chunks)
        ]
    return [rows for rows in torch.arange(count).chunk(min(chunks, count)) if rows.numel()]


def micro_batch(samples: GroupSamples, rows: Tensor) -> GroupSamples:
    """The samples of one micro-batch (consecutive rows from micro_batch_rows); whole groups stay groups."""
    size, first = samples.group_size, int(rows[0])
    if first % size == 0 and rows.numel() % size == 0:
        return samples.select_groups(range(first // size, (first + rows.numel()) // size))
    return samples.select_rows(rows)


def optimizer_update(
    optimizer: Optimizer, scheduler: LambdaLR, parameters: list[torch.nn.Parameter], max_grad_norm: float
) -> float:
    """Clip, step (only on a finite gradient) and advance the schedule; returns the gradient norm."""
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm if max_grad_norm > 0 else math.inf).item()
    if math.isfinite(grad_norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return grad_norm


class GRPOLearner:
    """Rollout (with DAPO dynamic sampling) and the num_iterations updates of one GRPO step."""

    def __init__(
        self,
        config: GRPOConfig,
        policy: PreTrainedModel,
        reference: PreTrainedModel | None,
        backend: HFGenerationBackend,
        rewarder: Rewarder,
        optimizer: Optimizer,
        scheduler: LambdaLR,
    ) -> None:
        self.config = config
        self.policy = policy
        self.reference = reference
        self.backend = backend
        self.rewarder = rewarder
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.parameters = [p for p in policy.parameters() if p.requires_grad]
        self.params = sampling_params(config, config.group_size)

    def rollout(self, draw_rows: Callable[[], list[dict]], timings: dict[str, float]) -> tuple[ScoredGroups, float]:
        """Sampled, scored groups for one step and the fraction of generated groups that were informative.

        With dynamic sampling, rounds of fresh prompts are drawn until batch_size informative groups are
        kept or max_generation_rounds is reached; if no group was informative, the last round is used as is
        (its advantages are 0, so only the KL term moves the policy).
        """
        config = self.config
        rounds = config.max_generation_rounds if config.dynamic_sampling else 1
        kept: list[ScoredGroups] = []
        kept_groups = generated = informative_count = 0
        scored = None
        for _ in range(rounds):
            scored = sample_and_score(self.backend, self.rewarder, draw_rows(), self.params, config, timings)
            informative = informative_groups(torch.tensor(scored.rewards), config.group_size)
            generated += informative.numel()
            informative_count += int(informative.sum())
            if not config.dynamic_sampling:
                return scored, informative_count / generated
            wanted = informative.nonzero().flatten().tolist()[: config.batch_size - kept_groups]
            if wanted:
                kept.append(scored.keep_groups(wanted))
                kept_groups += len(wanted)
            if kept_groups == config.batch_size:
                break
        ratio = informative_count / generated
        if not kept:
            return scored, ratio
        return concat_scored(kept, pad_token_id=self.backend.pad_token_id), ratio

    @torch.no_grad()
    def reference_logprobs(self, samples: GroupSamples) -> Tensor | None:
        if self.reference is None:
            return None
        config = self.config
        return completion_logprobs(
            self.reference, samples, temperature=config.temperature, share_prompt=config.share_prompt
        )[0]

    def update(
        self, step: int, samples: GroupSamples, advantages: Tensor, ref_logprobs: Tensor | None
    ) -> dict[str, float]:
        """num_iterations optimizer updates on the same samples; metrics averaged over them."""
        config = self.config
        loss_mask = samples.completion_mask.float()
        if config.overlong_filtering:
            loss_mask = loss_mask * (~samples.truncated).float()[:, None]
        shares = self._micro_batch_shares(loss_mask)
        totals: dict[str, float] = {}
        for _ in range(config.num_iterations):
            metrics: dict[str, float] = {"loss": 0.0}
            for rows, share in shares:
                chunk = micro_batch(samples, rows) if len(shares) > 1 else samples
                logprobs, entropy = completion_logprobs(
                    self.policy, chunk, temperature=config.temperature, with_entropy=True, share_prompt=config.share_prompt
                )
                loss, loss_metrics = policy_loss(
                    logprobs,
                    chunk.logprobs,
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
                (loss * share).backward()
                metrics["loss"] += loss.item() * share
                row_share = rows.numel() / samples.completion_ids.shape[0]
                loss_metrics["entropy"] = masked_mean(entropy, chunk.completion_mask)
                for name, value in loss_metrics.items():
                    metrics[name] = metrics.get(name, 0.0) + value * row_share
            metrics["grad_norm"] = optimizer_update(self.optimizer, self.scheduler, self.parameters, config.max_grad_norm)
            for name, value in metrics.items():
                totals[name] = totals.get(name, 0.0) + value / config.num_iterations
        return totals

    def _micro_batch_shares(self, loss_mask: Tensor) -> list[tuple[Tensor, float]]:
        """Row chunks of the step and the weight of each chunk's loss, so the weighted chunk losses sum to
        the loss of the whole batch under the configured aggregation."""
        chunks = micro_batch_rows(loss_mask.shape[0], self.config.grad_accum_steps, self.config.group_size)
        aggregation = self.config.loss_aggregation
        if aggregation == "token-mean":
            sizes = [loss_mask[rows].sum().item() for rows in chunks]
        elif aggregation == "sequence-mean":
            sizes = [(loss_mask[rows].sum(dim=1) > 0).sum().item() for rows in chunks]
        else:
            # policy_loss divides by B_chunk * T; Dr. GRPO's constant is B * max_new_tokens
            width = loss_mask.shape[1]
            return [
                (rows, rows.numel() * width / (loss_mask.shape[0] * self.config.max_new_tokens)) for rows in chunks
            ]
        total = sum(sizes)
        return [(rows, size / total if total else 0.0) for rows, size in zip(chunks, sizes, strict=True)]

    def step(
        self, step: int, draw_rows: Callable[[], list[dict]], sink: Sink, *, record_samples: bool
    ) -> tuple[dict[str, float], int]:
        config = self.config
        timings: dict[str, float] = {}
        scored, informative_ratio = self.rollout(draw_rows, timings)
        samples = scored.samples
        rewards = torch.tensor(scored.rewards)
        advantages = group_advantages(rewards, config.group_size, scale=config.advantage_scale)
        reference_started = time.perf_counter()
        ref_logprobs = self.reference_logprobs(samples)
        updates_started = time.perf_counter()
        timings["time/scoring_s"] += updates_started - reference_started
        metrics = self.update(step, samples, advantages, ref_logprobs)
        timings["time/backward_s"] = time.perf_counter() - updates_started
        metrics.update(timings)
        metrics.update(reward_metrics(scored))
        metrics["advantage/mean"] = advantages.mean().item()
        metrics["groups/informative_ratio"] = informative_ratio
        if record_samples:
            record_rollout_samples(sink, step, scored, advantages, config.samples_per_log)
        tokens = int(samples.prompt_mask.sum()) * config.group_size + int(samples.completion_mask.sum())
        return metrics, tokens


def is_due(step: int, every: int) -> bool:
    return every > 0 and step % every == 0


def samples_due(step: int, every: int, last_step: int) -> bool:
    """Every `every` steps and at the last one (what the finished policy writes), unless `every` is 0."""
    return every > 0 and (step % every == 0 or step == last_step)


@dataclass
class OnlineRun:
    """What the online driver needs: the trained model, its optimizer and schedule, the prompt order and
    a `step` function doing one rollout and its updates."""

    config: OnlineConfig
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    optimizer: Optimizer
    scheduler: LambdaLR
    order: DataOrder
    steps: int
    step: Callable[[int, bool], tuple[dict[str, float], int]]  # (step, record samples) -> (metrics, tokens)
    evaluate: Callable[[], dict[str, float]] | None
    extra_models: dict[str, PreTrainedModel] | None = None


def run_online(run: OnlineRun, sink: Sink, resume_state: dict[str, Any] | None) -> TrainResult:
    """Steps with logging, evaluation, checkpoints (exact resume), the stop check and the NaN check."""
    config = run.config
    start_step, tokens_seen = restore_training_state(resume_state, run.optimizer, run.scheduler, run.order)

    def checkpoint(step: int) -> str:
        path = save_checkpoint(
            checkpoint_dir(config, step),
            step=step,
            tokens_seen=tokens_seen,
            config=config,
            model=run.model,
            tokenizer=run.tokenizer,
            optimizer=run.optimizer,
            scheduler=run.scheduler,
            data_order=run.order,
            extra_models=run.extra_models,
        )
        sink.checkpoint(step, str(path))
        retain_checkpoints(config, sink, path)
        return str(path)

    sink.start(total_steps=run.steps, start_step=start_step)
    metrics: dict[str, float] = {}
    last_checkpoint: str | None = None
    step = start_step
    for step in range(start_step + 1, run.steps + 1):
        started = time.perf_counter()
        lr = run.scheduler.get_last_lr()[0]
        metrics, step_tokens = run.step(step, samples_due(step, config.sample_every, run.steps))
        metrics["lr"] = lr
        elapsed = time.perf_counter() - started
        tokens_seen += step_tokens
        metrics["time/step_s"] = elapsed
        metrics["throughput/tokens_per_s"] = step_tokens / elapsed
        if run.evaluate is not None and (is_due(step, config.eval_every) or step == run.steps):
            metrics.update(run.evaluate())
        diverged = not all(math.isfinite(metrics[name]) for name in ("loss", "grad_norm"))
        if is_due(step, config.log_every) or step == run.steps or diverged:
            sink.log(step, metrics, tokens_seen=tokens_seen)
        check_finite(step, metrics)
        stop = sink.should_stop()
        if is_due(step, config.checkpoint_every) or step == run.steps or stop:
            last_checkpoint = checkpoint(step)
        if stop:
            return TrainResult(step, metrics, last_checkpoint, True, tokens_seen)
    return TrainResult(step, metrics, last_checkpoint, False, tokens_seen)


def accuracy_evaluator(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, eval_data: Sequence[dict] | None, max_new_tokens: int
) -> Callable[[], dict[str, float]] | None:
    if not has_answers(eval_data):
        return None

    def evaluate() -> dict[str, float]:
        return {"eval/accuracy": generation_accuracy(model, tokenizer, eval_data, max_new_tokens=max_new_tokens)}

    return evaluate


@torch.no_grad()
def sampled_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[dict],
    *,
    samples_per_prompt: int,
    temperature: float,
    max_new_tokens: int,
) -> float:
    """avg@k (the DAPO paper's metric): exact-answer accuracy over k sampled completions per row."""
    backend = HFGenerationBackend(model, tokenizer)
    params = SamplingParams(group_size=samples_per_prompt, max_new_tokens=max_new_tokens, temperature=temperature)
    samples = backend.generate([row["prompt"] for row in rows], params)
    correct = sum(
        answers_match(extract_answer(text), str(rows[i // samples_per_prompt]["answer"]))
        for i, text in enumerate(samples.texts)
    )
    return correct / len(samples.texts)


def prompt_drawer(data: Sequence[dict], order: DataOrder, batch_size: int) -> Callable[[], list[dict]]:
    return lambda: [data[i] for i in order.next_batch(batch_size)]


def prepare_online(
    config: OnlineConfig, data: Sequence[dict]
) -> tuple[dict[str, Any] | None, PreTrainedTokenizerBase, PreTrainedModel]:
    """Validate config and data, seed, and load the policy (from the checkpoint when resuming)."""
    config.validate()
    check_prompt_rows(data, config)
    seed_everything(config.seed)
    resume_state = resume_state_for(config)
    weights, adapter = model_source(config)
    tokenizer = load_tokenizer(config.resume_from or config.model)
    check_prompt_lengths(data, tokenizer, config)
    policy = load_policy(
        weights,
        lora=LoraOptions.from_config(config),
        adapter=adapter,
        gradient_checkpointing=config.gradient_checkpointing,
    )
    return resume_state, tokenizer, policy


class Learner(Protocol):
    """One online algorithm's state and its step (rollout + updates); GRPOLearner and ppo.PPOLearner."""

    config: OnlineConfig
    policy: PreTrainedModel
    optimizer: Optimizer
    scheduler: LambdaLR

    def step(
        self, step: int, draw_rows: Callable[[], list[dict]], sink: Sink, *, record_samples: bool
    ) -> tuple[dict[str, float], int]:
        """Sample, score and update (recording a few samples through `sink` when `record_samples`); returns
        the step's metrics and the tokens it trained on."""


def run_learner(
    learner: Learner,
    data: Sequence[dict],
    sink: Sink,
    *,
    eval_data: Sequence[dict] | None,
    tokenizer: PreTrainedTokenizerBase,
    steps: int,
    resume_state: dict[str, Any] | None,
    extra_models: dict[str, PreTrainedModel] | None = None,
) -> TrainResult:
    """Drive `learner.step` over prompts drawn in the seeded data order (GRPO and PPO)."""
    config = learner.config
    order = DataOrder(len(data), config.seed)
    draw_rows = prompt_drawer(data, order, config.batch_size)
    run = OnlineRun(
        config=config,
        model=learner.policy,
        tokenizer=tokenizer,
        optimizer=learner.optimizer,
        scheduler=learner.scheduler,
        order=order,
        steps=steps,
        step=lambda step, record_samples: learner.step(step, draw_rows, sink, record_samples=record_samples),
        evaluate=accuracy_evaluator(learner.policy, tokenizer, eval_data, config.max_new_tokens),
        extra_models=extra_models,
    )
    return run_online(run, sink, resume_state)


def train(
    config: GRPOConfig, data: Sequence[dict], sink: Sink, *, eval_data: Sequence[dict] | None = None
) -> TrainResult:
    resume_state, tokenizer, policy = prepare_online(config, data)
    reference = load_reference(config.reference_model or config.model) if config.beta > 0 else None
    steps = total_steps(config, len(data))
    optimizer = build_optimizer(policy, config)
    scheduler = build_scheduler(optimizer, config, steps * config.num_iterations)
    learner = GRPOLearner(
        config, policy, reference, HFGenerationBackend(policy, tokenizer), build_rewarder(config), optimizer, scheduler
    )
    return run_learner(
        learner, data, sink, eval_data=eval_data, tokenizer=tokenizer, steps=steps, resume_state=resume_state
    )
