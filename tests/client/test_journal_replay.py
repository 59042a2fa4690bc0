"""A run's journal: while the server answers 503 every batch goes to disk, and is replayed in order when it answers
again; log() never raises; a process that crashes leaves its journal for a later client to send."""

import json
import logging
import math
import os
import subprocess
import sys
import time

import pytest
from preflab_client import Client

from tests.client.helpers import journal_counts, stored_metrics, wait_for
from tests.client.outage_proxy import OutageProxy
from webapp.experiments.models import MetricRow, Run, Sample

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_outage_is_journaled_then_replayed_in_order_and_log_never_raises(live_server, api_token, outbox_dir,
                                                                             caplog):
    caplog.set_level(logging.INFO, logger="preflab_client")
    with OutageProxy(live_server.url) as proxy, Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab:
        run = preflab.init_run("outage", config={"lr": 0.001}, total_steps=20)
        for step in range(1, 6):
            run.log({"loss": 1 / step}, step=step)
        wait_for(lambda: MetricRow.objects.filter(run_id=run.id).count() == 5, what="steps 1-5 on the server")

        proxy.down, proxy.stall_s = True, 2.0  # a server that hangs, then answers 503
        slowest_call = 0.0
        for step in range(6, 16):
            started = time.monotonic()
            run.log({"loss": 1 / step, "kl": math.nan if step == 8 else 0.01 * step}, step=step)
            run.log_samples([{"prompt": f"prompt {step}", "completion": f"answer {step}", "rewards": {"match": step},
                              "advantage": -0.5}], step=step)
            slowest_call = max(slowest_call, time.monotonic() - started)
            time.sleep(0.15)
        assert slowest_call < 0.1, "log() waits for nothing, not even a hanging server"
        # what a training loop might pass by mistake: warnings, never an exception
        run.log(None, step=16)
        run.log({"loss": 1.0}, step=-1)
        run.log({"loss": "high"}, step=16)
        run.log_samples(None, step=16)
        wait_for(lambda: journal_counts(outbox_dir) == (list(range(6, 16)), 10), what="steps 6-15 in the journal")
        assert not MetricRow.objects.filter(run_id=run.id, step__gt=5).exists()
        assert not Sample.objects.filter(run_id=run.id).exists()
        assert proxy.refused > 0

        proxy.down = False
        wait_for(lambda: MetricRow.objects.filter(run_id=run.id).count() == 15, what="the journal replayed")
        for step in range(16, 21):
            run.log({"loss": 1 / step}, step=step)
        answer = run.finish()

    assert answer["status"] == "succeeded"
    assert Run.objects.get(pk=run.id).status == Run.Status.SUCCEEDED
    rows = stored_metrics(run.id)
    assert list(rows) == list(range(1, 21))
    assert [rows[step]["loss"] for step in rows] == [1 / step for step in range(1, 21)]
    assert math.isnan(rows[8]["kl"]) and rows[9]["kl"] == 0.09
    samples = list(Sample.objects.filter(run_id=run.id).order_by("step"))
    assert [(sample.step, sample.completion, sample.rewards) for sample in samples] == [
        (step, f"answer {step}", {"match": float(step)}) for step in range(6, 16)]
    # the server received every row and sample once, in the order logged: the journal was replayed in order
    received_steps = [row["step"] for body in proxy.bodies("POST", "/log") for row in body["rows"]]
    assert received_steps == list(range(1, 21))
    assert [sample["step"] for body in proxy.bodies("POST", "/samples") for sample in body["samples"]] == list(
        range(6, 16))
    assert not list(outbox_dir.iterdir()), "a sent journal is removed with its directory"
    messages = [record.getMessage() for record in caplog.records]
    assert len([text for text in messages if "cannot be reached" in text]) == 1, messages
    assert any("replayed 10 metric rows and 10 samples of run" in text for text in messages), messages
    assert len([text for text in messages if "not a number" in text]) == 1


CRASHING_SCRIPT = """
import json, os, sys, time
from pathlib import Path
from preflab_client import Client

client = Client(sys.argv[1], os.environ["PREFLAB_TOKEN"], outbox_dir=sys.argv[2])
run = client.init_run("crashes", total_steps=5)
print(run.id, flush=True)
sys.stdin.readline()  # the test takes the server down
for step in range(1, 6):
    run.log({"loss": 1.0 / step}, step=step)
run.log_samples([{"prompt": "p", "completion": "c", "advantage": 0.25}], step=5)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    lines = [json.loads(line) for path in Path(sys.argv[2]).glob("*/journal.jsonl")
             for line in path.read_text().splitlines()]
    if sum(len(entry["body"].get("rows", ())) + len(entry["body"].get("samples", ())) for entry in lines) == 6:
        break
    time.sleep(0.1)
os._exit(3)  # a crash: no finish(), no atexit
"""


@pytest.mark.parametrize("sender", ["replay_outbox", "next init_run"])
def test_a_crashed_process_leaves_its_journal_and_a_later_client_sends_it(sender, live_server, api_token,
                                                                          outbox_dir):
    with OutageProxy(live_server.url) as proxy:
        process = subprocess.Popen(
            [sys.executable, "-c", CRASHING_SCRIPT, proxy.url, str(outbox_dir)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PREFLAB_TOKEN": api_token})
        run_id = int(process.stdout.readline())
        proxy.down = True
        process.stdin.write("go\n")
        process.stdin.flush()
        assert process.wait(timeout=60) == 3, process.stderr.read()
        process.stdout.close()
        process.stderr.close()
        assert journal_counts(outbox_dir) == ([1, 2, 3, 4, 5], 1)
        assert not MetricRow.objects.filter(run_id=run_id).exists()

        proxy.down = False
        with Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab:
            if sender == "replay_outbox":
                assert preflab.replay_outbox() == 6
            else:
                run = preflab.init_run("the next run")
                wait_for(lambda: MetricRow.objects.filter(run_id=run_id).count() == 5, what="the crashed run's rows")
                run.finish()

    assert stored_metrics(run_id) == {step: {"loss": 1.0 / step} for step in range(1, 6)}
    assert list(Sample.objects.filter(run_id=run_id).values_list("step", "completion", "advantage")) == [
        (5, "c", 0.25)]
    assert not list(outbox_dir.iterdir())


def test_what_finish_cannot_send_stays_on_disk_and_a_replay_finishes_the_run(live_server, api_token, outbox_dir,
                                                                              caplog):
    with OutageProxy(live_server.url) as proxy, Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab:
        run = preflab.init_run("finished offline")
        run.log({"loss": 0.5}, step=1)
        wait_for(lambda: MetricRow.objects.filter(run_id=run.id).exists(), what="step 1 on the server")
        proxy.down = True
        run.log({"loss": 0.25}, step=2)
        started = time.monotonic()
        assert run.finish(timeout=3) is None
        assert time.monotonic() - started < 15, "finish() waits for its timeout, not for the server"
        run.log({"loss": 0.1}, step=3)  # after finish: ignored with a warning, no exception
        (journal,) = outbox_dir.glob("*-run-*/journal.jsonl")
        assert [json.loads(line)["kind"] for line in journal.read_text().splitlines()] == ["log", "finish"]
        assert Run.objects.get(pk=run.id).status == Run.Status.RUNNING
        warning = next(record.getMessage() for record in caplog.records if "could not be sent" in record.getMessage())
        assert str(journal) in warning and "1 metric rows" in warning

        proxy.down = False
        assert preflab.replay_outbox() == 1
    assert Run.objects.get(pk=run.id).status == Run.Status.SUCCEEDED
    assert stored_metrics(run.id) == {1: {"loss": 0.5}, 2: {"loss": 0.25}}
    assert not list(outbox_dir.iterdir())
