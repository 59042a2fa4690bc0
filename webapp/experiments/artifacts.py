"""Files an external run logs (an evaluation table, a plot, a model card): kept under
RUNS_DIR/<run id>/artifacts/<name>, beside a small JSON record of each (its kind, size, SHA-256, when) in
artifacts/.records/. The file system is the store, as for a run's checkpoints and frozen data: a run's directory
holds everything it made. A file is written to a temporary name first and renamed into place, so no half-written
artifact is ever listed; logging a name again replaces it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

ARTIFACTS_DIR = "artifacts"
RECORDS_DIR = ".records"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
KIND_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"
COPY_CHUNK = 2**20


class ArtifactError(ValueError):
    """What is wrong with an artifact's name, kind or body, in words for the API's answer."""

    def __init__(self, message: str, *, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Artifact:
    name: str
    kind: str
    size: int
    sha256: str
    created_at: str


def artifacts_dir(run_id: int) -> Path:
    return Path(settings.RUNS_DIR) / str(run_id) / ARTIFACTS_DIR


def artifact_path(run_id: int, name: str) -> Path:
    name_check(name)
    return artifacts_dir(run_id) / name


def name_check(name: str) -> None:
    if not re.fullmatch(NAME_PATTERN, name):
        raise ArtifactError(f"name: {name!r} is not an artifact name: letters, digits, '.', '_' and '-', "
                            "starting with a letter or a digit, at most 200 characters")


def kind_check(kind: str) -> None:
    if not re.fullmatch(KIND_PATTERN, kind):
        raise ArtifactError(f"kind: {kind!r} is not a kind: lower-case letters, digits, '_' and '-' "
                            "(e.g. file, table, model, dataset)")


def artifact_store(*, run_id: int, name: str, kind: str, body: BinaryIO, limit: int) -> Artifact:
    """Copy `body` (read a chunk at a time) to the run's artifact `name`; more than `limit` bytes is a 413 and
    nothing is kept."""
    name_check(name)
    kind_check(kind)
    directory = artifacts_dir(run_id)
    (directory / RECORDS_DIR).mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".incoming-", delete=False) as partial:
        try:
            while chunk := body.read(COPY_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise ArtifactError(f"the file is larger than this server keeps: at most {limit:,} bytes "
                                        "(PREFLAB_UPLOAD_MAX_BYTES); nothing was stored", status=413)
                digest.update(chunk)
                partial.write(chunk)
        except BaseException:
            partial.close()
            os.unlink(partial.name)
            raise
    artifact = Artifact(name=name, kind=kind, size=size, sha256=digest.hexdigest(),
                        created_at=datetime.now(UTC).isoformat())
    record = directory / RECORDS_DIR / f"{name}.json"
    record_partial = record.with_name(record.name + ".partial")
    record_partial.write_text(json.dumps(asdict(artifact)))
    os.replace(partial.name, directory / name)
    os.replace(record_partial, record)
    return artifact


def run_artifacts(run_id: int) -> Iterator[Artifact]:
    """The run's artifacts by name."""
    records = artifacts_dir(run_id) / RECORDS_DIR
    if not records.is_dir():
        return
    for record in sorted(records.glob("*.json")):
        artifact = Artifact(**json.loads(record.read_text()))
        if (artifacts_dir(run_id) / artifact.name).is_file():
            yield artifact


def run_artifact(run_id: int, name: str) -> Artifact | None:
    record = artifacts_dir(run_id) / RECORDS_DIR / f"{name}.json"
    if not re.fullmatch(NAME_PATTERN, name) or not record.is_file() or not artifact_path(run_id, name).is_file():
        return None
    return Artifact(**json.loads(record.read_text()))
