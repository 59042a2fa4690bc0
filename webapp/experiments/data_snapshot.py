"""A run's frozen training data: the exact rows its data source gave at launch, one JSON object a line in
RUNS_DIR/<run id>/training_data.jsonl, with their count and the file's SHA-256 on the run. The worker trains from
this file, never from the database again, so pairs annotated (or withdrawn) after the launch do not change what the
run trains on, and what it trained on can be downloaded.

A project's pairs or prompts and an uploaded file are snapshotted; the built-in arithmetic problems are not (they
are generated from the level and size alone, the same on every worker)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

SNAPSHOT_FILE = "training_data.jsonl"
SNAPSHOTTED_SOURCES = ("project_pairs", "project_prompts", "upload")


NO_SNAPSHOT = ("run {run_id} has no frozen training data (a project's pairs or prompts and an upload are frozen at "
               "launch; arithmetic problems and external runs are not)")


def snapshot_download_name(run_id: int) -> str:
    return f"run-{run_id}-training-data.jsonl"


class SnapshotError(RuntimeError):
    pass


@dataclass(frozen=True)
class Snapshot:
    path: Path
    rows: int
    sha256: str


def snapshot_path(run_id: int) -> Path:
    return Path(settings.RUNS_DIR) / str(run_id) / SNAPSHOT_FILE


def snapshot_write(rows: Iterable[dict], path: Path) -> Snapshot:
    """Write the rows as JSON lines (through a temporary file, so no half-written snapshot is ever read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    digest, count = hashlib.sha256(), 0
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as handle:
        for row in rows:
            line = (json.dumps(row, ensure_ascii=False) + "\n").encode()
            digest.update(line)
            handle.write(line)
            count += 1
    os.replace(partial, path)
    return Snapshot(path=path, rows=count, sha256=digest.hexdigest())


def snapshot_read(path: Path, *, rows: int, sha256: str) -> list[dict]:
    """The snapshot's rows, refused (SnapshotError) when the file is missing or is not the one the run recorded."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SnapshotError(f"the run's training data snapshot {path} is missing") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SnapshotError(f"the run's training data snapshot {path} changed since the launch: its SHA-256 is not "
                            f"the recorded {sha256}")
    parsed = [json.loads(line) for line in data.decode().splitlines() if line]
    if len(parsed) != rows:
        raise SnapshotError(f"the run's training data snapshot {path} holds {len(parsed)} rows, not the recorded {rows}")
    return parsed
