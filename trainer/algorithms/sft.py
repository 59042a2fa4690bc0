"""Supervised fine-tuning: next-token loss on completion tokens only, averaged over all completion tokens
of the optimizer step (so the numbers do not depend on how the step is split into micro-batches).

eval/loss is the same loss on the held-out rows; eval/accuracy, when every held-out row has an `answer`,
is the exact-match accuracy of greedy generation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from transformers import PreTrainedModel

from trainer.algorithms.evaluation import generation_accuracy, has_answers, sample_writer
from trainer.algorithms.logprobs import completion_token_logps
from trainer.config import SFTConfig
from trainer.formats.data import SequenceExample, collate, tokenize_sft
from trainer.loop import (
    LoopParts,
    MicroBatchOutput,
    TrainResult,
    run_steps,
    start_run,
)
from trainer.modeling.models import load_policy
from trainer.sink import Sink


class SFTObjective:
    def __init__(self, model: PreTrainedModel, examples: Sequence[SequenceExample], *, pad_token_id: int) -> None:
        self.model = model
        self.examples = examples
        self.pad_token_id = pad_token_id

    def micro_batches(self, indices: list[int], chunks: list[list[int]]) -> Iterator[MicroBatchOutput]:
        step_tokens = sum(len(self.examples[i].input_ids) - self.examples[i].prompt_length for i in indices)
        for chunk in chunks:
            batch = collate([self.examples[i] for i in chunk], pad_token_id=self.pad_token_id)
            batch = batch.to(self.model.device)
            logps, _ = completion_token_logps(self.model, batch)
            yield MicroBatchOutput(loss=-logps.sum() / step_tokens, tokens=batch.tokens)

    @torch.no_grad()
    def mean_loss(self, examples: Sequence[SequenceExample], batch_size: int) -> float:
        total, count = 0.0, 0
        for start in range(0, len(examples), batch_size):
            batch = collate(examples[start : start + batch_size], pad_token_id=self.pad_token_id).to(self.model.device)
            logps, mask = completion_token_logps(self.model, batch)
            total -= logps.sum().item()
            count += int(mask.sum())
        return total / max(count, 1)


def train(config: SFTConfig, data: Sequence[dict], sink: Sink, *, eval_data: Sequence[dict] | None = None) -> TrainResult:
    start = start_run(config)
    tokenizer = start.tokenizer
    examples = tokenize_sft(data, tokenizer, start.limits)
    eval_examples = tokenize_sft(eval_data, tokenizer, start.limits, name="eval data") if eval_data else None
    model = load_policy(start.weights, **start.model_options)
    objective = SFTObjective(model, examples, pad_token_id=tokenizer.pad_token_id)

    def evaluate() -> dict[str, float]:
        model.eval()
        metrics = {"eval/loss": objective.mean_loss(eval_examples, config.batch_size)}
        if has_answers(eval_data):
            metrics["eval/accuracy"] = generation_accuracy(
                model, tokenizer, eval_data, max_new_tokens=config.eval_max_new_tokens
            )
        model.train()
        return metrics

    parts = LoopParts(
        config=config,
        model=model,
        tokenizer=tokenizer,
        objective=objective,
        dataset_size=len(examples),
        evaluate=evaluate if eval_examples else None,
        write_samples=sample_writer(sink, model, tokenizer, eval_data or data, max_new_tokens=config.eval_max_new_tokens),
        resume_state=start.resume_state,
        precision=start.precision,
    )
    return run_steps(parts, sink)
