"""A run on several nodes (num_nodes), launched the way a Celery deployment runs it: the gpu worker that claims the
run is node 0 and asks other idle gpu workers, through join messages on the gpu queue, to start torchrun on its
rendezvous. Here two real worker processes on this machine are the two "nodes" (rendezvous on 127.0.0.1, gloo):
a 2-node x 1-process SFT run reproduces the 1-node 2-process run; a join that no worker takes fails the run
saying so; a SIGKILLed rank of the joined node fails the run naming that node and rank, and no rank or torchrun
is left on either node."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.trainer.test_distributed import FP32_TOLERANCE
from tests.webapp.experiments.helpers import ARITHMETIC, run_status, wait_for
from tests.workers.test_distributed_launch import FINISHED, alive
from webapp.experiments import services
from webapp.experiments.models import MetricRow, Run
from workers.torchrun import rank_pids

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 4
# each worker is a node; 127.0.0.1 is the address the other "node" reaches node 0 by
NODE = {"PREFLAB_NODE_ADDRESS": "127.0.0.1"}


def _sft(model_path: str, *, nodes: int, **overrides) -> dict:
    return {"model": model_path, "max_steps": STEPS, "batch_size": 4, "lr": 1e-3, "max_length": 64,
            "max_prompt_length": 24, "eval_max_new_tokens": 8, "checkpoint_every": 0, "num_processes": 2,
            "num_nodes": nodes, **overrides}


def _launch(researcher, model_path: str, *, nodes: int, **overrides) -> Run:
    return services.run_create(kind="sft", config=_sft(model_path, nodes=nodes, **overrides), data_source=ARITHMETIC,
                               created_by=researcher, name=f"sft on {nodes} node(s)")


def _two_workers(celery_worker_factory, **env: str) -> list:
    """Two gpu workers, the "nodes"; the second also listens on a queue of its own, so that its readiness is
    checked on it (a health ping on `gpu` could be answered by the first)."""
    return [celery_worker_factory(queues=("gpu",), **NODE, **env),
            celery_worker_factory(queues=("node-b", "gpu"), **NODE, **env)]


def _logs(workers: list) -> str:
    return "\n".join(f"--- worker {index} ---\n{worker.log_tail()}" for index, worker in enumerate(workers))


def _rows(run: Run) -> list[MetricRow]:
    return list(MetricRow.objects.filter(run=run).order_by("step"))


def _node_dirs(run: Run) -> dict[int, Path]:
    """Each node's launch directory (node 0 holds the rendezvous; torchrun/<time>-node<rank>-<random>)."""
    found = {}
    for directory in (Path(run.config["output_dir"]) / "torchrun").glob("*-node*-*"):
        rank = directory.name.split("-node", 1)[1].split("-", 1)[0]
        found[int(rank)] = directory
    return found


def _group(launch_dir: Path) -> list[int]:
    """This node's ranks (the pid files they wrote) and their torchrun (their parent)."""
    ranks = rank_pids(launch_dir)
    torchrun = int(Path(f"/proc/{ranks[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return [*ranks, torchrun]


def test_two_nodes_of_one_process_reproduce_two_processes_on_one_node(
    celery_worker_factory, tiny_model, researcher
):
    workers = _two_workers(celery_worker_factory)
    one_node = _launch(researcher, tiny_model.path, nodes=1)
    wait_for(lambda: run_status(one_node.pk) in FINISHED, timeout_s=180, what=lambda: f"1 node\n{_logs(workers)}")
    two_nodes = _launch(researcher, tiny_model.path, nodes=2)
    wait_for(lambda: run_status(two_nodes.pk) in FINISHED, timeout_s=180, what=lambda: f"2 nodes\n{_logs(workers)}")
    for run in (one_node, two_nodes):
        run.refresh_from_db()
        assert run.status == Run.Status.SUCCEEDED, run.error
    # the two nodes were the two workers, each starting one rank on the rendezvous node 0 held on 127.0.0.1
    rendezvous = two_nodes.rendezvous
    assert rendezvous["nodes"] == 2 and rendezvous["endpoint"].startswith("127.0.0.1:")
    assert set(rendezvous["joined"]) == {"0", "1"}
    assert {worker.process.pid for worker in workers} == {
        int(name.rsplit(" pid ", 1)[1]) for name in rendezvous["joined"].values()}
    assert sorted(_node_dirs(two_nodes)) == [0, 1]
    # rank 0 alone reports: one row per step, and the numbers are those of the same two ranks on one node
    expected, actual = _rows(one_node), _rows(two_nodes)
    assert [row.step for row in actual] == [row.step for row in expected] == list(range(1, STEPS + 1))
    for one, two in zip(expected, actual, strict=True):
        assert two.tokens_seen == one.tokens_seen
        for name in ("loss", "grad_norm"):
            assert two.metrics[name] == pytest.approx(one.metrics[name], rel=FP32_TOLERANCE, abs=FP32_TOLERANCE), (
                f"{name} at step {one.step}")
    for launch_dir in _node_dirs(two_nodes).values():
        wait_for(lambda launch_dir=launch_dir: not any(alive(pid) for pid in rank_pids(launch_dir)), timeout_s=30,
                 what=f"the ranks of {launch_dir} to exit")


def test_a_node_no_worker_joins_fails_the_run_with_the_reason(celery_worker_factory, tiny_model, researcher):
    # one worker: it claims the run as node 0, and no other takes the message asking for node 1
    worker = celery_worker_factory(queues=("gpu",), **NODE, PREFLAB_NODE_JOIN_TIMEOUT_S="5")
    run = _launch(researcher, tiny_model.path, nodes=2)
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=60, what=lambda: f"the run\n{worker.log_tail()}")
    run.refresh_from_db()
    print(f"--- the run's error ---\n{run.error}")
    assert run.status == Run.Status.FAILED
    assert run.error.startswith(f"node 0 ({run.rendezvous['joined']['0']}): only 1 of 2 nodes joined the rendezvous "
                                f"at {run.rendezvous['endpoint']} within 5 s (PREFLAB_NODE_JOIN_TIMEOUT_S): no free "
                                "gpu worker took the message asking node 1 to join"), run.error
    assert not rank_pids(_node_dirs(run)[0])  # no rank ever started
    # the worker, free again, takes the late message: it finds the run failed and starts nothing
    wait_for(lambda: "workers.tasks.run_node_join" in worker.log_path.read_text() and " succeeded in " in
             worker.log_path.read_text().split("workers.tasks.run_node_join", 1)[1], timeout_s=30,
             what=lambda: f"the late join message to be taken\n{worker.log_tail()}")
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and set(run.rendezvous["joined"]) == {"0"}
    assert sorted(_node_dirs(run)) == [0]


def test_a_cancel_while_node_0_waits_for_the_others_ends_the_wait(celery_worker_factory, tiny_model, researcher):
    worker = celery_worker_factory(queues=("gpu",), **NODE)  # the default join timeout: 600 s
    run = _launch(researcher, tiny_model.path, nodes=2)
    wait_for(lambda: Run.objects.get(pk=run.pk).rendezvous.get("endpoint"), timeout_s=60,
             what=lambda: f"node 0's rendezvous\n{worker.log_tail()}")
    services.run_cancel(run_id=run.pk)
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=15, what=lambda: f"the cancel\n{worker.log_tail()}")
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELED, run.error
    assert not rank_pids(_node_dirs(run)[0])


def test_a_sigkilled_rank_of_the_joined_node_fails_the_run_naming_it_and_leaves_no_process(
    celery_worker_factory, tiny_model, researcher
):
    workers = _two_workers(celery_worker_factory)
    run = _launch(researcher, tiny_model.path, nodes=2, max_steps=500)
    wait_for(lambda: Run.objects.get(pk=run.pk).current_step >= 1, timeout_s=180,
             what=lambda: f"a step\n{_logs(workers)}")
    dirs = _node_dirs(run)
    groups = {rank: _group(launch_dir) for rank, launch_dir in dirs.items()}
    rank_1 = groups[1][0]  # node 1's only rank, global rank 1
    os.kill(rank_1, signal.SIGKILL)
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=60, what=lambda: f"the failure\n{_logs(workers)}")
    run.refresh_from_db()
    print(f"--- the run's error ---\n{run.error}")
    assert run.status == Run.Status.FAILED
    joined = run.rendezvous["joined"]["1"]
    assert run.error.startswith(f"node 1 ({joined}): rank 1 was killed by signal 9 (SIGKILL)"), run.error
    assert "last lines of rank 1's stderr (" in run.error and str(dirs[1]) in run.error
    every_process = [pid for group in groups.values() for pid in group]
    wait_for(lambda: not any(alive(pid) for pid in every_process), timeout_s=30,
             what=lambda: f"ranks and torchruns {groups} of both nodes to exit\n{_logs(workers)}")
    assert all(worker.process.poll() is None for worker in workers)  # both workers live on, ready for more


def test_each_node_starts_its_part_of_one_static_rendezvous_that_node_0_holds():
    from trainer.kinds import config_from_dict
    from trainer.modeling.distributed import torchrun_command

    config = config_from_dict("sft", {"model": "m", "output_dir": "o", "num_processes": 8, "num_nodes": 2})
    assert config.processes_per_node == 4
    command = torchrun_command(config.processes_per_node, "-m", "workers.rank", "7", log_dir="/tmp/x", nodes=2,
                               node_rank=1, endpoint="10.0.0.5:29400", rendezvous_id="abc", join_timeout_s=5)
    assert "--standalone" not in command and command[-3:] == ["-m", "workers.rank", "7"]
    # the static rendezvous keeps the node ranks given: node 0, the worker that claimed the run, holds rank 0
    assert {"--nnodes=2", "--node-rank=1", "--nproc-per-node=4", "--rdzv-backend=static",
            "--rdzv-endpoint=10.0.0.5:29400", "--rdzv-id=abc", "--rdzv-conf=timeout=5"} <= set(command)
