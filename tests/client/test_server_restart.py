"""The server killed for 10 s in the middle of a client-logged run, then started again on the same address: every
step the loop logged arrives exactly once with its values, and so does every sample."""

import logging
import time

import pytest
from preflab_client import Client

from tests.client.helpers import journal_counts, stored_metrics, wait_for
from tests.client.server_process import start_server
from tests.webapp.upload_server import free_port
from webapp.experiments.models import MetricRow, Run, Sample

pytestmark = pytest.mark.django_db(transaction=True)

OUTAGE_S = 10.0


def metrics_of(step: int) -> dict[str, float]:
    return {"loss": 1 / step, "reward/mean": step * 0.5}


def test_a_server_down_for_ten_seconds_loses_no_step(api_token, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="preflab_client")
    port = free_port()
    server = start_server(port, tmp_path / "server-before.log")
    step = 0

    def log_for(seconds: float) -> None:
        nonlocal step
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            step += 1
            run.log(metrics_of(step), step=step)
            if step % 10 == 0:
                run.log_samples([{"prompt": f"question {step}", "completion": f"answer {step}"}], step=step)
            time.sleep(0.02)

    try:
        with Client(f"http://127.0.0.1:{port}", api_token, outbox_dir=tmp_path / "outbox") as preflab:
            run = preflab.init_run("through a restart", config={"lr": 1e-5})
            log_for(2.0)
            wait_for(lambda: MetricRow.objects.filter(run_id=run.id).exists(), what="the first rows on the server")
            server.process.kill()  # no goodbye: requests in flight die with it
            server.process.wait()
            killed_at = step

            log_for(OUTAGE_S)
            journaled_steps, _ = journal_counts(tmp_path / "outbox")
            assert journaled_steps, "while the server was down, the rows went to the journal"
            assert MetricRow.objects.filter(run_id=run.id).count() <= killed_at

            server = start_server(port, tmp_path / "server-after.log")
            log_for(2.0)
            answer = run.finish(timeout=60)
    finally:
        server.stop()

    assert answer is not None and answer["status"] == "succeeded"
    assert Run.objects.get(pk=run.id).status == Run.Status.SUCCEEDED
    assert step > killed_at + 100, "the loop logged on through the outage"
    stored = stored_metrics(run.id)
    assert list(stored) == list(range(1, step + 1))
    assert all(stored[number] == metrics_of(number) for number in stored)
    samples = list(Sample.objects.filter(run_id=run.id).order_by("step").values_list("step", "completion"))
    assert samples == [(number, f"answer {number}") for number in range(10, step + 1, 10)]
    messages = [record.getMessage() for record in caplog.records]
    assert len([text for text in messages if "cannot be reached" in text]) == 1, messages
    assert any("answers again; replayed" in text for text in messages), messages
    assert not list((tmp_path / "outbox").iterdir())
