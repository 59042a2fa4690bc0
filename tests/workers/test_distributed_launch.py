"""A run on many processes, launched by the gpu worker with torchrun (issue 18, part 4).

First what the launcher makes of torchrun's own failures, on a two-rank gloo script whose rank 1 raises, is
SIGKILLed or exits (no database, no model: what torchrun 2.13 really prints and writes); then real two-process
runs of the tiny model on a real worker: GRPO launched through the web form (ddp and fsdp) succeeds with one
metric row per step; a cancel stops both ranks within one step; a SIGKILLed rank 1 fails the run naming it; an
error of rank 0 is recorded as a single-process run records it; a killed worker takes torchrun and the ranks
with it. Each leaves no rank or torchrun process behind (checked in /proc)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.webapp.experiments.helpers import (
    ARITHMETIC,
    as_the_browser_posts,
    run_status,
    small_config,
    wait_for,
)
from webapp.experiments import services
from webapp.experiments.models import MetricRow, ModelRef, Run
from workers.torchrun import (
    RankFailure,
    failed_rank,
    rank_pids,
    ranks_left_behind,
    summary_failures,
    torchrun_failure_text,
    torchrun_watch,
)

FINISHED = (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELED)

# Two gloo ranks that step in lockstep (a collective per step, as training does) until rank 1 fails as told.
TWO_RANKS = """
    import os, signal, sys, time
    import torch, torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record
    from workers.rank import write_pid_file

    @record
    def main():
        write_pid_file()
        dist.init_process_group("gloo")
        rank, how = dist.get_rank(), sys.argv[1]
        for step in range(40):
            if rank == 1 and step == 3:
                print("rank 1 at step 3", file=sys.stderr, flush=True)
                if how == "raise":
                    raise ValueError("rank 1 cannot read its share")
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if how == "exit":
                    sys.exit(3)
            dist.all_reduce(torch.ones(4))
            time.sleep(0.05)
        dist.destroy_process_group()

    if __name__ == "__main__":
        main()
"""


def _two_ranks_failing(tmp_path: Path, how: str) -> tuple[int, Path, int]:
    """(torchrun's exit code, the launch directory, heartbeats) of TWO_RANKS whose rank 1 fails `how`."""
    script = tmp_path / "two_ranks.py"
    script.write_text(textwrap.dedent(TWO_RANKS))
    launch_dir = tmp_path / "launch"
    launch_dir.mkdir()
    beats = []
    exit_code = torchrun_watch(processes=2, launch_dir=launch_dir, entry=[str(script), how],
                               beat=lambda: beats.append(time.time()), name="two ranks")
    return exit_code, launch_dir, len(beats)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(("how", "headline"), [
    ("raise", "rank 1 failed: ValueError: rank 1 cannot read its share"),
    ("kill", "rank 1 was killed by signal 9 (SIGKILL)"),
    ("exit", "rank 1 exited with code 3"),
])
def test_a_failed_rank_is_named_with_why_and_the_tail_of_its_log(tmp_path, how, headline):
    exit_code, launch_dir, _ = _two_ranks_failing(tmp_path, how)
    print(f"--- torchrun.log ({how}) ---\n" + (launch_dir / "torchrun.log").read_text())
    assert exit_code == 1
    text = torchrun_failure_text(launch_dir, exit_code=exit_code)
    print(f"--- the run's error ({how}) ---\n{text}")
    if how == "kill" and not summary_failures((launch_dir / "torchrun.log").read_text()):
        # torch's own race (one CI run in several): torchrun crashed reading the error file rank 0 was writing as
        # torchrun stopped it, so no exit status was printed; the rank to blame is still named
        headline = TORCHRUN_CRASHED_KILL_HEADLINE
    assert text.splitlines()[0] == headline
    assert "last lines of rank 1's stderr (" in text and "rank 1 at step 3" in text
    if how == "raise":
        assert "Traceback" in text and "ValueError: rank 1 cannot read its share" in text.split("\n\n", 1)[1]
    # rank 0 saw its peer vanish and was stopped by torchrun: both ranks are gone
    pids = rank_pids(launch_dir)
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)


TORCHRUN_CRASHED_KILL_HEADLINE = ("rank 1 ended without reporting an error, and torchrun did not stop it (killed by "
                                  "a signal, or it exited); torchrun failed before saying how")


def test_when_torchrun_crashes_before_its_summary_the_rank_it_did_not_stop_is_blamed(tmp_path):
    """What torch 2.13's torchrun left once here: rank 1 SIGKILLed, rank 0 stopped by torchrun while writing its
    error file, torchrun crashed on the empty file (JSONDecodeError) before printing which rank failed and how."""
    attempt = tmp_path / "3518c7da_cgxoc77g" / "attempt_0"
    for local_rank, pid in ((0, 21839), (1, 21840)):
        (attempt / str(local_rank)).mkdir(parents=True)
        (attempt / str(local_rank) / "pid").write_text(str(pid))
    (attempt / "0" / "error.json").write_text("")
    (attempt / "1" / "stderr.log").write_text("rank 1 at step 3\n")
    (tmp_path / "torchrun.log").write_text(
        "W1202 03:31:53.196000 21833 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 21839 "
        "closing signal SIGTERM\nTraceback (most recent call last):\n  ...\n"
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n")
    text = torchrun_failure_text(tmp_path, exit_code=1)
    assert text.splitlines()[0] == TORCHRUN_CRASHED_KILL_HEADLINE
    assert "last lines of rank 1's stderr (" in text and "rank 1 at step 3" in text
    # without torchrun's word that it stopped rank 0, no pid-only rank is blamed: as before, torchrun's log
    (tmp_path / "torchrun.log").write_text("Traceback (most recent call last):\n")
    assert torchrun_failure_text(tmp_path, exit_code=1).startswith("rank 0 failed")


def test_the_rank_to_blame_is_the_cause_not_a_rank_that_only_lost_its_peer(tmp_path):
    error_file = tmp_path / "error.json"
    error_file.write_text('{"message": {"message": "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection '
                          'closed by peer [127.0.0.1]:5010", "extraInfo": {"py_callstack": "", "timestamp": "1"}}}')
    peer_lost = RankFailure(rank=0, local_rank=0, exit_code=1, error_file=error_file, root_cause=True)
    killed = RankFailure(rank=1, local_rank=1, exit_code=-9, error_file=None)
    stopped_by_torchrun = RankFailure(rank=2, local_rank=2, exit_code=-15, error_file=None)
    assert failed_rank([peer_lost, stopped_by_torchrun, killed]) is killed
    assert failed_rank([stopped_by_torchrun, peer_lost]) is peer_lost  # no better culprit: torchrun's root cause
    assert failed_rank([]) is None


def test_the_watch_beats_while_torchrun_lives(tmp_path):
    exit_code, _, beats = _two_ranks_failing(tmp_path, "none")
    assert exit_code == 0
    assert beats >= 1  # 40 steps of 50 ms on two ranks: a couple of seconds


def test_a_rank_that_outlived_torchrun_is_killed_and_a_recycled_pid_is_not(tmp_path):
    entry = ["-m", "workers.rank", "999"]
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *entry])
    # until the child has exec'd, /proc shows the forked test process's command line
    wait_for(lambda: Path(f"/proc/{orphan.pid}/cmdline").read_bytes().endswith(b"999\0"), timeout_s=10,
             what="the orphan to start")
    for local_rank, pid in ((0, orphan.pid), (1, os.getpid())):  # rank 1's pid now belongs to someone else
        directory = tmp_path / "job" / "attempt_0" / str(local_rank)
        directory.mkdir(parents=True)
        (directory / "pid").write_text(str(pid))
    assert ranks_left_behind(tmp_path, entry=entry) == [orphan.pid]
    assert orphan.wait(timeout=10) == -signal.SIGKILL


# --- real runs on a real worker --------------------------------------------------------------------------------

STEPS = 4


def _launch_from_the_form(client, model_path: str, **values: str) -> Run:
    """The GRPO launch form as a researcher fills it: the tiny model, two processes, a few small steps; every
    other field as the form offers it."""
    form = client.get("/runs/new?kind=grpo").context["form"]
    small = {"name": "two processes", "model": model_path, "lr": "1e-4", "max_steps": str(STEPS), "batch_size": "4",
             "group_size": "2", "max_new_tokens": "8", "max_length": "48", "max_prompt_length": "",
             "overlong_buffer": "", "checkpoint_every": "0", "num_processes": "2", "parallelism": "ddp"}
    response = client.post("/runs/new?kind=grpo", {**as_the_browser_posts(form), **small, **values})
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    return Run.objects.get(pk=int(response["Location"].strip("/").split("/")[-1]))


def launch_dirs(run: Run) -> list[Path]:
    return sorted((Path(run.config["output_dir"]) / "torchrun").glob("*"))


def group_pids(run: Run) -> list[int]:
    """The ranks' pids (the pid files they wrote) and torchrun's (their parent), once every rank wrote one."""
    (launch_dir,) = launch_dirs(run)
    ranks = rank_pids(launch_dir)
    parent = int(Path(f"/proc/{ranks[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return [*ranks, parent]


def _ranks_started(run: Run) -> bool:
    dirs = launch_dirs(run)
    return len(dirs) == 1 and len(rank_pids(dirs[0])) == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("parallelism", [pytest.param("ddp", marks=pytest.mark.slow), "fsdp"])
def test_a_two_process_grpo_run_launched_from_the_form_succeeds_with_one_series_and_its_checkpoints(
    celery_worker_factory, tiny_model, researcher_client, parallelism
):
    worker = celery_worker_factory(queues=("gpu",))
    run = _launch_from_the_form(researcher_client, tiny_model.path, parallelism=parallelism, checkpoint_every="2")
    assert (run.config["num_processes"], run.config["parallelism"]) == (2, parallelism)
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=300, what=lambda: f"the run\n{worker.log_tail()}")
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    # rank 0 alone reports: one row per step, so the charts draw one series
    assert list(MetricRow.objects.filter(run=run).order_by("step").values_list("step", flat=True)) == list(
        range(1, STEPS + 1))
    assert run.current_step == run.total_steps == STEPS
    # ... and registers each checkpoint once, as an ordinary save_pretrained directory (fsdp: gathered first)
    checkpoints = ModelRef.objects.filter(run=run, source=ModelRef.Source.CHECKPOINT).order_by("step")
    assert [checkpoint.step for checkpoint in checkpoints] == [2, 4]
    assert (Path(checkpoints.last().path) / "config.json").is_file()
    (launch_dir,) = launch_dirs(run)
    ranks = rank_pids(launch_dir)
    assert len(ranks) == 2
    # rank 0 records the end, then the ranks leave the process group and exit
    wait_for(lambda: not any(alive(pid) for pid in ranks), timeout_s=30, what=f"ranks {ranks} to exit")


@pytest.mark.django_db(transaction=True)
def test_a_cancel_stops_both_ranks_within_one_step(celery_worker_factory, tiny_model, researcher_client):
    worker = celery_worker_factory(queues=("gpu",))
    run = _launch_from_the_form(researcher_client, tiny_model.path, max_steps="500")
    wait_for(lambda: Run.objects.get(pk=run.pk).current_step >= 2, timeout_s=240,
             what=lambda: f"two steps\n{worker.log_tail()}")
    group = group_pids(run)
    services.run_cancel(run_id=run.pk)
    canceled_at = time.time()
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=60, what=lambda: f"the cancel\n{worker.log_tail()}")
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELED, run.error
    assert not run.error
    assert MetricRow.objects.filter(run=run, wall_time__gt=canceled_at).count() <= 1
    wait_for(lambda: not any(alive(pid) for pid in group), timeout_s=30, what=f"ranks and torchrun {group} to exit")
    # ... each by itself: a rank that raised leaves an error file and a traceback in its log; torchrun prints a
    # failure summary when any rank exits with a code other than 0 (exiting 0 itself only when none did); and the
    # worker logs any rank or torchrun it had to kill
    (launch_dir,) = launch_dirs(run)
    assert not list(launch_dir.glob("*/attempt_*/*/error.json"))
    for local_rank in (0, 1):
        (stderr,) = launch_dir.glob(f"*/attempt_*/{local_rank}/stderr.log")
        assert "Traceback" not in stderr.read_text(), f"rank {local_rank}:\n{stderr.read_text()[-3000:]}"
    torchrun_log = (launch_dir / "torchrun.log").read_text()
    assert not summary_failures(torchrun_log) and "Traceback" not in torchrun_log, torchrun_log
    assert "killed" not in worker.log_path.read_text(), worker.log_tail()


@pytest.mark.django_db(transaction=True)
def test_a_sigkilled_rank_fails_the_run_naming_it_and_leaves_no_process(
    celery_worker_factory, tiny_model, researcher_client
):
    worker = celery_worker_factory(queues=("gpu",))
    run = _launch_from_the_form(researcher_client, tiny_model.path, max_steps="500")
    wait_for(lambda: Run.objects.get(pk=run.pk).current_step >= 1, timeout_s=240,
             what=lambda: f"a step\n{worker.log_tail()}")
    assert _ranks_started(run)
    group = group_pids(run)
    rank_1 = group[1]
    os.kill(rank_1, signal.SIGKILL)
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=60, what=lambda: f"the failure\n{worker.log_tail()}")
    run.refresh_from_db()
    print(f"--- the run's error ---\n{run.error}")
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("rank 1 was killed by signal 9 (SIGKILL)"), run.error
    assert "last lines of rank 1's stderr (" in run.error
    wait_for(lambda: not any(alive(pid) for pid in group), timeout_s=30, what=f"ranks and torchrun {group} to exit")
    assert worker.process.poll() is None  # the worker itself lives on, ready for the next run


@pytest.mark.django_db(transaction=True)
def test_an_error_of_rank_0_is_recorded_by_rank_0_as_a_single_process_run_records_it(
    celery_worker_factory, tiny_model, researcher
):
    worker = celery_worker_factory(queues=("gpu",))
    run = services.run_create(kind="reward_model", config=small_config(tiny_model, num_processes=2,
                                                                      debug_nan_at_step=2, checkpoint_every=0),
                              data_source=ARITHMETIC, created_by=researcher, name="diverges on two processes")
    wait_for(lambda: run_status(run.pk) in FINISHED, timeout_s=120, what=lambda: f"the run\n{worker.log_tail()}")
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    # the message of workers.training.run_execute: "Type: message", then the traceback's tail
    assert run.error.startswith("TrainingDiverged: loss is NaN at step 2"), run.error
    assert "Traceback" in run.error
    (launch_dir,) = launch_dirs(run)
    wait_for(lambda: not any(alive(pid) for pid in rank_pids(launch_dir)), timeout_s=30, what="the ranks to exit")


@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_takes_torchrun_and_every_rank_with_it(celery_worker_factory, tiny_model, researcher_client):
    worker = celery_worker_factory(queues=("gpu",))
    run = _launch_from_the_form(researcher_client, tiny_model.path, max_steps="500")
    wait_for(lambda: Run.objects.get(pk=run.pk).current_step >= 1, timeout_s=240,
             what=lambda: f"a step\n{worker.log_tail()}")
    group = group_pids(run)
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait()
    wait_for(lambda: not any(alive(pid) for pid in group), timeout_s=10,
             what=f"torchrun and the ranks {group} to die with their worker")


def test_torchrun_runs_the_ranks_with_this_python():
    from trainer.modeling.distributed import torchrun_command

    command = torchrun_command(2, "-m", "workers.rank", "7", log_dir="/tmp/x")
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert command[-3:] == ["-m", "workers.rank", "7"] and "--standalone" in command
