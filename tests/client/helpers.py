"""Small helpers of the client's tests: waiting for the server's rows, and reading them back decoded."""

import json
import time
from pathlib import Path

from trainer.sink import decode_json_value
from webapp.experiments.models import MetricRow


def wait_for(condition, *, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def stored_metrics(run_id: int) -> dict[int, dict[str, float]]:
    """The run's MetricRows as {step: metrics}, non-finite values as floats again."""
    return {row.step: decode_json_value(row.metrics) for row in MetricRow.objects.filter(run_id=run_id).order_by("step")}


def journal_counts(outbox: Path) -> tuple[list[int], int]:
    """(the steps of the metric rows, the number of samples) in every journal under `outbox`."""
    steps, samples = [], 0
    for journal in outbox.glob("*-run-*/journal.jsonl"):
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            if entry["kind"] == "log":
                steps += [row["step"] for row in entry["body"]["rows"]]
            elif entry["kind"] == "samples":
                samples += len(entry["body"]["samples"])
    return steps, samples
