"""What the worker's sink writes while a run trains: its start, heartbeats, metric rows and samples."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from trainer.sink import encode_json_value
from webapp.experiments.alerts import AlertThresholds, alerts_for
from webapp.experiments.models import MetricRow, ModelRef, Run, Sample
from webapp.experiments.services.runs import _rewind
from webapp.text import storable_text


def run_training_started(*, run_id: int, total_steps: int, start_step: int) -> None:
    """The loop starts (or resumes at start_step): rows after it belong to an abandoned branch."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        # A run restarted by its worker rewrites the same steps: its checkpoints after start_step are overwritten.
        _rewind(run, start_step, list(ModelRef.objects.filter(run=run, step__gt=start_step)))
        Run.objects.filter(pk=run_id).update(
            total_steps=total_steps, current_step=start_step, heartbeat_at=timezone.now()
        )


def metric_rows_write(*, run_id: int, rows: Iterable[dict[str, Any]], progress_never_back: bool = False) -> None:
    """Bulk insert logged steps (update on a repeated step), move the run's progress, raise alerts.

    progress_never_back: the run's current step only moves forward (an external client may log an earlier step
    again, e.g. its eval metrics); our own runs rewind on resume, so their progress follows the rows."""
    rows = list(rows)
    if not rows:
        return
    objects = [
        MetricRow(run_id=run_id, step=row["step"], wall_time=row["wall_time"], tokens_seen=row["tokens_seen"],
                  metrics=encode_json_value(dict(row["metrics"])))
        for row in rows
    ]
    last = max(rows, key=lambda row: row["step"])
    with transaction.atomic():
        MetricRow.objects.bulk_create(
            objects, batch_size=1000, update_conflicts=True, unique_fields=["run", "step"],
            update_fields=["wall_time", "tokens_seen", "metrics"],
        )
        run = Run.objects.select_for_update().get(pk=run_id)
        thresholds = AlertThresholds.of(run.config)
        new_alerts = [alert for row in rows for alert in alerts_for(row["step"], row["metrics"], thresholds)]
        alerts = list(run.alerts)
        for alert in new_alerts:
            if not any(existing["kind"] == alert["kind"] for existing in alerts):
                alerts.append(alert)
        names = sorted(set(run.metric_names).union(*(row["metrics"] for row in rows)))
        progress = {"current_step": last["step"], "tokens_seen": last["tokens_seen"]}
        if progress_never_back and last["step"] < run.current_step:
            progress = {}
        Run.objects.filter(pk=run_id).update(heartbeat_at=timezone.now(), alerts=alerts, metric_names=names, **progress)


def samples_write(*, run_id: int, samples: Iterable[dict[str, Any]]) -> None:
    Sample.objects.bulk_create(
        [
            Sample(run_id=run_id, step=sample["step"], prompt=storable_text(sample["prompt"]),
                   completion=storable_text(sample["completion"]),
                   rewards=encode_json_value(dict(sample["rewards"])),
                   advantage=encode_json_value(sample["advantage"]))
            for sample in samples
        ],
        batch_size=500,
    )
