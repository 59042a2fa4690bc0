"""The issue's acceptance: a loop that logs 100,000 steps of 20 metrics as fast as it can, through the client, to
a real server: every row is stored exactly once, no request is refused for its size, nothing is set aside."""

import logging
import time

import pytest
from django.db import connection
from preflab_client import Client, runs
from preflab_client.outbox import REQUEST_BYTES_MAX

from tests.client.outage_proxy import OutageProxy
from webapp.experiments.models import MetricRow, Run

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 100_000
METRICS = 20


def metrics_of(step: int) -> dict[str, float]:
    return {f"metric/{index:02d}": step + index / 100 for index in range(METRICS)}


def test_a_hundred_thousand_steps_logged_unthrottled_are_all_stored_once(live_server, api_token, outbox_dir):
    with OutageProxy(live_server.url) as proxy, Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab:
        proxy.keep_bodies = False
        run = preflab.init_run("unthrottled", total_steps=STEPS)
        started = time.monotonic()
        for step in range(1, STEPS + 1):
            run.log(metrics_of(step), step=step)
        logging_s = time.monotonic() - started
        answer = run.finish(timeout=600)

    assert answer is not None and answer["status"] == Run.Status.SUCCEEDED
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(DISTINCT step), min(step), max(step), "
                       "min((SELECT count(*) FROM jsonb_object_keys(metrics))), "
                       "max((SELECT count(*) FROM jsonb_object_keys(metrics))) "
                       "FROM experiments_metricrow WHERE run_id = %s", [run.id])
        assert cursor.fetchone() == (STEPS, STEPS, 1, STEPS, METRICS, METRICS)
    for step in (1, 4_321, 50_000, STEPS):
        assert MetricRow.objects.get(run_id=run.id, step=step).metrics == metrics_of(step)
    statuses = {status for method, path, _, status in proxy.answers if path.endswith("/log")}
    assert statuses == {200}, f"the server refused some requests: {statuses}"
    assert max(size for *_, size, _ in proxy.answers) <= REQUEST_BYTES_MAX
    assert not list(outbox_dir.glob("*/rejected.jsonl"))
    assert not outbox_dir.exists() or not list(outbox_dir.iterdir()), "nothing left on disk"
    print(f"logged {STEPS:,} steps in {logging_s:.1f} s ({logging_s / STEPS * 1e6:.0f} µs a log()); "
          f"{len(proxy.answers)} requests")


def test_a_queue_past_its_bound_goes_to_the_journal_and_is_sent_from_there_in_order(live_server, api_token,
                                                                                   outbox_dir, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="preflab_client")
    monkeypatch.setattr(runs, "OUTGOING_ITEMS_MAX", 500)
    monkeypatch.setattr(runs, "JOURNAL_TURN_SECONDS", 0.05)
    with OutageProxy(live_server.url) as proxy, Client(proxy.url, api_token, outbox_dir=outbox_dir) as preflab:
        run = preflab.init_run("spills")
        for step in range(1, 20_001):
            run.log({"loss": 1 / step}, step=step)
        answer = run.finish(timeout=300)

    assert answer["status"] == Run.Status.SUCCEEDED
    assert any("go to the journal" in record.getMessage() for record in caplog.records)
    sent = [row["step"] for body in proxy.bodies("POST", "/log") for row in body["rows"]]
    assert sent == list(range(1, 20_001)), "each row sent once, in the order logged"
    assert MetricRow.objects.filter(run_id=run.id).count() == 20_000
    assert not list(outbox_dir.iterdir())
