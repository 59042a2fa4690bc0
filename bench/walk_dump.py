"""The rows a browser walk wrote (walk_rows.py), in a canonical form: records named by what they hold, not by ids.

Left out: database ids (a record points to another by its name, external id or text), timestamps, durations
(seconds_spent, wall_time, time/* and throughput/* metrics), leases, paths under the data dir (written <data>),
passwords and tokens. Floats are rounded to 6 digits; lists of records are sorted; a ranking's tiers keep their
order, each tier sorted.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from django.db.models import Model

ID_KEYS = frozenset({"id", "pk", "ranking_id", "sampling_job", "import_job", "project_id", "run_id", "job_id"})
TIMING_PREFIXES = ("time/", "throughput/")


def scrub(value: Any, data_dir: str) -> Any:
    """Ids out, floats rounded, the data dir's path replaced, recursively."""
    if isinstance(value, dict):
        return {key: "<id>" if key in ID_KEYS else scrub(item, data_dir) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item, data_dir) for item in value]
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, str):
        return value.replace(data_dir, "<data>")
    return value


def canonical(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda record: json.dumps(record, sort_keys=True, ensure_ascii=False))


def fields(instance: Model, *names: str) -> dict[str, Any]:
    return {name: getattr(instance, name) for name in names}


def name_of(user: Any) -> str | None:
    return None if user is None else user.username


def projects() -> list[dict[str, Any]]:
    from webapp.annotation.models import Project

    return [{**fields(p, "name", "mode", "guidelines", "responses_per_item", "annotators_per_item", "lease_minutes"),
             "owner": name_of(p.owner), "members": sorted(name_of(m) for m in p.members.all())}
            for p in Project.objects.all()]


def prompts() -> list[dict[str, Any]]:
    from webapp.annotation.models import Prompt

    return [{"project": p.project.name, **fields(p, "external_id", "text", "messages", "reference_answer", "metadata",
                                                 "annotatable", "response_count", "ranking_count")}
            for p in Prompt.objects.select_related("project")]


def responses() -> list[dict[str, Any]]:
    from webapp.annotation.models import Response

    return [{"project": r.prompt.project.name, "prompt": r.prompt.external_id,
             **fields(r, "text", "source", "source_detail")}
            for r in Response.objects.select_related("prompt__project")]


def rankings() -> list[dict[str, Any]]:
    from webapp.annotation.models import Ranking, Response

    text = dict(Response.objects.values_list("pk", "text"))
    return [{"project": r.prompt.project.name, "prompt": r.prompt.external_id, "annotator": name_of(r.annotator),
             "tiers": [sorted(text[pk] for pk in tier) for tier in r.tiers], "assignment": r.assignment.status,
             **fields(r, "all_bad", "skipped", "rationale")}
            for r in Ranking.objects.select_related("prompt__project", "annotator", "assignment")]


def assignments() -> list[dict[str, Any]]:
    from webapp.annotation.models import Assignment

    return [{"project": a.prompt.project.name, "prompt": a.prompt.external_id, "annotator": name_of(a.annotator),
             "status": a.status} for a in Assignment.objects.select_related("prompt__project", "annotator")]


def pairs() -> list[dict[str, Any]]:
    from webapp.annotation.models import PreferencePair

    return [{"project": p.project.name, "prompt": p.prompt.external_id, "chosen": p.chosen.text,
             "rejected": p.rejected.text, "weight": p.weight, "margin": p.margin,
             "annotator": name_of(p.ranking.annotator) if p.ranking else None}
            for p in PreferencePair.objects.select_related("project", "prompt", "chosen", "rejected",
                                                           "ranking__annotator")]


def jobs() -> list[dict[str, Any]]:
    from webapp.annotation.models import ImportJob, SamplingJob

    sampling = [{"job": "sampling", "project": j.project.name, "created_by": name_of(j.created_by),
                 **fields(j, "model_path", "generation_settings", "status", "progress_done", "progress_total",
                          "error", "cancel_requested")} for j in SamplingJob.objects.select_related("project")]
    imports = [{"job": "import", "project": j.project.name, "created_by": name_of(j.created_by),
                **fields(j, "file_name", "file_format", "status", "stage", "bytes_total", "bytes_done", "rows_checked",
                         "created_count", "already_present", "responses_count", "pairs_count", "error", "error_line",
                         "error_field")} for j in ImportJob.objects.select_related("project")]
    return sampling + imports


def models() -> list[dict[str, Any]]:
    from webapp.experiments.models import ModelRef

    return [{"run": m.run.name if m.run else None,
             **fields(m, "name", "path", "source", "step", "architecture", "has_optimizer_state")}
            for m in ModelRef.objects.select_related("run")]


def final_metrics(run: Any) -> dict[str, float]:
    last = run.metric_rows.order_by("-step").first()
    return {} if last is None else {name: value for name, value in last.metrics.items()
                                    if not name.startswith(TIMING_PREFIXES)}


def runs() -> list[dict[str, Any]]:
    from webapp.experiments.models import Run

    return [{**fields(r, "name", "kind", "config", "data_source", "status", "error", "alerts", "current_step",
                      "total_steps", "tokens_seen", "checkpoint_path", "cancel_requested"),
             "metric_names": sorted(r.metric_names), "parent": r.parent.name if r.parent else None,
             "created_by": name_of(r.created_by), "metric_rows": r.metric_rows.count(),
             "final_metrics": final_metrics(r),
             "samples": canonical([fields(s, "step", "prompt", "completion", "rewards", "advantage")
                                   for s in r.samples.all()])}
            for r in Run.objects.select_related("parent", "created_by")]


def export_rows(name: str, content: str) -> list[dict[str, Any]]:
    if name.endswith(".csv"):
        return list(csv.DictReader(io.StringIO(content)))
    return [json.loads(line) for line in content.splitlines() if line.strip()]


def rows(exports: dict[str, str], data_dir: Path) -> dict[str, Any]:
    tables = {"projects": projects(), "prompts": prompts(), "responses": responses(), "rankings": rankings(),
              "assignments": assignments(), "pairs": pairs(), "jobs": jobs(), "models": models(), "runs": runs(),
              "exports": {name: export_rows(name, content) for name, content in exports.items()}}
    scrubbed = scrub(tables, str(data_dir))
    scrubbed["exports"] = {name: canonical(records) for name, records in scrubbed["exports"].items()}
    return {name: table if name == "exports" else canonical(table) for name, table in scrubbed.items()}
