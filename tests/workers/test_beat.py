"""Celery beat, embedded in the default worker (-B), schedules the reconcile of jobs: a beat never outlives its
worker (a SIGKILLed worker takes its beat along), and however many beats tick, the reconcile acts once per period.

An act is counted by what it writes: the reconcile's claim row (PeriodicJobClaim.acts); a tick, by the worker's
log line for each reconcile task it ran."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import F

from tests.conftest import REPO_ROOT
from tests.webapp.experiments.helpers import wait_for
from webapp.experiments.models import PeriodicJobClaim
from webapp.experiments.services import periodic_job_claim
from webapp.jobs import RECONCILE_JOB

PERIOD_S = 1.0
COUNTED_PERIODS = 8


def _acts() -> int:
    claim = PeriodicJobClaim.objects.filter(name=RECONCILE_JOB).first()
    return claim.acts if claim else 0


def _ticks(*logs: Path) -> int:
    """Reconcile tasks the workers ran (each beat tick is one), acting or not."""
    return sum(line.count("webapp.experiments.tasks.reconcile_jobs[") and "succeeded in" in line
               for log in logs for line in log.read_text(errors="replace").splitlines())


def _children(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _stat(int(entry.name)) and int(_stat(int(entry.name))[1]) == pid:
            children.append(int(entry.name))
    return children


def _stat(pid: int) -> list[str]:
    """(state, ppid, ...) from /proc/<pid>/stat; empty once the process is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def _running(pid: int) -> bool:
    stat = _stat(pid)
    return bool(stat) and stat[0] != "Z"  # a zombie has ended, only its parent has not collected it


def _count_over_periods(logs: list[Path]) -> tuple[int, int]:
    """(acts, ticks) over COUNTED_PERIODS periods."""
    acts, ticks = _acts(), _ticks(*logs)
    time.sleep(COUNTED_PERIODS * PERIOD_S)
    return _acts() - acts, _ticks(*logs) - ticks


@pytest.mark.django_db(transaction=True)
def test_a_sigkilled_default_worker_takes_its_beat_along_and_after_a_restart_the_reconcile_acts_once_per_period(
    celery_worker_factory,
):
    env = {"PREFLAB_RECONCILE_EVERY_S": str(PERIOD_S)}
    first = celery_worker_factory(queues=("default",), beat=True, **env)
    wait_for(lambda: _acts() >= 2, timeout_s=30, what=lambda: f"the first beat's reconciles\n{first.log_tail()}")
    beats = _children(first.process.pid)
    assert beats, "the worker started with -B has its beat as a child process"

    first.process.send_signal(signal.SIGKILL)
    first.process.wait()
    wait_for(lambda: not any(_running(pid) for pid in beats), timeout_s=10,
             what=lambda: f"the beat {beats} to end with its worker: {[_stat(pid)[:2] for pid in beats]}")

    second = celery_worker_factory(queues=("default",), beat=True, **env)
    acted_before = _acts()
    wait_for(lambda: _acts() > acted_before, timeout_s=30, what="the restarted worker's beat to reconcile")
    acts, ticks = _count_over_periods([second.log_path])
    print(f"after SIGKILL and restart: {acts} reconciles and {ticks} ticks in {COUNTED_PERIODS} periods of "
          f"{PERIOD_S:.0f} s; the killed worker's beat (pid {', '.join(map(str, beats))}) ended with it")
    assert COUNTED_PERIODS - 2 <= acts <= COUNTED_PERIODS + 1, (acts, second.log_tail())
    assert ticks <= COUNTED_PERIODS + 1, f"{ticks} ticks: a second beat is ticking"


@pytest.mark.django_db(transaction=True)
def test_two_beats_ticking_at_once_reconcile_once_per_period(celery_worker_factory):
    env = {"PREFLAB_RECONCILE_EVERY_S": str(PERIOD_S)}
    workers = [celery_worker_factory(queues=("default",), beat=True, **env) for _ in range(2)]
    wait_for(lambda: _acts() >= 2, timeout_s=30, what="the beats' reconciles")
    acts, ticks = _count_over_periods([worker.log_path for worker in workers])
    print(f"two beats: {ticks} ticks, {acts} reconciles in {COUNTED_PERIODS} periods of {PERIOD_S:.0f} s")
    assert ticks >= COUNTED_PERIODS + 3, f"only {ticks} ticks: the two beats did not both tick"
    assert COUNTED_PERIODS - 2 <= acts <= COUNTED_PERIODS + 1, acts


@pytest.mark.django_db
def test_a_tick_within_three_quarters_of_a_period_of_the_last_act_does_nothing():
    assert periodic_job_claim(name="job", every_s=60) is True
    assert periodic_job_claim(name="job", every_s=60) is False
    PeriodicJobClaim.objects.filter(name="job").update(acted_at=F("acted_at") - timedelta(seconds=44))
    assert periodic_job_claim(name="job", every_s=60) is False  # 44 s ago: within 3/4 of 60 s
    PeriodicJobClaim.objects.filter(name="job").update(acted_at=F("acted_at") - timedelta(seconds=2))
    assert periodic_job_claim(name="job", every_s=60) is True
    assert PeriodicJobClaim.objects.get(name="job").acts == 2


@pytest.mark.django_db(transaction=True)
def test_of_many_ticks_at_the_same_moment_on_postgres_one_acts():
    tickers = 8
    barrier = threading.Barrier(tickers)
    outcomes: list[bool] = []

    def tick() -> None:
        try:
            barrier.wait()
            outcomes.append(periodic_job_claim(name=RECONCILE_JOB, every_s=60))
        finally:
            connection.close()

    threads = [threading.Thread(target=tick) for _ in range(tickers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [False] * (tickers - 1) + [True]


SQLITE_TICK = """
import sys, time
import django
django.setup()
from webapp.experiments.services import periodic_job_claim
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
print(periodic_job_claim(name="reconcile-jobs", every_s=60))
"""


def test_of_many_ticks_at_the_same_moment_on_the_embedded_sqlite_one_acts(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update(PREFLAB_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="webapp.settings")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO_ROOT, env=env,
                   check=True, timeout=120)
    at = time.time() + 4
    tickers = [subprocess.Popen([sys.executable, "-c", SQLITE_TICK, str(at)], cwd=REPO_ROOT, env=env,
                                stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outcomes = [ticker.communicate(timeout=60)[0].strip() for ticker in tickers]
    assert sorted(outcomes) == ["False", "False", "False", "True"], outcomes
