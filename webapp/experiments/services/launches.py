"""Launches that are not the plain form's: an uploaded training file, and launches and forks from a program (the
API)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile

from trainer.formats.chat import LABEL_FIELD, ChatFormatError, normalize_record
from trainer.formats.jsonl import JsonlError, numbered_jsonl_lines, text_lines
from trainer.kinds import KINDS, run_kind
from webapp.experiments import selectors
from webapp.experiments.models import Run
from webapp.experiments.services.runs import SERVICE_FIELDS, run_create
from webapp.text import typed_text_problem
from webapp.text_bounds import CONFIG_TEXT_MAX_CHARS, length_problem
from webapp.uploads import upload_keep

# One line of an uploaded training file at most: what checking it may hold in memory at once.
UPLOAD_LINE_MAX_BYTES = 64 * 2**20


def upload_store(*, file: UploadedFile, kind: str) -> dict[str, Any]:
    """Check an uploaded JSONL file (each line an object with the fields `kind` needs), a line at a time so that
    memory holds one line however large the file, and keep it."""
    required = run_kind(kind).row_fields
    file.seek(0)
    count = 0
    try:
        for number, row in numbered_jsonl_lines(
            text_lines(file, name=file.name, max_line_bytes=UPLOAD_LINE_MAX_BYTES), name=file.name
        ):
            _upload_row_check(file.name, number, row, required)
            count += 1
    except JsonlError as error:
        raise ValidationError({"upload": str(error)}) from None
    if not count:
        raise ValidationError({"upload": f"{file.name} has no rows"})
    path = settings.DATA_DIR / "uploads" / f"{uuid.uuid4().hex}.jsonl"
    upload_keep(file, path)
    return {"type": "upload", "path": str(path), "name": file.name, "rows": count}


def _upload_row_check(file_name: str, number: int, row: dict, required: tuple[str, ...]) -> None:
    unpaired = LABEL_FIELD in required
    text_fields = [name for name in required if name != LABEL_FIELD]
    missing = [name for name in text_fields if name in row and not isinstance(row[name], str | list)]
    # TRL's formats: conversational fields are message lists, `messages` and implicit prompts give a prompt
    try:
        row = normalize_record(row, index=number - 1, name=file_name, unpaired=unpaired) if not missing else row
    except ChatFormatError as error:
        raise ValidationError({"upload": f"{file_name}, line {number}: {error.problem}"}) from None
    missing = missing or [name for name in text_fields if not isinstance(row.get(name), str | list)]
    if missing:
        raise ValidationError({"upload": f"{file_name}, line {number}: missing text field {missing[0]!r}"})
    if unpaired and LABEL_FIELD not in row:
        raise ValidationError({"upload": f"{file_name}, line {number}: missing field 'label' (true for a desirable "
                                         "completion, false for an undesirable one)"})


def run_create_from_upload(
    *, file: UploadedFile, kind: str, config: Mapping[str, Any], created_by: AbstractBaseUser | None, name: str = "",
    parent: Run | None = None,
) -> Run:
    """Keep the uploaded file, then create the run on it; a refused run leaves no file behind."""
    source = upload_store(file=file, kind=kind)
    try:
        return run_create(kind=kind, config=config, data_source=source, created_by=created_by, name=name,
                          parent=parent)
    except BaseException:
        Path(source["path"]).unlink(missing_ok=True)
        raise


def run_create_on_kept_upload(
    *, parent: Run, kind: str, config: Mapping[str, Any], created_by: AbstractBaseUser | None, name: str = "",
) -> Run:
    """A fork launched from the form without a new file: it trains on the parent's kept upload, which was checked
    for the rows of the parent's kind (upload_store), so a kind needing other rows is asked for a file of its own.
    The file is shared, never removed here: the parent's page still names it."""
    source = parent.data_source
    if source.get("type") != "upload":
        raise ValidationError({"upload": f"run #{parent.pk} trained on no uploaded file: choose a JSONL file to "
                                         "upload"})
    if run_kind(kind).row_fields != run_kind(parent.kind).row_fields:
        fields = ", ".join(run_kind(kind).row_fields)
        raise ValidationError({"upload": f"run #{parent.pk}'s file {source.get('name', '')} holds {parent.kind} "
                                         f"rows; a {kind} run needs {fields}: upload a file for it"})
    return run_create(kind=kind, config=config, data_source=dict(source), created_by=created_by, name=name,
                      parent=parent)


# --- launches and forks from a program (the API) -------------------------------------------------------------


def _refuse_fields_the_form_hides(kind: str, config: Mapping[str, Any]) -> None:
    """A program may set what the launch form offers, no more: not the fields Preflab sets itself (where the run
    writes, what it resumes from), nor the trainer's test-only switches (e.g. forcing a NaN loss)."""
    if kind not in KINDS:
        raise ValidationError({"kind": f"unknown run kind {kind!r}; choose one of {', '.join(KINDS)}"})
    test_only = {f.name for f in dataclasses.fields(run_kind(kind).config_class) if f.metadata.get("test_only")}
    for field in config:
        if field in SERVICE_FIELDS:
            raise ValidationError({field: "is set by Preflab (the run's own directory, or the checkpoint a resume "
                                          "continues from); leave it out"})
        if field in test_only:
            raise ValidationError({field: "is a switch for the trainer's tests, which the launch form does not offer"})


def run_launch(
    *, kind: str, config: Mapping[str, Any], data_source: Mapping[str, Any], created_by: AbstractBaseUser | None,
    name: str = "",
) -> Run:
    """A launch by a program: what the launch form accepts, validated and queued as the form's launch is
    (run_create). An uploaded file reaches a run only through the form, which stores it (upload_store): a path
    given here could name any file on the server, so an upload is refused."""
    _name_check(name)
    _refuse_fields_the_form_hides(kind, config)
    _config_texts_check(config)
    if data_source.get("type") == "upload":
        raise ValidationError({"data_source": "an uploaded file is given through the launch form; here, choose "
                                              "arithmetic or a project's pairs or prompts"})
    _project_check(data_source, user=created_by)
    return run_create(kind=kind, config=config, data_source=data_source, created_by=created_by, name=name)


def _project_check(data_source: Mapping[str, Any], *, user: AbstractBaseUser | None) -> None:
    """The form offers the projects its user reaches only; another is refused as one that does not exist."""
    project_id = data_source.get("project_id")
    is_project = str(data_source.get("type", "")).startswith("project_") and isinstance(project_id, int)
    if is_project and not selectors.project_reachable(project_id, user=user):
        raise ValidationError({"project": f"there is no project {project_id}"})


def _name_check(name: str) -> None:
    problem = typed_text_problem(name, max_length=Run._meta.get_field("name").max_length or 200)
    if problem:
        raise ValidationError({"name": f"the name {problem}"})


def _config_texts_check(config: Mapping[str, Any]) -> None:
    """A program's config holds text no longer than the launch form's text fields take: ValidationError naming the
    field."""
    for field, value in config.items():
        for text in value if isinstance(value, list) else [value]:
            problem = length_problem(text, CONFIG_TEXT_MAX_CHARS) if isinstance(text, str) else None
            if problem:
                raise ValidationError({field: f"a text of the config {problem}"})


def run_fork(
    *, parent_id: int, created_by: AbstractBaseUser | None, name: str = "", config: Mapping[str, Any] | None = None,
) -> Run:
    """A new run from the parent's config and data, with `config`'s keys set over it, validated and queued as a
    launch is. An external run has no config the trainer knows, so it cannot be forked."""
    parent = Run.objects.get(pk=parent_id)
    if parent.is_external:
        raise ValidationError({"kind": f"run {parent_id} is an external run, logged by its own program; it cannot "
                                       "be forked here"})
    _name_check(name)
    _refuse_fields_the_form_hides(parent.kind, config or {})
    _config_texts_check(config or {})
    _project_check(parent.data_source, user=created_by)
    inherited = {key: value for key, value in parent.config.items() if key not in SERVICE_FIELDS}
    return run_create(kind=parent.kind, config={**inherited, **(config or {})}, data_source=parent.data_source,
                      created_by=created_by, name=name.strip() or f"{parent.name} (fork)", parent=parent)
