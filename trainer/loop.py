"""What every training loop shares: seeding, optimizer and schedule, data order, timing, the NaN check,
checkpoints that resume exactly, and `train_loop`, the one training loop of every kind (`run_steps` feeds it
the offline kinds' micro-batches; trainer.algorithms.rollout feeds it the online kinds' rollouts).

A checkpoint `output_dir/checkpoints/step-N/` holds the model and tokenizer (save_pretrained) and
`trainer_state.pt`: step, tokens seen, optimizer, scheduler, data order and the python / numpy / torch RNG
states. Resuming restores all of them after the models are loaded, so the resumed run draws the same
batches and numbers as one that never stopped.
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor
from torch.optim import AdamW, Optimizer
from torch.optim.lr_scheduler import LambdaLR
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.config import BaseConfig, ConfigError, check_data_size, config_to_dict
from trainer.devices import HOST
from trainer.formats.data import Limits
from trainer.kinds import config_kind
from trainer.modeling import distributed
from trainer.modeling.models import (
    LoraOptions,
    Precision,
    load_tokenizer,
    pick_device,
    resolve_precision,
    run_precision,
)
from trainer.sink import Sink

STATE_FILE = "trainer_state.pt"
logger = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """A loss or gradient norm became NaN or Inf; the message names the metric and the step."""


@dataclass
class TrainResult:
    step: int
    metrics: dict[str, float]
    checkpoint: str | None
    stopped: bool
    tokens_seen: int


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)  # numpy's legacy generator takes 32 bits; the same for every seed below 2^32
    torch.manual_seed(seed)


def generator_seed(value: int) -> int:
    """A seed derived from the run's (data order, sampling streams) as torch.Generator.manual_seed takes it: 64 bits,
    the same number for every value that fits them."""
    return value % 2**64


def rng_state(cuda_states: list[Tensor]) -> dict[str, Any]:
    """Every RNG's state; `cuda_states` from cuda_rng_states() (which every process of a run calls)."""
    numpy_state = np.random.get_state()
    return {
        "python": random.getstate(),
        # as a tensor so the state loads with torch.load(weights_only=True)
        "numpy": (numpy_state[0], torch.tensor(numpy_state[1].astype(np.int64), device=HOST), *numpy_state[2:]),
        "torch": torch.get_rng_state(),
        "cuda": cuda_states,
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    set_cuda_rng_states(state["cuda"])


def cuda_rng_states() -> list[Tensor]:
    """The CUDA RNG state of each GPU, by index: one process's of every GPU it sees; on many processes, each
    process's of its own GPU, in rank order (state i is the GPU process i drove)."""
    if not torch.cuda.is_available():
        return []
    processes = distributed.active()
    if not processes.distributed:
        return torch.cuda.get_rng_state_all()
    return processes.gather(torch.cuda.get_rng_state(processes.local_rank).cpu())


def set_cuda_rng_states(states: list[Tensor]) -> None:
    """Restore cuda_rng_states() on a machine with as many GPUs or not (a resume on another number of processes):
    state i to GPU i for the GPUs that exist; on many processes each restores only its own GPU's (state `rank`),
    since touching another GPU would make a CUDA context there."""
    if not states or not torch.cuda.is_available():
        return
    processes = distributed.active()
    if processes.distributed:
        if processes.rank < len(states):
            torch.cuda.set_rng_state(states[processes.rank], processes.local_rank)
        return
    for index in range(min(len(states), torch.cuda.device_count())):
        torch.cuda.set_rng_state(states[index], index)


def total_steps(config: BaseConfig, dataset_size: int) -> int:
    """The run's steps on `dataset_size` rows, once the config is checked against that size (check_data_size)."""
    check_data_size(config, dataset_size)
    if config.max_steps is not None:
        return config.max_steps
    return max(1, math.ceil(config.epochs * dataset_size / config.batch_size))


def build_optimizer(model: torch.nn.Module, config: BaseConfig) -> AdamW:
    parameters = [p for p in model.parameters() if p.requires_grad]
    # the fused kernel updates every tensor in one pass (CPU and CUDA); other devices take the foreach path
    fused = all(p.device.type in ("cpu", "cuda") for p in parameters)
    return AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay, fused=fused or None)


def lr_factor(step: int, *, warmup: int, total: int, kind: str) -> float:
    """Multiplier of the peak lr at optimizer step `step` (0-based), as transformers' schedules."""
    if step < warmup:
        return step / max(1, warmup)
    if kind == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if kind == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return max(0.0, 1.0 - progress)


def build_scheduler(optimizer: Optimizer, config: BaseConfig, steps: int) -> LambdaLR:
    warmup = config.warmup_steps or int(config.warmup_ratio * steps)
    return LambdaLR(
        optimizer, lambda step: lr_factor(step, warmup=warmup, total=steps, kind=config.lr_scheduler)
    )


class DataOrder:
    """Shuffled indices, reshuffled each epoch from (seed, epoch); a batch may run across an epoch end."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.consumed = 0

    def _permutation(self, epoch: int) -> list[int]:
        generator = torch.Generator(device=HOST).manual_seed(generator_seed(self.seed * 100_003 + epoch))
        return torch.randperm(self.size, generator=generator, device=HOST).tolist()

    def next_batch(self, batch_size: int) -> list[int]:
        # a batch larger than the data would take rows twice (and one of 2^63 rows would never be built): refused
        # here too, whoever built the config
        if not 0 < batch_size <= self.size:
            raise ValueError(f"a batch of {batch_size} rows from data of {self.size} rows: a batch takes from 1 row "
                             f"to all of them")
        indices = []
        while len(indices) < batch_size:
            epoch, position = divmod(self.consumed, self.size)
            take = min(batch_size - len(indices), self.size - position)
            indices.extend(self._permutation(epoch)[position : position + take])
            self.consumed += take
        return indices

    def state_dict(self) -> dict[str, int]:
        return {"size": self.size, "seed": self.seed, "consumed": self.consumed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        if state["size"] != self.size:
            raise ValueError(f"the checkpoint was trained on {state['size']} examples, this data has {self.size}")
        self.seed, self.consumed = state["seed"], state["consumed"]


def check_finite(step: int, metrics: Mapping[str, float], names: tuple[str, ...] = ("loss", "grad_norm")) -> None:
    for name in names:
        value = metrics.get(name)
        if value is not None and not math.isfinite(value):
            kind = "NaN" if math.isnan(value) else "Inf"
            raise TrainingDiverged(f"{name} is {kind} at step {step}")


def checkpoint_dir(config: BaseConfig, step: int) -> Path:
    return Path(config.output_dir) / "checkpoints" / f"step-{step}"


def save_checkpoint(
    directory: Path,
    *,
    step: int,
    tokens_seen: int,
    config: BaseConfig,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: Optimizer,
    scheduler: LambdaLR,
    data_order: DataOrder,
    extra_models: Mapping[str, PreTrainedModel] | None = None,
    precision: Precision | None = None,
) -> Path:
    """Write everything a resume needs; written beside and renamed, so a crash never leaves half a checkpoint.
    `extra_models` (e.g. PPO's critic) are saved in subdirectories named by their keys.

    Every process calls it. The main process writes the files; a sharded (fsdp) model is gathered into an
    ordinary save_pretrained directory, and its optimizer state is written by every process, each its shards,
    through torch.distributed.checkpoint into `optimizer/` (which a resume on any number of processes reshards).
    """
    processes = distributed.active()
    partial = directory.with_name(directory.name + ".partial")
    if processes.is_main:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    processes.barrier()
    sharded = distributed.is_sharded(model)
    models = {".": model, **(extra_models or {})}
    # gathered on every process (a collective), written by the main one
    weights = {name: distributed.full_state_dict(each) if distributed.is_sharded(each) else None
               for name, each in models.items()}
    if sharded:
        distributed.save_sharded_optimizer(
            optimized_module(model, extra_models), optimizer, partial / distributed.OPTIMIZER_DIR
        )
    cuda_states = cuda_rng_states()  # gathered from every process's GPU
    if processes.is_main:
        for name, each in models.items():
            each.save_pretrained(partial / name, state_dict=weights[name])
        tokenizer.save_pretrained(partial)
        state = {
            "step": step,
            "tokens_seen": tokens_seen,
            "kind": config_kind(config),
            "config": config_to_dict(config),
            "scheduler": scheduler.state_dict(),
            "data_order": data_order.state_dict(),
            "rng": rng_state(cuda_states),
            "precision": precision.mode if precision is not None else None,
        }
        if not sharded:
            state["optimizer"] = optimizer.state_dict()
        torch.save(state, partial / STATE_FILE)
        shutil.rmtree(directory, ignore_errors=True)
        partial.rename(directory)
    processes.barrier()
    return directory


def optimized_module(model: torch.nn.Module, extra_models: Mapping[str, torch.nn.Module] | None) -> torch.nn.Module:
    """The module holding every parameter the optimizer steps: the model, and beside it the extra models (PPO's
    critic), so that a sharded optimizer state names each parameter the same way when saved and loaded."""
    if not extra_models:
        return model
    return torch.nn.ModuleDict({"model": model, **extra_models})


def checkpoint_step(directory: Path) -> int | None:
    """N of a complete `step-N` checkpoint directory, None for anything else (e.g. a `.partial` one)."""
    number = directory.name.removeprefix("step-")
    return int(number) if directory.name.startswith("step-") and number.isdigit() else None


def strip_optimizer_state(directory: Path) -> bool:
    """Rewrite the checkpoint's state without the optimizer (most of a checkpoint's bytes); True if it had one.
    A resume from it restarts AdamW's moments; everything else stays exact."""
    shutil.rmtree(directory / distributed.OPTIMIZER_DIR, ignore_errors=True)
    path = directory / STATE_FILE
    state = torch.load(path, weights_only=True, mmap=True)
    if "optimizer" not in state:
        return False
    del state["optimizer"]
    partial = path.with_name(STATE_FILE + ".partial")
    torch.save(state, partial)
    partial.replace(path)
    return True


def retain_checkpoints(config: BaseConfig, sink: Sink, written: Path) -> None:
    """After writing `written`: strip the optimizer state from the run's earlier checkpoints (only the newest
    needs it to resume exactly) and delete those beyond `keep_last`, each only if the sink releases it (another
    run may use it as a model). Checkpoints after `written` belong to an abandoned branch and are left alone."""
    newest = checkpoint_step(written)
    earlier = sorted(
        ((step, directory) for directory in written.parent.iterdir()
         if (step := checkpoint_step(directory)) is not None and step < newest),
        reverse=True,
    )
    for rank, (step, directory) in enumerate(earlier, start=2):
        if config.keep_last and rank > config.keep_last and sink.checkpoint_removed(step, str(directory)):
            shutil.rmtree(directory, ignore_errors=True)
        elif (directory / STATE_FILE).exists():
            strip_optimizer_state(directory)


def load_checkpoint_state(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{directory} is not a training checkpoint: {STATE_FILE} is missing")
    return torch.load(path, weights_only=True)


@dataclass
class MicroBatchOutput:
    """One micro-batch: `loss` is already scaled so the micro losses of a step sum to the step's loss;
    `metrics` are means over the micro-batch (averaged over micro-batches of equal size); `tokens` counts
    the non-padding tokens processed."""

    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    tokens: int = 0


class Objective(Protocol):
    def micro_batches(self, indices: list[int], chunks: list[list[int]]) -> Iterator[MicroBatchOutput]:
        """Yield the scaled loss of each micro-batch in `chunks` (this process's part of the step's examples
        `indices`), each loss normalised by totals over all of `indices`, so the losses of every process's
        micro-batches sum to the step's loss.

        The driver calls backward on each loss before asking for the next one.
        """


@dataclass
class LoopParts:
    """What `run_steps` drives: built by each offline kind's train() (a resume fills `resume_state`)."""

    config: BaseConfig
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    objective: Objective
    dataset_size: int
    evaluate: Callable[[], dict[str, float]] | None = None
    write_samples: Callable[[int], None] | None = None
    resume_state: dict[str, Any] | None = None
    precision: Precision | None = None


def restore_training_state(
    state: dict[str, Any] | None,
    optimizer: Optimizer,
    scheduler: LambdaLR,
    order: DataOrder,
    *,
    model: torch.nn.Module | None = None,
    directory: str | Path | None = None,
) -> tuple[int, int]:
    """Load a checkpoint's optimizer, scheduler, data order and RNG; (start step, tokens seen), (0, 0) when new.
    The optimizer state may come from a run on another number of processes, sharded or not (`directory` is the
    checkpoint, `model` the trained model, for sharded states)."""
    if state is None:
        return 0, 0
    sharded_state = Path(directory) / distributed.OPTIMIZER_DIR if directory is not None else None
    if "optimizer" in state and model is not None and distributed.holds_sharded(model):
        distributed.load_full_optimizer_state(model, optimizer, state["optimizer"])
    elif "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    elif sharded_state is not None and sharded_state.is_dir() and model is not None:
        distributed.load_sharded_optimizer(model, optimizer, sharded_state)
    else:
        logger.warning("resuming from step %s without optimizer state: AdamW's moments restart from zero",
                       state["step"])
    scheduler.load_state_dict(state["scheduler"])
    order.load_state_dict(state["data_order"])
    set_rng_state(state["rng"])
    return state["step"], state["tokens_seen"]


def optimizer_update(
    optimizer: Optimizer, scheduler: LambdaLR, parameters: list[torch.nn.Parameter], max_grad_norm: float,
    *, loss: float,
) -> float:
    """Clip, step (only when the loss and the gradient are finite) and advance the schedule: the one place
    every kind steps its optimizer and scheduler. Returns the gradient norm."""
    # ddp: every process's gradient is its share of the step's; their sum is the whole step's gradient
    distributed.active().sum_gradients(parameters)
    with outside_autocast(parameters[0].device if parameters else torch.device("cpu")):
        return _clip_and_step(optimizer, scheduler, parameters, max_grad_norm, loss=loss)


def _clip_and_step(
    optimizer: Optimizer, scheduler: LambdaLR, parameters: list[torch.nn.Parameter], max_grad_norm: float,
    *, loss: float,
) -> float:
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm if max_grad_norm > 0 else math.inf).item()
    if math.isfinite(loss) and math.isfinite(grad_norm):
        optimizer.step()
        # autocast keeps the bf16 copies of the weights it made until its outermost region ends, and a step's
        # later updates (PPO epochs, GRPO iterations) run in the same region: drop the copies of the old weights
        torch.clear_autocast_cache()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return grad_norm


def outside_autocast(device: torch.device) -> AbstractContextManager:
    return torch.autocast(device.type, enabled=False)


def backward(loss: Tensor) -> None:
    """loss.backward() outside autocast (as torch advises: backward ops run in the dtypes the forward chose;
    on the CPU, autograd would otherwise apply the forward's autocast to the gradient computations too)."""
    with outside_autocast(loss.device):
        loss.backward()


StepFunction = Callable[[int, bool], tuple[dict[str, float], int]]  # (step, record samples) -> (metrics, tokens)


@dataclass
class Training:
    """What `train_loop` drives, for every kind: the trained model with its optimizer, schedule and data order,
    and `step`, one step's work (offline: the batch's micro-batches and one update; online: a rollout and its
    updates), which records samples when asked and returns the step's metrics and the tokens it trained on."""

    config: BaseConfig
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    optimizer: Optimizer
    scheduler: LambdaLR
    order: DataOrder
    steps: int
    step: StepFunction
    evaluate: Callable[[], dict[str, float]] | None = None
    # offline kinds write samples by generating from the model once the step is checked
    write_samples: Callable[[int], None] | None = None
    extra_models: dict[str, PreTrainedModel] | None = None
    resume_state: dict[str, Any] | None = None
    # every forward of a step, evaluation and samples runs under it (bf16 autocast under bf16-mixed)
    precision: Precision | None = None


def train_loop(run: Training, sink: Sink) -> TrainResult:
    """The training loop of every kind: step, evaluate, log, check for divergence, samples, checkpoint, stop.
    Raises TrainingDiverged on a NaN/Inf loss or gradient norm (after logging the step)."""
    config, steps = run.config, run.steps
    sink = distributed.rank_sink(sink)
    precision = run.precision or resolve_precision("fp32", run.model.device)
    # resume: optimizer, schedule, data order and RNG exactly where the checkpoint left them
    start_step, tokens_seen = restore_training_state(
        run.resume_state, run.optimizer, run.scheduler, run.order,
        model=optimized_module(run.model, run.extra_models), directory=config.resume_from
    )
    sink.start(total_steps=steps, start_step=start_step)
    metrics: dict[str, float] = {}
    last_checkpoint: str | None = None
    step = start_step
    for step in range(start_step + 1, steps + 1):
        # step: forward, backward and the optimizer updates (which advance the schedule)
        started = time.perf_counter()
        if config.debug_hang_at_step == step:
            hang_deaf_to_cancel(step)
        lr = run.scheduler.get_last_lr()[0]
        with precision.autocast(run.model.device):
            metrics, step_tokens = run.step(step, samples_due(step, config.sample_every, steps))
        metrics["lr"] = lr
        tokens_seen += step_tokens
        metrics["time/step_s"] = time.perf_counter() - started
        metrics.update(slowest_process_times(metrics))
        metrics["throughput/tokens_per_s"] = step_tokens / metrics["time/step_s"]
        # evaluate on schedule and at the end, but not a model a diverged step has just broken
        diverged = not all(math.isfinite(metrics[name]) for name in ("loss", "grad_norm"))
        if run.evaluate is not None and not diverged and (is_due(step, config.eval_every) or step == steps):
            with precision.autocast(run.model.device):
                metrics.update(run.evaluate())
        # log, then stop on divergence with the diverged step on record
        if is_due(step, config.log_every) or step == steps or diverged:
            sink.log(step, metrics, tokens_seen=tokens_seen)
        check_finite(step, metrics)
        # samples: online kinds recorded theirs in the rollout; offline kinds generate them now
        if run.write_samples is not None and is_due(step, config.sample_every):
            with precision.autocast(run.model.device):
                run.write_samples(step)
        # checkpoint on schedule, at the end and before stopping on request
        stop = sink.should_stop()
        if is_due(step, config.checkpoint_every) or step == steps or stop:
            last_checkpoint = _checkpoint(run, sink, step, tokens_seen)
        if stop:
            return TrainResult(step, metrics, last_checkpoint, True, tokens_seen)
    return TrainResult(step, metrics, last_checkpoint, False, tokens_seen)


def hang_deaf_to_cancel(step: int) -> None:
    """The test-only stuck step (config.debug_hang_at_step): sleeps for ever without asking the sink whether to stop,
    as a step caught in an endless loop would; only its worker's kill ends it."""
    logger.warning("debug_hang_at_step: step %s hangs for ever, deaf to a cancel", step)
    while True:
        time.sleep(3600)


def slowest_process_times(metrics: Mapping[str, float]) -> dict[str, float]:
    """The step's time/* metrics, each the slowest process's: a step lasts as long as its slowest process, and the
    step's throughput is its tokens over that time (a collective on many processes: every process calls it)."""
    times = {name: value for name, value in metrics.items() if name.startswith("time/")}
    return distributed.active().sum_metrics(times)


def _checkpoint(run: Training, sink: Sink, step: int, tokens_seen: int) -> str:
    path = save_checkpoint(
        checkpoint_dir(run.config, step),
        step=step,
        tokens_seen=tokens_seen,
        config=run.config,
        model=run.model,
        tokenizer=run.tokenizer,
        optimizer=run.optimizer,
        scheduler=run.scheduler,
        data_order=run.order,
        extra_models=run.extra_models,
        precision=run.precision,
    )
    sink.checkpoint(step, str(path))
    if distributed.active().is_main:
        retain_checkpoints(run.config, sink, path)
    return str(path)


def is_due(step: int, every: int) -> bool:
    return every > 0 and step % every == 0


def samples_due(step: int, every: int, last_step: int) -> bool:
    """Every `every` steps and at the last one (what the finished policy writes), unless `every` is 0."""
    return every > 0 and (step % every == 0 or step == last_step)


def run_steps(parts: LoopParts, sink: Sink) -> TrainResult:
    """The offline kinds (reward model, SFT, DPO): optimizer steps with gradient accumulation over the
    objective's micro-batches, driven by train_loop."""
    config, model = parts.config, parts.model
    steps = total_steps(config, parts.dataset_size)
    optimizer = build_optimizer(model, config)
    scheduler = build_scheduler(optimizer, config, steps)
    order = DataOrder(parts.dataset_size, config.seed)
    trainable = [p for p in model.parameters() if p.requires_grad]

    def step(number: int, _record_samples: bool) -> tuple[dict[str, float], int]:
        return _offline_step(parts, optimizer, scheduler, trainable, order.next_batch(config.batch_size), number)

    model.train()
    return train_loop(
        Training(config=config, model=model, tokenizer=parts.tokenizer, optimizer=optimizer, scheduler=scheduler,
                 order=order, steps=steps, step=step, evaluate=parts.evaluate, write_samples=parts.write_samples,
                 resume_state=parts.resume_state, precision=parts.precision),
        sink,
    )


def _offline_step(
    parts: LoopParts,
    optimizer: Optimizer,
    scheduler: LambdaLR,
    trainable: list[torch.nn.Parameter],
    indices: list[int],
    step: int,
) -> tuple[dict[str, float], int]:
    config = parts.config
    processes = distributed.active()
    chunks = step_chunks(indices, config.grad_accum_steps, processes)
    # each micro-batch's metrics count for its share of all the step's micro-batches (every process's)
    share = 1 / (config.grad_accum_steps * processes.world_size)
    totals: dict[str, float] = {"loss": 0.0, "tokens": 0.0}
    for output in parts.objective.micro_batches(indices, chunks):
        loss = output.loss
        if config.debug_nan_at_step == step:
            loss = loss * float("nan")
        backward(loss)
        totals["loss"] += loss.item()
        totals["tokens"] += output.tokens
        for name, value in output.metrics.items():
            totals[name] = totals.get(name, 0.0) + value * share
    totals = processes.sum_metrics(totals)
    tokens = int(totals.pop("tokens"))
    grad_norm = optimizer_update(optimizer, scheduler, trainable, config.max_grad_norm, loss=totals["loss"])
    return {"loss": totals.pop("loss"), "grad_norm": grad_norm, **totals}, tokens


def step_chunks(indices: list[int], count: int, processes: distributed.Processes) -> list[list[int]]:
    """This process's micro-batches of a step: `indices` cut into count x world_size equal chunks, of which
    each process takes `count` consecutive ones."""
    total = count * processes.world_size
    size = len(indices) // total
    chunks = [indices[number * size : (number + 1) * size] for number in range(total)]
    return list(processes.share(chunks))


def model_source(config: BaseConfig) -> tuple[str, str | None]:
    """(weights path, LoRA adapter path) to load the trained model from: the checkpoint when resuming."""
    if config.resume_from is None:
        return config.model, None
    if config.use_lora:
        return config.model, config.resume_from
    return config.resume_from, None


@dataclass
class RunStart:
    """What a train() starts from: the tokenizer and limits, where the trained model's weights come from
    (the checkpoint when resuming) and the checkpoint state to restore."""

    tokenizer: PreTrainedTokenizerBase
    limits: Limits
    weights: str
    adapter: str | None
    resume_state: dict[str, Any] | None
    model_options: dict[str, Any]
    precision: Precision


def start_run(config: BaseConfig) -> RunStart:
    """Validate, seed, and find the tokenizer and weights; call before building models (they draw from the RNG)."""
    config.validate()
    distributed.setup(config)
    seed_everything(config.seed)
    resume_state = resume_state_for(config)
    weights, adapter = model_source(config)
    precision = run_precision(config, pick_device())
    return RunStart(
        tokenizer=load_tokenizer(config.resume_from or config.model),
        limits=Limits(config.max_length, config.max_prompt_length),
        weights=weights,
        adapter=adapter,
        resume_state=resume_state,
        model_options={
            "lora": LoraOptions.from_config(config),
            "adapter": adapter,
            "gradient_checkpointing": config.gradient_checkpointing,
            "precision": precision,
        },
        precision=precision,
    )


def resume_state_for(config: BaseConfig) -> dict[str, Any] | None:
    """The checkpoint state to resume from (config.resume_from), checked against the run's kind."""
    if config.resume_from is None:
        return None
    try:
        state = load_checkpoint_state(config.resume_from)
    except FileNotFoundError as error:
        raise ConfigError("resume_from", str(error)) from error
    if state["kind"] != config_kind(config):
        raise ConfigError(
            "resume_from", f"{config.resume_from} is a {state['kind']} checkpoint, this run is {config_kind(config)}"
        )
    return state
