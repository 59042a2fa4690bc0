"""Offline mode: a run logged with mode="offline" (PREFLAB_MODE=offline) contacts no server and is written to a
directory; `Client.sync_offline` and `preflab sync` create it on the server and deliver everything exactly once,
however often they are run."""

import os
import subprocess
import sys

import pytest
from preflab_client import Client

from tests.client.helpers import stored_metrics
from tests.webapp.upload_server import free_port
from webapp.experiments.models import MetricRow, Run, Sample

pytestmark = pytest.mark.django_db(transaction=True)


def log_offline(outbox_dir, monkeypatch, name: str) -> Client:
    """A run logged against a port nothing listens on: any request would fail."""
    monkeypatch.setenv("PREFLAB_MODE", "offline")
    with (Client(f"http://127.0.0.1:{free_port()}", "pfl_" + "x" * 40, outbox_dir=outbox_dir) as nowhere,
          nowhere.init_run(name, config={"lr": 0.01}, total_steps=2_500, tags=["plane"], group="g") as run):
        for step in range(1, 2_501):
            run.log({"loss": 1 / step, "reward/mean": step / 10}, step=step)
        run.log({"eval/loss": 0.5}, step=2_500)
        run.log_samples([{"prompt": "2+2", "completion": "4", "rewards": {"match": 1.0}}], step=2_500)
        run.summary["final_loss"] = 1 / 2_500
        run.config.update({"batch": 8})
        run.tags += ("landed",)
    monkeypatch.delenv("PREFLAB_MODE")
    return run


def test_an_offline_run_is_synced_once_with_every_row(preflab, outbox_dir, monkeypatch):
    run = log_offline(outbox_dir, monkeypatch, "offline")
    assert run.directory.parent == outbox_dir / "offline" and run.id is None
    assert not Run.objects.exists()

    (synced,) = preflab.sync_offline()
    assert (synced.rows, synced.samples, synced.already) == (2_500, 1, False)
    stored = Run.objects.get(pk=synced.run_id)
    assert (stored.name, stored.config, stored.status, stored.total_steps) == (
        "offline", {"lr": 0.01, "batch": 8}, Run.Status.SUCCEEDED, 2_500)
    assert (stored.summary, stored.tags, stored.group) == ({"final_loss": 1 / 2_500}, ["plane", "landed"], "g")
    rows = stored_metrics(stored.pk)
    assert list(rows) == list(range(1, 2_501))
    assert rows[2_500] == {"loss": 1 / 2_500, "reward/mean": 250.0, "eval/loss": 0.5}
    assert list(Sample.objects.filter(run=stored).values_list("step", "completion")) == [(2_500, "4")]

    (again,) = preflab.sync_offline(run.directory)
    assert (again.run_id, again.already, str(again)) == (synced.run_id, True, f"already synced: run {synced.run_id}")
    assert Run.objects.count() == 1 and MetricRow.objects.count() == 2_500 and Sample.objects.count() == 1


def test_preflab_sync_on_the_command_line(live_server, api_token, outbox_dir, monkeypatch):
    run = log_offline(outbox_dir, monkeypatch, "from the command line")
    environment = {**os.environ, "PREFLAB_URL": live_server.url, "PREFLAB_TOKEN": api_token}

    def sync() -> str:
        completed = subprocess.run([sys.executable, "-m", "preflab_client.cli", "sync", str(run.directory)],
                                   env=environment, capture_output=True, text=True, timeout=120)
        assert completed.returncode == 0, completed.stderr
        return completed.stdout.strip()

    assert not Run.objects.exists()
    assert sync().startswith("synced to run ")
    run_id = Run.objects.get().pk
    assert sync() == f"already synced: run {run_id}"
    assert MetricRow.objects.filter(run_id=run_id).count() == 2_500
    assert Run.objects.get().status == Run.Status.SUCCEEDED
