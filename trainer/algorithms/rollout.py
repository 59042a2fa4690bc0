"""The online machinery GRPO and PPO share: drawing prompts, sampling groups of completions, scoring them
with the rewards, the reward metrics and sample records, and `run_learner`, which hands an online learner's
step to the one training loop (trainer.loop.train_loop).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.algorithms.evaluation import accuracy_evaluator, format_rate
from trainer.config import OnlineConfig, check_data_size
from trainer.decoding.generation import GenerationBackend, GroupSamples, SamplingParams, concat_samples
from trainer.devices import HOST
from trainer.formats.chat import assistant_turn, display_text, encode_completions
from trainer.formats.data import DataError, Limits, SequenceExample, check_rows, collate, encode_prompt
from trainer.loop import (
    DataOrder,
    Training,
    TrainResult,
    generator_seed,
    model_source,
    resume_state_for,
    seed_everything,
    train_loop,
)
from trainer.modeling import distributed
from trainer.modeling.models import (
    LoraOptions,
    Precision,
    load_policy,
    load_reward_model,
    load_tokenizer,
    pick_device,
    run_precision,
)
from trainer.rewards import Rewarder, reward_inputs, reward_row_fields, row_has_field
from trainer.sink import Sink, sample_row


@dataclass
class ScoredGroups:
    """Sampled completions of `rows` (one row per prompt) with their rewards; per_function is unweighted."""

    samples: GroupSamples
    rows: list[dict]
    rewards: list[float]
    per_function: dict[str, list[float]]

    def to(self, device: torch.device | str) -> ScoredGroups:
        return dataclasses.replace(self, samples=self.samples.to(device))

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


class RewardModelScorer:
    """Scores prompt + completion with a trained reward model (a scalar head), in batches: the scorer of a
    `Rewarder`.

    Sequences are built as trainer.algorithms.reward_model trains on them (trainer.formats.chat.encode_completions, TRL's
    tokenisation): a text prompt + completion + EOS, or a conversation + the completion as the assistant's turn
    through the chat template; right-padded.
    """

    def __init__(self, path: str, *, batch_size: int = 16, precision: Precision | None = None) -> None:
        """`precision`: the run's precision (a frozen scorer is held in its frozen dtype)."""
        self.tokenizer = load_tokenizer(path)
        self.model = load_reward_model(path, pad_token_id=self.tokenizer.pad_token_id, precision=precision, frozen=True)
        self.batch_size = batch_size

    def _example(self, prompt: str | list[dict], completion: str) -> SequenceExample:
        answer = completion if isinstance(prompt, str) else assistant_turn(completion)
        prompt_ids, (completion_ids,) = encode_completions(self.tokenizer, prompt, [answer])
        return SequenceExample(prompt_ids + completion_ids, len(prompt_ids))

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        examples = [self._example(p, c) for p, c in zip(prompts, completions, strict=True)]
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(examples), self.batch_size):
                batch = collate(examples[start : start + self.batch_size], pad_token_id=self.tokenizer.pad_token_id)
                batch = batch.to(self.model.device)
                logits = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits
                scores.extend(logits[:, 0].float().tolist())
        return scores


def build_rewarder(config: OnlineConfig, precision: Precision | None = None) -> Rewarder:
    scorer = RewardModelScorer(config.reward_model, precision=precision) if config.reward_model else None
    return Rewarder(config.rewards, scorer=scorer, scorer_weight=config.reward_model_weight)


def check_prompt_rows(rows: Sequence[dict], config: OnlineConfig, *, name: str = "training data") -> None:
    """Every row needs a prompt (text or a conversation); `answer_match` also needs an answer in every row."""
    for index, row in enumerate(rows):
        # prompt-only rows, as TRL's GRPO takes them: no `messages` or implicit prompt to take one from
        if isinstance(row, dict) and "prompt" not in row:
            raise DataError(f"{name} row {index}: missing field 'prompt'")
    check_rows(rows, ("prompt",), name=name)
    # the fields the rewards read (trainer.rewards.REWARD_ROW_FIELDS): the launch checked them, the data may have
    # changed since
    for reward, fields in reward_row_fields(config.rewards).items():
        for field in fields:
            for index, row in enumerate(rows):
                if not (isinstance(row.get(field), str | int | float) and row_has_field(row, field)):
                    raise DataError(f"{name} row {index}: missing field '{field}' (the {reward} reward needs it)")


def check_prompt_lengths(
    rows: Sequence[dict], tokenizer: PreTrainedTokenizerBase, config: OnlineConfig, *, name: str = "training data"
) -> None:
    """Every prompt has at least one token and at most max_prompt_length (a DataError names the row)."""
    limits = Limits(max_length=config.max_length, max_prompt_length=config.max_prompt_length)
    for index, row in enumerate(rows):
        encode_prompt(tokenizer, row["prompt"], limits, index=index, name=name)


def sampling_seed(run_seed: int, step: int, round_: int, position: int) -> int:
    """The seed of the completions of the prompt at `position` of a step's (and dynamic sampling round's) batch:
    the same whichever process samples it, so a run draws the same completions on any number of processes."""
    return generator_seed(((run_seed * 1_000_003 + step) * 10_007 + round_) * 1_000_033 + position)


def sample_and_score_shared(
    backend: GenerationBackend,
    rewarder: Rewarder,
    rows: list[dict],
    params: SamplingParams,
    config: OnlineConfig,
    timings: dict[str, float],
    *,
    step: int,
    round_: int = 0,
) -> ScoredGroups:
    """The step's prompts `rows` sampled and scored: each process samples and scores its contiguous share (a
    group never spans processes), then every process gets every share, in order, so all of them hold the whole
    round. Seeds per prompt position (sampling_seed) make the completions those of a one-process run."""
    processes = distributed.active()
    first, last = processes.share_bounds(len(rows))
    seeds = [sampling_seed(config.seed, step, round_, position) for position in range(first, last)]
    mine = sample_and_score(backend, rewarder, rows[first:last], params, config, timings, seeds=seeds)
    if not processes.distributed:
        return mine
    device = mine.samples.prompt_ids.device
    return concat_scored(processes.gather(mine.to("cpu")), pad_token_id=backend.pad_token_id).to(device)


def sample_and_score(
    backend: GenerationBackend,
    rewarder: Rewarder,
    rows: list[dict],
    params: SamplingParams,
    config: OnlineConfig,
    timings: dict[str, float],
    *,
    seeds: Sequence[int] | None = None,
) -> ScoredGroups:
    """Sample and score; adds the seconds spent to timings["time/generation_s"] and ["time/scoring_s"]."""
    started = time.perf_counter()
    samples = backend.generate([row["prompt"] for row in rows], params, seeds=seeds)
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
            answer_fallback_last_number=config.answer_fallback_last_number,
        )
    )
    timings["time/generation_s"] = timings.get("time/generation_s", 0.0) + generated - started
    if backend.setup_seconds:  # capturing the decoding step's CUDA graphs: once per shape, at the first steps
        timings["time/graph_capture_s"] = timings.get("time/graph_capture_s", 0.0) + backend.setup_seconds
        backend.setup_seconds = 0.0
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
    rewards = torch.tensor(scored.rewards, device=HOST)
    samples = scored.samples
    metrics = {
        "reward/mean": rewards.mean().item(),
        "reward/std": rewards.std().item() if rewards.numel() > 1 else 0.0,
        "completion/mean_length": samples.lengths.float().mean().item(),
        "completion/clipped_ratio": samples.truncated.float().mean().item(),
        # what strict answer_match can read: a policy drifting off the format shows here before the reward falls
        "completion/format_rate": format_rate(samples.texts),
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
            sample_row(
                step,
                display_text(scored.rows[i // size]["prompt"]),
                scored.samples.texts[i],
                {name: values[i] for name, values in scored.per_function.items()},
                advantage=float(advantages[i].mean()),
            )
        )


def prompt_drawer(data: Sequence[dict], order: DataOrder, batch_size: int) -> Callable[[], list[dict]]:
    return lambda: [data[i] for i in order.next_batch(batch_size)]


def prepare_online(
    config: OnlineConfig, data: Sequence[dict]
) -> tuple[dict[str, Any] | None, PreTrainedTokenizerBase, PreTrainedModel, Precision]:
    """Validate config and data, seed, resolve the precision and load the policy (from the checkpoint when
    resuming)."""
    config.validate()
    check_prompt_rows(data, config)
    distributed.setup(config)
    seed_everything(config.seed)
    resume_state = resume_state_for(config)
    weights, adapter = model_source(config)
    tokenizer = load_tokenizer(config.resume_from or config.model)
    check_prompt_lengths(data, tokenizer, config)
    check_data_size(config, len(data))  # once the rows are known good, so that a bad row is named first
    precision = run_precision(config, pick_device())
    policy = load_policy(
        weights,
        lora=LoraOptions.from_config(config),
        adapter=adapter,
        gradient_checkpointing=config.gradient_checkpointing,
        precision=precision,
    )
    return resume_state, tokenizer, policy, precision


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
    precision: Precision,
    extra_models: dict[str, PreTrainedModel] | None = None,
) -> TrainResult:
    """Drive `learner.step` over prompts drawn in the seeded data order (GRPO and PPO)."""
    config = learner.config
    order = DataOrder(len(data), config.seed)
    draw_rows = prompt_drawer(data, order, config.batch_size)
    run = Training(
        config=config,
        model=learner.policy,
        tokenizer=tokenizer,
        optimizer=learner.optimizer,
        scheduler=learner.scheduler,
        order=order,
        steps=steps,
        step=lambda step, record_samples: learner.step(step, draw_rows, sink, record_samples=record_samples),
        evaluate=accuracy_evaluator(learner.policy, tokenizer, eval_data, config.max_new_tokens, decoding=config.decoding),
        extra_models=extra_models,
        resume_state=resume_state,
        precision=precision,
    )
    return train_loop(run, sink)
