"""Every request the client builds stays within the server's bounds of a request (rows, samples, bytes): live,
journaled, and an older client's oversized journal entry on replay; a 413 is answered by smaller requests, never
taken as final. A run whose rows the server refused ends failed, saying how many and where they are."""

import json
import logging

import pytest
from preflab_client import Client, outbox
from preflab_client.outbox import REQUEST_ROWS_MAX, REQUEST_SAMPLES_MAX, RunOutbox, entry_pieces

from tests.client.helpers import stored_metrics
from tests.client.outage_proxy import OutageProxy
from webapp.experiments.models import MetricRow, Run, Sample


def rows_of(steps: range, metrics: int = 1) -> list[dict]:
    return [{"step": step, "metrics": {f"metric/{index}": step + index / 10 for index in range(metrics)}}
            for step in steps]


def test_an_entry_becomes_pieces_within_the_bounds_in_order_with_stable_batch_ids():
    log = {"kind": "log", "body": {"rows": rows_of(range(1, 12_346))}}
    pieces = entry_pieces(log)
    assert [len(piece["body"]["rows"]) for piece in pieces] == [REQUEST_ROWS_MAX] * 6 + [345]
    assert [row["step"] for piece in pieces for row in piece["body"]["rows"]] == list(range(1, 12_346))

    samples = {"kind": "samples", "body": {"batch_id": "b-1", "samples": [
        {"step": 1, "prompt": "p", "completion": str(number)} for number in range(1_100)]}}
    pieces = entry_pieces(samples)
    assert [len(piece["body"]["samples"]) for piece in pieces] == [REQUEST_SAMPLES_MAX] * 2 + [100]
    assert [piece["body"]["batch_id"] for piece in pieces] == ["b-1.0", "b-1.1", "b-1.2"]
    assert entry_pieces(samples) == pieces, "the same entry sent again makes the same pieces (written once)"
    assert entry_pieces({"kind": "finish", "body": {"status": "succeeded"}}) == [
        {"kind": "finish", "body": {"status": "succeeded"}}]
    assert entry_pieces(log, max_items=20_000) == [log]


@pytest.mark.django_db(transaction=True)
def test_an_older_clients_oversized_journal_entry_is_split_on_replay_by_rows_and_bytes(
        live_server, api_token, outbox_dir, monkeypatch):
    monkeypatch.setattr(outbox, "REQUEST_BYTES_MAX", 100_000)  # small, so that bytes split before the row bound
    with OutageProxy(live_server.url) as proxy, Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab:
        run_id = preflab.post("runs/external", {"name": "older journal"})["id"]
        journal = RunOutbox(outbox_dir, server_url=proxy.url, run_id=run_id)
        # what the older client journaled: one request of 12,000 rows (the server takes 10,000) and 1,100 samples
        journal.append([
            {"kind": "log", "body": {"rows": rows_of(range(1, 12_001), metrics=3)}},
            {"kind": "samples", "body": {"batch_id": "old", "samples": [
                {"step": 7, "prompt": "p" * 300, "completion": f"answer {number}"} for number in range(1_100)]}},
            {"kind": "finish", "body": {"status": "succeeded"}},
        ])
        journal.release()
        assert preflab.replay_outbox() == 13_100
        assert preflab.replay_outbox() == 0

    assert all(status < 300 for *_, status in proxy.answers), "no request was refused"
    assert max(size for *_, size, _ in proxy.answers) <= 100_000
    logs = proxy.bodies("POST", "/log")
    assert len(logs) > 12_000 // REQUEST_ROWS_MAX, "split by bytes as well as by rows"
    assert max(len(body["rows"]) for body in logs) <= REQUEST_ROWS_MAX
    assert [row["step"] for body in logs for row in body["rows"]] == list(range(1, 12_001))
    assert MetricRow.objects.filter(run_id=run_id).count() == 12_000
    assert Sample.objects.filter(run_id=run_id).count() == 1_100
    assert Run.objects.get(pk=run_id).status == Run.Status.SUCCEEDED
    assert not list(outbox_dir.iterdir())


@pytest.mark.django_db(transaction=True)
def test_a_413_is_not_final_the_request_is_halved_until_the_server_takes_it(live_server, api_token, outbox_dir,
                                                                            settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 60_000  # a server (or a proxy before it) that takes less than we think
    with (OutageProxy(live_server.url) as proxy, Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab,
          preflab.init_run("behind a small limit") as run):
        for step in range(1, 1_501):
            run.log({f"metric/{index}": step + index for index in range(10)}, step=step)
    statuses = [status for method, path, _, status in proxy.answers if path.endswith("/log")]
    assert 413 in statuses and statuses[-1] == 200
    stored = stored_metrics(run.id)
    assert list(stored) == list(range(1, 1_501))
    assert all(stored[step] == {f"metric/{index}": step + index for index in range(10)} for step in stored)
    assert Run.objects.get(pk=run.id).status == Run.Status.SUCCEEDED
    assert not list(outbox_dir.glob("*/rejected.jsonl"))


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_rows_were_refused_ends_failed_saying_how_many_and_where(live_server, api_token, outbox_dir,
                                                                             caplog):
    with (OutageProxy(live_server.url) as proxy, Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab,
          preflab.init_run("with a refused row") as run):
        run.log({"loss": 0.5}, step=1)
        run.log({"x" * 500: 1.0}, step=2)  # a metric name longer than the server takes: a 422, kept aside
    answer = run.finish()

    (rejected,) = outbox_dir.glob("*-run-*/rejected.jsonl")
    stored = Run.objects.get(pk=run.id)
    assert answer["status"] == stored.status == Run.Status.FAILED
    assert "metric rows and 0 samples were not delivered" in stored.error
    assert str(rejected) in stored.error and " on host " in stored.error
    # the request of both rows was halved until the server took the good one: only the bad row is set aside
    (record,) = [json.loads(line) for line in rejected.read_text().splitlines()]
    assert record["status"] == 422 and [row["step"] for row in record["entry"]["body"]["rows"]] == [2]
    assert stored.error.startswith("1 metric rows and 0 samples were not delivered")
    assert stored_metrics(run.id) == {1: {"loss": 0.5}}
    assert any(stored.error in record.getMessage() for record in caplog.records
               if record.levelno == logging.WARNING)
