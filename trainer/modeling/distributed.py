"""A run on many processes (torchrun): which process this is, and what the processes do together.

torchrun starts one process per GPU (per CPU process on a machine without GPUs) and sets RANK, WORLD_SIZE,
LOCAL_RANK and the rendezvous address; `setup(config)` joins the process group (NCCL on GPUs, gloo on the CPU)
once and makes the `Processes` every part of the trainer asks through `active()`. Without torchrun, the same
code runs as one process and every collective below is a no-op.

How the numbers stay those of one process:
- every process draws the same global batch from the same seeded data order and takes a contiguous share of
  it; losses are normalised by the whole step's totals, so summing the processes' gradients gives the
  gradient of the whole batch (ddp: `sum_gradients`; fsdp: FSDP2's reduce-scatter, told to sum);
- the online kinds sample their share of prompts with per-prompt seeded streams (trainer.decoding.generation), then
  gather the scored groups so every process holds the whole rollout: rewards, advantages and dynamic sampling
  decisions are computed once per process on identical data;
- only the main process (rank 0) reports: `RankSink` forwards logs, samples and checkpoints from rank 0 and
  hands every process rank 0's answer to should_stop, so a cancel stops every rank at the same step.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from trainer.config import BaseConfig, ConfigError
from trainer.sink import SampleRow, Sink

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Collectives wait this long for a slow rank before failing the run (a rank stuck in a data error or a dead
# node); longer than any step we expect, short enough that a hung run does not hold the GPUs for hours.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=30)
# Gradients are summed in buckets of at most this many elements, so the flat copy never doubles a big model.
GRADIENT_BUCKET_ELEMENTS = 50_000_000


@dataclass(frozen=True)
class Processes:
    """This process's place in the run: rank among world_size processes, and how the model is parallel."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    parallelism: str = "ddp"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def sharded(self) -> bool:
        return self.distributed and self.parallelism == "fsdp"

    def share(self, items: Sequence[T]) -> Sequence[T]:
        """This process's contiguous share of `items` (whose length the world size divides)."""
        size = len(items) // self.world_size
        return items[self.rank * size : (self.rank + 1) * size]

    def share_bounds(self, count: int) -> tuple[int, int]:
        size = count // self.world_size
        return self.rank * size, (self.rank + 1) * size

    def gather(self, value: T) -> list[T]:
        """Every process's `value`, in rank order (any picklable object; tensors should be on the CPU)."""
        if not self.distributed:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def broadcast(self, value: T) -> T:
        """The main process's `value`, on every process."""
        if not self.distributed:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def sum_metrics(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """Metrics each process gave its share of (weighted so that the shares add up), summed over processes;
        names starting with "time/" take the slowest process's value instead."""
        if not self.distributed:
            return dict(metrics)
        totals: dict[str, float] = {}
        for part in self.gather(dict(metrics)):
            for name, value in part.items():
                if name.startswith("time/"):
                    totals[name] = max(totals.get(name, value), value)
                else:
                    totals[name] = totals.get(name, 0.0) + value
        return totals

    def sum_gradients(self, parameters: Iterable[nn.Parameter]) -> None:
        """ddp: replace each gradient by its sum over processes (a parameter without one counts as zeros).
        fsdp: FSDP2 reduced them in backward already (see `shard_model`), nothing to do."""
        if not self.distributed or self.sharded:
            return
        with torch.no_grad():
            for bucket in _buckets([p for p in parameters if p.requires_grad]):
                for parameter in bucket:
                    if parameter.grad is None:
                        parameter.grad = torch.zeros_like(parameter)
                flat = torch.cat([p.grad.reshape(-1) for p in bucket])
                dist.all_reduce(flat)
                offset = 0
                for parameter in bucket:
                    count = parameter.grad.numel()
                    parameter.grad.copy_(flat[offset : offset + count].view_as(parameter.grad))
                    offset += count

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def _buckets(parameters: list[nn.Parameter]) -> Iterable[list[nn.Parameter]]:
    """Parameters grouped by dtype and device, each group cut at GRADIENT_BUCKET_ELEMENTS."""
    groups: dict[tuple[torch.dtype, torch.device], list[nn.Parameter]] = {}
    for parameter in parameters:
        groups.setdefault((parameter.dtype, parameter.device), []).append(parameter)
    for group in groups.values():
        bucket: list[nn.Parameter] = []
        size = 0
        for parameter in group:
            if bucket and size + parameter.numel() > GRADIENT_BUCKET_ELEMENTS:
                yield bucket
                bucket, size = [], 0
            bucket.append(parameter)
            size += parameter.numel()
        if bucket:
            yield bucket


_ACTIVE = Processes()


def active() -> Processes:
    """The processes of the run in progress (one process until `setup` joined a torchrun group)."""
    return _ACTIVE


def launched_world_size() -> int:
    """How many processes torchrun started (1 when this process was not started by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def torchrun_command(
    processes: int, *entry: str, log_dir: str | None = None, nodes: int = 1, node_rank: int = 0,
    endpoint: str = "", rendezvous_id: str = "", join_timeout_s: int = 600,
) -> list[str]:
    """torchrun starting `processes` local copies of `entry` (["-m", "trainer", "run", FILE], or a script and its
    arguments), with this Python: a rendezvous on a free local port, no restarts. With `log_dir`, each rank's
    stdout and stderr go to log_dir/<job>/attempt_0/<local_rank>/, beside the error file torchrun's `record`
    writes there, and torchrun's own output stays its summary.

    With `nodes` > 1, this node's part (node_rank) of a run on `nodes` x `processes` ranks: node 0 holds the
    rendezvous at `endpoint` (HOST:PORT, a TCP store the other nodes connect to) and waits join_timeout_s for
    them. The static rendezvous, since it keeps the node ranks given (c10d's orders nodes by address): node 0,
    the worker that claimed the run, holds rank 0, which reports."""
    if nodes == 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                   f"--nproc-per-node={processes}", "--max-restarts=0"]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", f"--node-rank={node_rank}",
                   "--rdzv-backend=static", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rendezvous_id}",
                   f"--rdzv-conf=timeout={join_timeout_s}", f"--nproc-per-node={processes}", "--max-restarts=0"]
    if log_dir is not None:
        command += [f"--log-dir={log_dir}", "--redirects=3"]
    return [*command, *entry]


def launched_rank() -> int:
    """This process's rank among those torchrun started (0 when it was not started by torchrun)."""
    return int(os.environ.get("RANK", "0"))


def setup(config: BaseConfig) -> Processes:
    """Join the torchrun process group (once) and check it against the config; one process: nothing to join."""
    global _ACTIVE
    world_size = launched_world_size()
    if world_size != config.num_processes:
        raise ConfigError(
            "num_processes",
            f"the run asks for {config.num_processes} process(es) but was started on {world_size}: start it with "
            f"torchrun --nproc-per-node {config.num_processes} (the worker does this itself)",
        )
    if world_size == 1:
        _ACTIVE = Processes(parallelism=config.parallelism)
        return _ACTIVE
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    check_devices(int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    _ACTIVE = Processes(
        rank=dist.get_rank(), world_size=world_size, local_rank=local_rank, parallelism=config.parallelism
    )
    return _ACTIVE


def check_devices(processes_here: int) -> None:
    """One process per GPU: a machine with GPUs needs as many as the run starts processes on it."""
    if torch.cuda.is_available() and torch.cuda.device_count() < processes_here:
        raise ConfigError(
            "num_processes",
            f"{processes_here} processes on this machine need one GPU each, and it has {torch.cuda.device_count()}",
        )


def teardown() -> None:
    """Leave the process group (at the end of a run, so torchrun sees every rank exit cleanly)."""
    global _ACTIVE
    if dist.is_initialized():
        dist.destroy_process_group()
    _ACTIVE = Processes()


class RankSink:
    """What every process reports through: rank 0 forwards to the real sink, the others report nothing; every
    process gets rank 0's should_stop and checkpoint_removed answers, so all ranks stop at the same step."""

    def __init__(self, sink: Sink, processes: Processes) -> None:
        self.sink = sink
        self.processes = processes

    def start(self, *, total_steps: int, start_step: int) -> None:
        if self.processes.is_main:
            self.sink.start(total_steps=total_steps, start_step=start_step)

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        if self.processes.is_main:
            self.sink.log(step, metrics, tokens_seen=tokens_seen)

    def sample(self, row: SampleRow) -> None:
        if self.processes.is_main:
            self.sink.sample(row)

    def should_stop(self) -> bool:
        return bool(self.processes.broadcast(self.sink.should_stop() if self.processes.is_main else None))

    def checkpoint(self, step: int, path: str) -> None:
        if self.processes.is_main:
            self.sink.checkpoint(step, path)

    def checkpoint_removed(self, step: int, path: str) -> bool:
        # only the main process deletes files; the others never ask
        return self.sink.checkpoint_removed(step, path) if self.processes.is_main else False


def rank_sink(sink: Sink) -> Sink:
    processes = active()
    return RankSink(sink, processes) if processes.distributed and not isinstance(sink, RankSink) else sink


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks FSDP shards one by one: the longest ModuleList in the model (a decoder's layers)."""
    lists = [module for module in model.modules() if isinstance(module, nn.ModuleList)]
    if not lists:
        raise ValueError(f"{type(model).__name__} has no list of layers to shard")
    return list(max(lists, key=len))


def shard_model(model: nn.Module) -> nn.Module:
    """fsdp: FSDP2 `fully_shard` on every decoder layer, then on the whole model (embeddings, final norm and head
    in the root's group); other parallelisms return the model as it is.

    Weights gather in their own dtype: under bf16-mixed the forward's autocast makes the bf16 copies, as it does
    on one process, so fsdp computes what ddp computes. Gradients are summed, not averaged, across processes
    (set_gradient_divide_factor(1)): every process's loss is already its share of the step's loss.
    """
    processes = active()
    if not processes.sharded:
        return model
    from torch.distributed.fsdp import fully_shard

    for layer in decoder_layers(model):
        fully_shard(layer)
    fully_shard(model)
    for module in model.modules():
        if is_sharded(module):
            module.set_gradient_divide_factor(1.0)
            # a plain sum: gloo has no pre-multiplied sum
            module.set_force_sum_reduction_for_comms(True)
    return model


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def holds_sharded(module: nn.Module) -> bool:
    """`module` or a module in it is sharded (PPO's policy and critic side by side, say)."""
    return any(is_sharded(each) for each in module.modules())


class gathered_weights:
    """Within it, every FSDP module of `model` holds its whole weights and keeps them across forwards: for
    generation, which runs many small forwards and reads weights outside module calls. A model that is not
    sharded is left alone."""

    def __init__(self, model: nn.Module) -> None:
        from torch.distributed.fsdp import FSDPModule

        self.modules = [module for module in model.modules() if isinstance(module, FSDPModule)]

    def __enter__(self) -> None:
        for module in self.modules:
            module.set_reshard_after_forward(False, recurse=False)
            module.unshard()

    def __exit__(self, *exc: object) -> None:
        for module in self.modules:
            module.reshard()
            module.set_reshard_after_forward(True, recurse=False)


# A sharded run's optimizer state: one file per process, written and resharded by torch.distributed.checkpoint.
OPTIMIZER_DIR = "optimizer"


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights of a sharded model, gathered on the main process's CPU (empty on the others)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_sharded_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, path: os.PathLike) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save(get_optimizer_state_dict(model, optimizer), checkpoint_id=os.fspath(path))


def load_sharded_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, path: os.PathLike) -> None:
    """Read an optimizer state saved by save_sharded_optimizer into `optimizer`, whatever the number of
    processes (or the parallelism) that saved it and this run's."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    state = get_optimizer_state_dict(model, optimizer)
    dcp.load(state, checkpoint_id=os.fspath(path))
    set_optimizer_state_dict(model, optimizer, state)


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    """Load a whole optimizer state_dict (torch's own, keyed by parameter position, as a one-process or ddp run
    saves it) into the optimizer of a sharded model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = dict(enumerate(name for name, parameter in model.named_parameters() if parameter.requires_grad))
    by_name = {
        "state": {names[index]: value for index, value in state["state"].items()},
        "param_groups": [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))
