"""What the processes of a run must agree on, checked in this one process: every process runs as many GRPO
micro-batches, a step's time is its slowest process's, a machine with too few GPUs is refused, and the CUDA RNG
states of a checkpoint restore on a machine with another number of GPUs (CUDA forced by monkeypatching: the logic
runs here, on the CPU, as it would on GPUs)."""

import itertools

import pytest
import torch

from trainer.algorithms.grpo import ProcessPart, micro_batch_rows
from trainer.algorithms.sft import train
from trainer.builtin_datasets import arithmetic
from trainer.config import ConfigError
from trainer.kinds import config_from_dict
from trainer.loop import cuda_rng_states, rng_state, set_rng_state
from trainer.modeling import distributed
from trainer.modeling.distributed import Processes
from trainer.sink import MemorySink

OTHER_PROCESS_SECONDS = 100.0


class OneOfTwo(Processes):
    """Rank `rank` of 2, the other process simulated: in every gather of metrics it adds nothing but is
    OTHER_PROCESS_SECONDS slower at each time/*; gathered tensors are its own GPU's RNG state (this one's + 1)."""

    def gather(self, value):
        if isinstance(value, dict):
            other = {name: v + OTHER_PROCESS_SECONDS if name.startswith("time/") else 0.0 for name, v in value.items()}
        else:
            other = value + 1
        return [value, other] if self.rank == 0 else [other, value]

    def broadcast(self, value):
        return value

    def barrier(self) -> None:
        pass

    def sum_gradients(self, parameters) -> None:
        pass


def test_every_process_runs_as_many_micro_batches_whatever_dynamic_sampling_kept():
    # processes, group size, micro-batches per process, and groups kept (from 1 to the batch's 8)
    cases = itertools.product([2, 3, 4], [1, 2, 3, 4], [1, 2], range(1, 9))
    for world_size, group_size, grad_accum_steps, groups in cases:
        count = groups * group_size
        chunks = micro_batch_rows(count, grad_accum_steps * world_size, group_size)
        shares = [(rows, rows.numel() / count) for rows in chunks]
        parts = [ProcessPart.of(shares, count, Processes(rank=rank, world_size=world_size))
                 for rank in range(world_size)]
        counts = [len(part.chunks) for part in parts]
        assert len(set(counts)) == 1, (world_size, group_size, grad_accum_steps, groups, counts)
        # what the processes train on with a weight is the step, each row once
        weighted_rows = sorted(int(part.rows[0]) + row for part in parts for rows, share, _ in part.chunks if share
                               for row in rows.tolist())
        assert weighted_rows == list(range(count))
        assert sum(share for part in parts for _, share, _ in part.chunks) == pytest.approx(1.0)
        assert sum(row_share for part in parts for _, _, row_share in part.chunks) == pytest.approx(1.0)


def test_a_steps_time_is_its_slowest_processs(tiny_model, tmp_path, monkeypatch):
    assert OneOfTwo(world_size=2).sum_metrics({"loss": 0.25, "time/step_s": 1.0}) == {
        "loss": 0.25, "time/step_s": 1.0 + OTHER_PROCESS_SECONDS,
    }
    # through the loop, where the step's times are taken after its metrics were summed
    monkeypatch.setattr(distributed, "active", lambda: OneOfTwo(world_size=2))
    sink = MemorySink()
    config = config_from_dict("sft", {"model": tiny_model, "output_dir": str(tmp_path), "max_steps": 2,
                                      "batch_size": 4, "max_length": 64, "max_prompt_length": 24,
                                      "checkpoint_every": 0, "sample_every": 0})
    train(config, arithmetic.sft_rows(1, "train", 8), sink)
    for step, metrics in sink.metrics.items():
        assert metrics["time/step_s"] > OTHER_PROCESS_SECONDS, step
        tokens = metrics["tokens_seen"] - sink.metrics.get(step - 1, {"tokens_seen": 0})["tokens_seen"]
        assert metrics["throughput/tokens_per_s"] == pytest.approx(tokens / metrics["time/step_s"])


def _gpus(monkeypatch, count: int) -> dict[int, torch.Tensor]:
    """Make torch see `count` GPUs whose RNG states are [index] tensors; returns the states set, by GPU."""
    restored: dict[int, torch.Tensor] = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [torch.tensor([i]) for i in range(count)])
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.tensor([device]))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.__setitem__(device, state))
    return restored


def test_a_machine_with_fewer_gpus_than_processes_is_refused_naming_the_field(tiny_model, monkeypatch):
    _gpus(monkeypatch, 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    config = config_from_dict("sft", {"model": tiny_model, "output_dir": "o", "num_processes": 2})
    with pytest.raises(ConfigError, match="^num_processes: 2 processes on this machine need one GPU each, and it has 1$"):
        distributed.setup(config)
    distributed.check_devices(1)


@pytest.mark.parametrize(
    ("saved_on", "gpus", "expected"),
    [(4, 2, {0: 0, 1: 1}), (1, 2, {0: 0}), (2, 2, {0: 0, 1: 1})],
    ids=["4-gpus-to-2", "1-gpu-to-2", "2-gpus-to-2"],
)
def test_one_process_restores_the_cuda_rng_of_the_gpus_it_has(monkeypatch, saved_on, gpus, expected):
    restored = _gpus(monkeypatch, gpus)
    set_rng_state(rng_state([torch.tensor([i]) for i in range(saved_on)]))
    assert {device: int(state) for device, state in restored.items()} == expected


@pytest.mark.parametrize(("saved_on", "expected"), [(2, {1: 1}), (4, {1: 1}), (1, {})])
def test_each_of_many_processes_restores_only_its_own_gpus_cuda_rng(monkeypatch, saved_on, expected):
    restored = _gpus(monkeypatch, 2)
    monkeypatch.setattr(distributed, "active", lambda: OneOfTwo(rank=1, world_size=2, local_rank=1))
    set_rng_state(rng_state([torch.tensor([i]) for i in range(saved_on)]))
    assert {device: int(state) for device, state in restored.items()} == expected


def test_a_checkpoint_of_many_processes_holds_each_processs_own_gpus_cuda_rng(monkeypatch):
    _gpus(monkeypatch, 2)
    assert [int(state) for state in cuda_rng_states()] == [0, 1]  # one process: every GPU it sees
    monkeypatch.setattr(distributed, "active", lambda: OneOfTwo(rank=0, world_size=2, local_rank=0))
    assert [int(state) for state in cuda_rng_states()] == [0, 1]  # rank 0's GPU 0, and rank 1's own GPU 1
