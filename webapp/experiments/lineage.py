"""A run's lineage as the database records it: the data it trained on (the source, and the frozen file's rows and
SHA-256), the run it was forked or resumed from, its checkpoints, and the annotation rounds sampled from those
checkpoints with their projects (a sampling job names its model by the checkpoint's resolved path)."""

from __future__ import annotations

from typing import Any

from webapp.annotation.models import Project, Round
from webapp.experiments.data_sources import pair_aggregation
from webapp.experiments.models import ModelRef, Run


def run_checkpoints(run: Run) -> list[ModelRef]:
    return list(ModelRef.objects.filter(run=run, source=ModelRef.Source.CHECKPOINT).order_by("step", "id"))


def _data_source(run: Run) -> dict[str, Any]:
    source = dict(run.data_source or {})
    project_id = source.get("project_id")
    project = Project.objects.filter(pk=project_id).values("id", "name").first() if project_id else None
    out: dict[str, Any] = {"type": source.get("type", "external" if run.is_external else ""), "source": source,
                           "project": project, "rows": run.data_rows, "sha256": run.data_sha256}
    if source.get("type") == "project_pairs":
        out["aggregation"] = pair_aggregation(source)
    return out


def _rounds_from(checkpoints: list[ModelRef]) -> list[dict[str, Any]]:
    by_path = {checkpoint.path: checkpoint for checkpoint in checkpoints}
    rounds = (Round.objects.filter(sampling_job__model_path__in=list(by_path))
              .select_related("project", "sampling_job").order_by("created_at", "id"))
    return [{"project": {"id": round_.project_id, "name": round_.project.name}, "round": round_.number,
             "checkpoint_id": by_path[round_.sampling_job.model_path].pk,
             "step": by_path[round_.sampling_job.model_path].step, "model": round_.model,
             "sampling_status": round_.sampling_job.status, "responses": round_.responses.count(),
             "created_at": round_.created_at} for round_ in rounds]


def run_lineage(run: Run) -> dict[str, Any]:
    checkpoints = run_checkpoints(run)
    return {
        "run": {"id": run.pk, "name": run.name, "kind": run.kind, "status": run.status},
        "parent_id": run.parent_id,
        "data": _data_source(run),
        "checkpoints": [{"id": checkpoint.pk, "step": checkpoint.step, "name": checkpoint.name,
                         "architecture": checkpoint.architecture, "has_optimizer_state": checkpoint.has_optimizer_state,
                         "created_at": checkpoint.created_at} for checkpoint in checkpoints],
        "rounds": _rounds_from(checkpoints),
    }
