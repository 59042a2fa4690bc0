"""Reattach after the heartbeat timeout (webapp.experiments.services.external): a run the reconcile failed for its
missing heartbeats still takes its rows; its living program's heartbeat reopens it and its finish ends it."""

import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from preflab_client import Client, runs

from tests.client.helpers import journal_counts, stored_metrics, wait_for
from tests.client.outage_proxy import OutageProxy
from tests.client.server_process import start_server
from tests.webapp.upload_server import free_port
from webapp.experiments import services
from webapp.experiments.models import MetricRow, Run

pytestmark = pytest.mark.django_db(transaction=True)


def fail_the_stale_runs() -> list[int]:
    """The reconcile, as it runs once the heartbeat timeout has passed."""
    return services.runs_fail_stale(now=timezone.now() + timedelta(seconds=settings.PREFLAB_HEARTBEAT_TIMEOUT_S + 5))


LOGGING_SCRIPT = """
import os, sys, time
from preflab_client import Client

client = Client(sys.argv[1], os.environ["PREFLAB_TOKEN"], outbox_dir=sys.argv[2])
run = client.init_run("killed while the server is down")
for step in range(1, 101):
    run.log({"loss": 1.0 / step}, step=step)
print(run.id, flush=True)
sys.stdin.readline()  # the test has stopped the server
for step in range(101, 301):
    run.log({"loss": 1.0 / step}, step=step)
print("logged", flush=True)
time.sleep(600)  # SIGKILLed by the test
"""


def test_a_process_killed_while_the_server_is_down_has_its_rows_delivered_after_the_run_was_failed(
        api_token, tmp_path):
    outbox_dir = tmp_path / "outbox"
    port = free_port()
    server = start_server(port, tmp_path / "server-before.log")
    process = subprocess.Popen(
        [sys.executable, "-c", LOGGING_SCRIPT, f"http://127.0.0.1:{port}", str(outbox_dir)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PREFLAB_TOKEN": api_token})
    try:
        run_id = int(process.stdout.readline())
        wait_for(lambda: MetricRow.objects.filter(run_id=run_id).count() == 100, what="steps 1-100 on the server")
        server.process.kill()
        server.process.wait()
        process.stdin.write("go\n")
        process.stdin.flush()
        assert process.stdout.readline() == "logged\n"
        # steps 101-300 go to the journal; so do 1-100 again when the server stored them but died before its answer
        # reached the client (the replay stores nothing twice: checked below)
        wait_for(lambda: set(journal_counts(outbox_dir)[0]) >= set(range(101, 301)), what="steps 101-300 in the journal")
        journaled = len(journal_counts(outbox_dir)[0])
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL

        server = start_server(port, tmp_path / "server-after.log")
        assert fail_the_stale_runs() == [run_id]
        failed = Run.objects.get(pk=run_id)
        assert failed.status == Run.Status.FAILED and failed.heartbeat_lost
        with Client(f"http://127.0.0.1:{port}", api_token, outbox_dir=outbox_dir) as preflab:
            assert preflab.replay_outbox() == journaled
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
        process.stderr.close()
        process.stdin.close()
        server.stop()

    assert stored_metrics(run_id) == {step: {"loss": 1.0 / step} for step in range(1, 301)}
    assert MetricRow.objects.filter(run_id=run_id).count() == 300
    run = Run.objects.get(pk=run_id)
    # no finish came from the killed program: the run stays failed for its missing heartbeats, with every row
    assert run.status == Run.Status.FAILED and run.error.startswith("the client stopped sending heartbeats")
    assert not list(outbox_dir.iterdir()), "nothing rejected, nothing left"


def test_a_program_alive_through_the_timeout_reopens_its_run_and_succeeds(live_server, api_token, outbox_dir,
                                                                          monkeypatch):
    monkeypatch.setattr(runs, "HEARTBEAT_SECONDS", 0.3)
    monkeypatch.setattr(runs, "RETRY_SECONDS", 0.3)
    with OutageProxy(live_server.url) as proxy, Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab:
        run = preflab.init_run("alive through the timeout")
        for step in range(1, 11):
            run.log({"loss": 1.0 / step}, step=step)
        wait_for(lambda: MetricRow.objects.filter(run_id=run.id).count() == 10, what="steps 1-10 on the server")
        proxy.down = True
        for step in range(11, 21):
            run.log({"loss": 1.0 / step}, step=step)
        wait_for(lambda: len(journal_counts(outbox_dir)[0]) == 10, what="steps 11-20 in the journal")
        assert fail_the_stale_runs() == [run.id]
        assert Run.objects.get(pk=run.id).status == Run.Status.FAILED

        proxy.down = False
        wait_for(lambda: Run.objects.get(pk=run.id).status == Run.Status.RUNNING, what="the run reopened")
        for step in range(21, 31):
            run.log({"loss": 1.0 / step}, step=step)
        answer = run.finish()

    assert answer["status"] == Run.Status.SUCCEEDED
    stored = Run.objects.get(pk=run.id)
    assert (stored.status, stored.error, stored.heartbeat_lost) == (Run.Status.SUCCEEDED, "", False)
    assert [alert["kind"] for alert in stored.alerts] == ["stale_heartbeat", "reopened"]
    assert stored_metrics(run.id) == {step: {"loss": 1.0 / step} for step in range(1, 31)}
    assert not run.should_stop
    assert not list(outbox_dir.iterdir())
