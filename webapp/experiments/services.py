"""Every write of the experiments app: models, runs (one write path per status change), metrics, samples.

The run's execution (loading the trainer, which imports torch) lives in workers/training.py; the worker
calls the services below for every write it makes, so the web process never imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from trainer.config import ConfigError, check_data_size, config_to_dict
from trainer.formats.chat import ChatFormatError, normalize_record
from trainer.formats.jsonl import JsonlError, numbered_jsonl_lines, text_lines
from trainer.kinds import KINDS, config_from_dict, run_kind
from trainer.modeling.model_names import is_hub_id, looks_local
from trainer.sink import decode_json_value, encode_json_value
from webapp.celery_app import RUN_NODE_JOIN, RUN_TRAINING
from webapp.experiments import selectors
from webapp.experiments.alerts import AlertThresholds, alerts_for
from webapp.experiments.data_sources import data_source_check, data_source_rows
from webapp.experiments.models import (
    EXTERNAL_KIND,
    MODEL_FIELDS,
    MetricRow,
    ModelRef,
    PeriodicJobClaim,
    Run,
    Sample,
    SampleBatch,
)
from webapp.queueing import publish_before_commit, publish_on_commit, requeue_lost
from webapp.text import storable_text, typed_text_problem
from webapp.text_bounds import (
    CONFIG_TEXT_MAX_CHARS,
    EXTERNAL_CONFIG_MAX_CHARS,
    NAME_MAX_CHARS,
    PROMPT_MAX_CHARS,
    RESPONSE_MAX_CHARS,
    RUN_ERROR_MAX_CHARS,
    length_problem,
)
from webapp.uploads import upload_keep

logger = logging.getLogger(__name__)

Status = Run.Status
# Status changes allowed by the run's services; anything else is refused (e.g. a late "succeeded" after
# the stale-heartbeat check already failed the run).
TRANSITIONS: dict[str, set[str]] = {
    # failed: its message could not be published
    Status.QUEUED: {Status.RUNNING, Status.CANCELED, Status.FAILED},
    Status.RUNNING: {Status.SUCCEEDED, Status.FAILED, Status.CANCELED},
    Status.SUCCEEDED: {Status.QUEUED},
    Status.FAILED: {Status.QUEUED},
    Status.CANCELED: {Status.QUEUED},
}
# Set by the service, never by a form: where the run writes, and which checkpoint it continues from.
SERVICE_FIELDS = ("output_dir", "resume_from")
# names a run's queue messages (webapp.queueing)
RUN_MESSAGE_KIND = "run"
# ... and the messages asking gpu workers to join a run on several nodes as one of its nodes
NODE_MESSAGE_KIND = "node"

# --- models -------------------------------------------------------------------------------------------

Architecture = ModelRef.Architecture
# What each model field of a run loads; a model whose kind is unknown (a hub id) is accepted for both.
FIELD_ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "model": (Architecture.CAUSAL_LM,),
    "reference_model": (Architecture.CAUSAL_LM,),
    "reward_model": (Architecture.CLASSIFIER,),
    "critic_model": (Architecture.CLASSIFIER,),
}


@dataclass(frozen=True)
class ResolvedModel:
    """What a model's text names: the path the trainer loads, what it is, and its registry row if it has one."""

    path: str
    source: str
    architecture: str
    registered: ModelRef | None = None


def field_architectures(kind: str, field: str) -> tuple[str, ...]:
    """The kinds of model a run's model field takes: a reward model may also continue from a classifier."""
    if kind == "reward_model" and field == "model":
        return (Architecture.CAUSAL_LM, Architecture.CLASSIFIER)
    return FIELD_ARCHITECTURES[field]


def _model_roots() -> list[Path]:
    return [Path(root).resolve() for root in settings.MODEL_ROOTS]


def _accepted_models() -> str:
    roots = ", ".join(str(root) for root in _model_roots())
    return (f"a registered model's name or path, a run's checkpoint directory, a directory under the model roots "
            f"({roots}) or a hub id (org/name)")


def architecture_of_directory(directory: Path) -> str:
    """From config.json's "architectures" (save_pretrained writes e.g. LlamaForCausalLM)."""
    try:
        names = json.loads((directory / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return Architecture.UNKNOWN
    if any(str(name).endswith("ForCausalLM") for name in names):
        return Architecture.CAUSAL_LM
    if any(str(name).endswith("ForSequenceClassification") for name in names):
        return Architecture.CLASSIFIER
    return Architecture.UNKNOWN


def architecture_of_run(kind: str) -> str:
    return Architecture(run_kind(kind).produces)


def _registered_named(name: str) -> ModelRef | None:
    models = list(ModelRef.objects.filter(name=name)[:2])
    if len(models) > 1:
        paths = " and ".join(model.path for model in models)
        raise ValidationError(f"several models are named {name!r} ({paths}); give the path instead")
    return models[0] if models else None


def _resolved_registered(model: ModelRef) -> ResolvedModel:
    if model.source != ModelRef.Source.HUB and not (Path(model.path) / "config.json").is_file():
        raise ValidationError(f"model {model.name!r} is gone from disk: {model.path}/config.json is missing")
    return ResolvedModel(model.path, model.source, model.architecture, model)


def _resolved_directory(directory: Path) -> ResolvedModel:
    if directory.is_relative_to(Path(settings.RUNS_DIR).resolve()):
        raise ValidationError(
            f"{directory} is not a checkpoint in the registry (a run registers its checkpoints as it writes them); "
            f"give {_accepted_models()}")
    if not any(directory.is_relative_to(root) for root in _model_roots()):
        raise ValidationError(f"{directory} is outside the allowed model roots; refused. Give {_accepted_models()}")
    if not (directory / "config.json").is_file():
        raise ValidationError(f"{directory} holds no model: config.json is missing")
    return ResolvedModel(str(directory), ModelRef.Source.LOCAL, architecture_of_directory(directory))


def model_resolve(text: str, *, user: AbstractBaseUser | None = None) -> ResolvedModel:
    """The one way a model is named (registration, the launch form's model fields, sampling). Writes nothing.

    Accepted, in this order: a registered ModelRef by path or name (base models and the checkpoints runs
    wrote), a directory under PREFLAB_MODEL_ROOTS holding config.json, a hub id org/name. Paths are resolved
    first, so a `..` cannot leave a root; anything else raises ValidationError saying what was given and what
    is accepted. With `user`, a checkpoint of a run they do not see (selectors.models_visible_to) is refused as
    an unknown model."""
    value = text.strip()
    if not value:
        raise ValidationError(f"no model given; give {_accepted_models()}")
    local = looks_local(value)
    try:
        key = str(Path(value).expanduser().resolve()) if local else value
    except RuntimeError:  # ~name of a user this machine does not have
        raise ValidationError(f"{value!r} names the home of no user here; give {_accepted_models()}") from None
    registered = ModelRef.objects.filter(path=key).first() or _registered_named(value)
    if registered is not None and user is not None and not (
            selectors.models_visible_to(user).filter(pk=registered.pk).exists()):
        raise ValidationError(f"{value!r} is not a known model; give {_accepted_models()}")
    if registered is not None:
        return _resolved_registered(registered)
    if local:
        return _resolved_directory(Path(key))
    if is_hub_id(value):
        return ResolvedModel(value, ModelRef.Source.HUB, Architecture.UNKNOWN)
    raise ValidationError(f"{value!r} is not a known model; give {_accepted_models()}")


def _free_name(preferred: str, path: str) -> str:
    return path if ModelRef.objects.filter(name=preferred).exclude(path=path).exists() else preferred


def model_register(*, path: str, name: str = "", user: AbstractBaseUser | None = None) -> ModelRef:
    """Register a model named as `model_resolve` accepts (as `user` sees them); registering a registered one
    returns its row."""
    for field, value in (("path", path), ("name", name)):
        problem = typed_text_problem(value, max_length=ModelRef._meta.get_field(field).max_length or 1000)
        if problem:
            raise ValidationError({field: f"the {field} {problem}"})
    try:
        resolved = model_resolve(path, user=user)
    except ValidationError as error:
        raise ValidationError({"path": error.messages}) from None
    if resolved.registered is not None:
        return resolved.registered
    name = name.strip()
    if name and ModelRef.objects.filter(name=name).exists():
        raise ValidationError({"name": f"the name {name!r} is taken by another model; choose another"})
    default_name = resolved.path if resolved.source == ModelRef.Source.HUB else Path(resolved.path).name
    model, _ = ModelRef.objects.get_or_create(
        path=resolved.path,
        defaults={"name": name or _free_name(default_name, resolved.path), "source": resolved.source,
                  "architecture": resolved.architecture},
    )
    return model


def model_register_checkpoint(*, run_id: int, step: int, path: str) -> ModelRef:
    """A run wrote a checkpoint: it becomes a model; the run's earlier checkpoints lost their optimizer state
    (the trainer keeps it only in the newest, see trainer.loop.after_checkpoint)."""
    run = Run.objects.get(pk=run_id)
    model, _ = ModelRef.objects.update_or_create(
        path=str(Path(path).resolve()),
        defaults={"name": f"run {run.pk} {run.name} · step {step}", "source": ModelRef.Source.CHECKPOINT,
                  "run": run, "step": step, "architecture": architecture_of_run(run.kind),
                  "has_optimizer_state": True},
    )
    ModelRef.objects.filter(run=run).exclude(pk=model.pk).update(has_optimizer_state=False)
    Run.objects.filter(pk=run_id).update(checkpoint_path=model.path)
    return model


def model_checkpoint_release(*, run_id: int, path: str) -> bool:
    """The trainer asks to delete an old checkpoint of `run_id` (keep_last): its model row is deleted and True
    returned, unless another run uses it as a model, then nothing changes and False is returned."""
    resolved = str(Path(path).resolve())
    if selectors.runs_using_models([resolved], excluding_run_id=run_id):
        return False
    ModelRef.objects.filter(run_id=run_id, path=resolved).delete()
    return True


def _resolved_model_fields(kind: str, config: Mapping[str, Any]) -> dict[str, str]:
    """Each model field the config names, resolved to the path the trainer loads (registered if it was not)."""
    resolved_fields = {}
    for field in MODEL_FIELDS:
        value = config.get(field)
        if value in (None, ""):
            continue
        if not isinstance(value, str):
            raise ValidationError({field: f"expected a model name or path, got {value!r}"})
        try:
            resolved = model_resolve(value)
        except ValidationError as error:
            raise ValidationError({field: error.messages}) from None
        wanted = field_architectures(kind, field)
        if resolved.architecture != Architecture.UNKNOWN and resolved.architecture not in wanted:
            takes = " or ".join(Architecture(architecture).label for architecture in wanted)
            raise ValidationError({field: f"{value!r} is a {Architecture(resolved.architecture).label}; "
                                          f"{field} takes a {takes}"})
        if resolved.registered is None:
            model_register(path=resolved.path)
        resolved_fields[field] = resolved.path
    return resolved_fields


# --- data sources ---------------------------------------------------------------------------------------


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
    missing = [name for name in required if name in row and not isinstance(row[name], str | list)]
    # TRL's formats: conversational fields are message lists, `messages` and implicit prompts give a prompt
    try:
        row = normalize_record(row, index=number - 1, name=file_name) if not missing else row
    except ChatFormatError as error:
        raise ValidationError({"upload": f"{file_name}, line {number}: {error.problem}"}) from None
    missing = missing or [name for name in required if not isinstance(row.get(name), str | list)]
    if missing:
        raise ValidationError({"upload": f"{file_name}, line {number}: missing text field {missing[0]!r}"})


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


# --- runs ------------------------------------------------------------------------------------------------


def _validated_config(kind: str, config: Mapping[str, Any], output_dir: str) -> dict[str, Any]:
    if kind not in KINDS:
        raise ValidationError({"kind": f"unknown run kind {kind!r}; choose one of {', '.join(KINDS)}"})
    values = {key: value for key, value in config.items() if key not in SERVICE_FIELDS}
    values.update(_resolved_model_fields(kind, values))
    try:
        validated = config_from_dict(kind, {**values, "output_dir": output_dir})
    except ConfigError as error:
        raise ValidationError({error.field: error.message}) from None
    except TypeError as error:
        raise ValidationError({"config": str(error)}) from None
    return config_to_dict(validated)


def _data_size_check(kind: str, config: dict[str, Any], data_source: Mapping[str, Any]) -> None:
    """The config's bounds that follow from the data's size (trainer.config.check_data_size): the batch, and the steps
    of `epochs` passes. The trainer checks them again when it reads the data, which may have changed meanwhile."""
    rows = data_source_rows(kind, data_source)
    if rows is None:
        return
    if rows == 0:
        rows_are = "prompts" if run_kind(kind).online else "preference pairs"
        raise ValidationError({"project": f"the project has no {rows_are} to train on yet"})
    try:
        check_data_size(config_from_dict(kind, config), rows)
    except ConfigError as error:
        raise ValidationError({error.field: error.message}) from None


def _queue(run: Run, *, on_failure: Callable[[str], None]) -> None:
    """Mark the run queued now and publish its message once committed; on_failure undoes the launch if the broker
    cannot be reached (QueueUnavailable then reaches the caller)."""
    Run.objects.filter(pk=run.pk).update(queued_at=timezone.now())
    publish_on_commit(RUN_TRAINING, kind=RUN_MESSAGE_KIND, object_id=run.pk, on_failure=on_failure)


def _queue_before_commit(run: Run) -> None:
    """Mark the run queued now and publish its message before the caller's transaction commits: a broker that
    cannot be reached undoes it all (QueueUnavailable reaches the caller), so a resumed run stays as it was."""
    Run.objects.filter(pk=run.pk).update(queued_at=timezone.now())
    publish_before_commit(RUN_TRAINING, kind=RUN_MESSAGE_KIND, object_id=run.pk)


def _forget_unqueued_run(run_id: int) -> Callable[[str], None]:
    """A new run that could not be queued is removed: the user is told, and no 'queued' row waits for ever."""
    return lambda reason: Run.objects.filter(pk=run_id, status=Status.QUEUED).delete()


def runs_requeue_lost(*, message_ids: set[str], now: datetime | None = None) -> list[int]:
    """Publish again every run queued too long whose message is gone (webapp.queueing.requeue_lost)."""
    # an external run is never queued; excluded all the same, since publishing one would hand it to a worker
    queued = Run.objects.filter(status=Status.QUEUED).exclude(kind=EXTERNAL_KIND)
    return requeue_lost(RUN_TRAINING, kind=RUN_MESSAGE_KIND, queued=queued, message_ids=message_ids, now=now)


@transaction.atomic
def run_create(
    *,
    kind: str,
    config: Mapping[str, Any],
    data_source: Mapping[str, Any],
    created_by: AbstractBaseUser | None,
    name: str = "",
    parent: Run | None = None,
) -> Run:
    """Validate the config with the trainer's dataclass and against its data, store the run and queue it once
    committed."""
    _models_check(config, user=created_by)
    checked = _validated_config(kind, config, str(settings.RUNS_DIR / "new"))
    data_source_check(kind, data_source)
    _data_size_check(kind, checked, data_source)
    run = Run.objects.create(
        name=name.strip() or f"{kind} run", kind=kind, config={}, data_source=dict(data_source),
        created_by=created_by, parent=parent,
    )
    output_dir = settings.RUNS_DIR / str(run.pk)
    _set_aside_stale_output(output_dir)
    run.config = _validated_config(kind, config, str(output_dir))
    run.save(update_fields=["config"])
    _queue(run, on_failure=_forget_unqueued_run(run.pk))
    return run


def _models_check(config: Mapping[str, Any], *, user: AbstractBaseUser | None) -> None:
    """A run's models are models its launcher sees: another team's checkpoint is refused as an unknown model."""
    if user is None:
        return
    for field in MODEL_FIELDS:
        value = config.get(field)
        if isinstance(value, str) and value.strip():
            try:
                model_resolve(value, user=user)
            except ValidationError as error:
                raise ValidationError({field: error.messages}) from None


def _set_aside_stale_output(output_dir: Path) -> None:
    """A new run's id is new, so anything already in its output directory was left by an earlier database (a
    reset one, or a test session's): moved aside, never deleted, so keep_last cannot count or remove it."""
    if not output_dir.exists():
        return
    aside = output_dir.with_name(f"{output_dir.name}.stale-{timezone.now():%Y%m%dT%H%M%S%f}")
    output_dir.rename(aside)
    logger.warning("run output %s existed before its run; moved to %s", output_dir, aside)


def _transition(run_id: int, target: str, *, only_from: str | None = None, **fields: Any) -> bool:
    """Move a run to `target` if that is allowed from its current status; False (and nothing written) if not."""
    sources = [status for status, targets in TRANSITIONS.items() if target in targets]
    if only_from is not None:
        sources = [status for status in sources if status == only_from]
    changed = Run.objects.filter(pk=run_id, status__in=sources).update(status=target, **fields)
    if not changed:
        logger.info("run %s: refused the change to %s", run_id, target)
    return bool(changed)


def run_cancel(*, run_id: int) -> None:
    """A queued run is canceled at once; a running one stops at its next step (the sink's should_stop)."""
    if _transition(run_id, Status.CANCELED, only_from=Status.QUEUED, finished_at=timezone.now(), cancel_requested=True):
        return
    Run.objects.filter(pk=run_id, status=Status.RUNNING).update(cancel_requested=True)


def run_cancel_unanswered(*, run_id: int, reason: str) -> bool:
    """A running run whose training did not answer its cancel, and whose worker killed it: canceled with `reason` as
    its error text; False (and nothing written) if the run is no longer running."""
    if not Run.objects.filter(pk=run_id, cancel_requested=True).exists():
        return False
    return _transition(run_id, Status.CANCELED, only_from=Status.RUNNING, finished_at=timezone.now(),
                       error=storable_text(reason))


def run_fail(*, run_id: int, error: str, alert: str | None = None) -> bool:
    error = storable_text(error)  # an error can quote what the model wrote
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        alerts = list(run.alerts)
        if alert and not any(item["kind"] == alert for item in alerts):
            alerts.append({"kind": alert, "step": run.current_step, "message": error.splitlines()[0]})
        return _transition(run_id, Status.FAILED, error=error, finished_at=timezone.now(), alerts=alerts)


def runs_fail_stale(*, now: datetime | None = None) -> list[int]:
    """Fail every running run whose worker (or, for an external run, whose client) stopped sending heartbeats:
    it was killed or lost."""
    now = now or timezone.now()
    limit = now - timedelta(seconds=settings.PREFLAB_HEARTBEAT_TIMEOUT_S)
    stale = Run.objects.filter(status=Status.RUNNING).filter(
        Q(heartbeat_at__lt=limit) | Q(heartbeat_at__isnull=True, started_at__lt=limit)
    )
    failed = []
    for run_id, heartbeat, kind in stale.values_list("pk", "heartbeat_at", "kind"):
        last = heartbeat.isoformat(timespec="seconds") if heartbeat else "never"
        # an external run has no worker: its own program logs and beats through the API
        sender = "the client" if kind == EXTERNAL_KIND else "worker"
        message = f"{sender} stopped sending heartbeats; last at {last}"
        if run_fail(run_id=run_id, error=message, alert="stale_heartbeat"):
            failed.append(run_id)
    return failed


@transaction.atomic
def run_resume(*, run_id: int, checkpoint_id: int, remove_later: bool = False) -> Run:
    """Continue a finished run from one of its checkpoints: later rows are rewound, the step axis continues. If
    the broker cannot be reached nothing changes (QueueUnavailable): its status, rows and checkpoints stay.

    The run's checkpoints after the chosen one belong to the abandoned branch: they are removed (rows and
    directories) only when `remove_later` confirms it, and never while another run uses one as a model."""
    run = Run.objects.select_for_update().get(pk=run_id)
    if run.is_external:
        raise ValidationError({"kind": f"run {run_id} is an external run, logged by its own program; it cannot be "
                                       "resumed here"})
    checkpoint = ModelRef.objects.filter(pk=checkpoint_id, run=run).first()
    if checkpoint is None or checkpoint.step is None:
        raise ValidationError({"checkpoint": f"checkpoint {checkpoint_id} does not belong to run {run_id}"})
    if run.is_active:
        raise ValidationError({"status": f"run {run_id} is {run.status}; only a finished run can be resumed"})
    plan = selectors.resume_plan(run=run, checkpoint=checkpoint)
    if plan.blocked:
        users = "; ".join(
            f"step {model.step} is a model of " + ", ".join(f"run #{user.pk} {user.name}" for user in plan.used_by[model.path])
            for model in plan.removed if model.path in plan.used_by
        )
        raise ValidationError({"checkpoint": ValidationError(
            f"resuming from step {checkpoint.step} would remove later checkpoints that other runs use ({users}); "
            f"fork the run from step {checkpoint.step} instead", code="in_use")})
    if plan.removed and not remove_later:
        steps = ", ".join(f"step {model.step}" for model in plan.removed)
        raise ValidationError({"checkpoint": ValidationError(
            f"resuming from step {checkpoint.step} removes the later checkpoints {steps}; confirm to remove them",
            code="confirm")})
    _rewind(run, checkpoint.step, plan.removed)
    run.config = {**run.config, "resume_from": checkpoint.path}
    run.save(update_fields=["config"])
    _transition(
        run_id, Status.QUEUED, error="", cancel_requested=False, finished_at=None, current_step=checkpoint.step,
        checkpoint_path=checkpoint.path,
        alerts=[alert for alert in run.alerts if alert.get("step", 0) <= checkpoint.step and alert["kind"] != "stale_heartbeat"],
    )
    _queue_before_commit(run)
    run.refresh_from_db()
    return run


def _rewind(run: Run, step: int, later_checkpoints: list[ModelRef]) -> None:
    MetricRow.objects.filter(run=run, step__gt=step).delete()
    Sample.objects.filter(run=run, step__gt=step).delete()
    ModelRef.objects.filter(pk__in=[model.pk for model in later_checkpoints]).delete()
    directories = [Path(model.path) for model in later_checkpoints]
    # Disk follows the rows only once they are gone for good.
    transaction.on_commit(lambda: _remove_run_directories(directories))


def _remove_run_directories(directories: list[Path]) -> None:
    runs_dir = Path(settings.RUNS_DIR).resolve()
    for directory in directories:
        if directory.resolve().is_relative_to(runs_dir):
            shutil.rmtree(directory, ignore_errors=True)
        else:
            logger.warning("not removing %s: it is outside the runs directory %s", directory, runs_dir)


def run_start(*, run_id: int) -> Run | None:
    """Claim a queued run for this worker (queued -> running); None, and nothing written, if it is not queued
    (e.g. a redelivered task after its worker was killed)."""
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status != Status.QUEUED:
            logger.info("run %s is %s, not queued: nothing to do", run_id, run.status)
            return None
        _transition(run_id, Status.RUNNING, started_at=now, heartbeat_at=now, error="", finished_at=None)
    run.refresh_from_db()
    return run


def run_rendezvous_open(*, run_id: int, rendezvous_id: str, endpoint: str, nodes: int, worker: str) -> bool:
    """The worker that claimed a run on several nodes is node 0: record where the nodes meet (its launch's
    rendezvous), and ask nodes - 1 other gpu workers to join it, one message per node rank, sent once committed.
    False, and nothing written, if the run is not running. If the broker cannot be reached the run is failed with
    the reason and QueueUnavailable raised."""
    with transaction.atomic():
        opened = Run.objects.filter(pk=run_id, status=Status.RUNNING).update(
            rendezvous={"id": rendezvous_id, "endpoint": endpoint, "nodes": nodes, "joined": {"0": worker}}
        )
        if not opened:
            return False
        for node_rank in range(1, nodes):
            publish_on_commit(RUN_NODE_JOIN, kind=NODE_MESSAGE_KIND, object_id=run_id,
                              args=(node_rank, rendezvous_id), on_failure=_fail_unasked_node(run_id, node_rank))
    return True


def _fail_unasked_node(run_id: int, node_rank: int) -> Callable[[str], None]:
    return lambda reason: run_fail(run_id=run_id, error=f"node {node_rank} could not be asked to join: {reason}")


def run_node_claim(*, run_id: int, node_rank: int, rendezvous_id: str, worker: str) -> Run | None:
    """Claim node `node_rank` of the run's rendezvous `rendezvous_id` for this worker: the run, or None (and nothing
    written) if the run is not running, was launched again since (another rendezvous), or that node was claimed
    already (a message delivered twice)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        rendezvous = run.rendezvous
        joined = rendezvous.get("joined", {})
        if run.status != Status.RUNNING or rendezvous.get("id") != rendezvous_id or str(node_rank) in joined:
            logger.info("run %s: node %s of rendezvous %s is not to be joined (run %s, rendezvous %s, joined %s)",
                        run_id, node_rank, rendezvous_id, run.status, rendezvous.get("id"), sorted(joined))
            return None
        run.rendezvous = {**rendezvous, "joined": {**joined, str(node_rank): worker}}
        run.save(update_fields=["rendezvous"])
    return run


def run_finish(*, run_id: int, stopped: bool) -> bool:
    """The loop returned: canceled if it stopped on request, else succeeded (refused if the run failed meanwhile)."""
    return _transition(run_id, Status.CANCELED if stopped else Status.SUCCEEDED, finished_at=timezone.now())


# --- what the worker's sink writes --------------------------------------------------------------------------


def run_training_started(*, run_id: int, total_steps: int, start_step: int) -> None:
    """The loop starts (or resumes at start_step): rows after it belong to an abandoned branch."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        # A run restarted by its worker rewrites the same steps: its checkpoints after start_step are overwritten.
        _rewind(run, start_step, list(ModelRef.objects.filter(run=run, step__gt=start_step)))
        Run.objects.filter(pk=run_id).update(
            total_steps=total_steps, current_step=start_step, heartbeat_at=timezone.now()
        )


def run_heartbeat(*, run_id: int) -> bool:
    """The run's worker or client is alive; False (and nothing written) if the run is not running."""
    return bool(Run.objects.filter(pk=run_id, status=Status.RUNNING).update(heartbeat_at=timezone.now()))


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


def _cut_to_bound(text: str, max_chars: int) -> str:
    """`text`, or its beginning and end with a note of what was cut between them: an error report is kept, not
    refused (refusing a failed run's finish would leave it running until its heartbeats are missed)."""
    if len(text) <= max_chars:
        return text
    note = f"\n[... {len(text) - max_chars:,} characters cut (at most {max_chars:,} are kept) ...]\n"
    kept = max_chars - len(note)
    return text[: kept // 2] + note + text[len(text) - (kept - kept // 2):]


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


# --- external runs: logged through the API by a program outside Preflab ----------------------------------------

# Bounds of one request, and of the metric names one run may log (each is a chart on the run page).
EXTERNAL_ROWS_MAX = 10_000
EXTERNAL_SAMPLES_MAX = 1_000
RUN_METRIC_NAMES_MAX = 1_000
METRIC_NAME_MAX_LENGTH = NAME_MAX_CHARS
BATCH_ID_MAX_LENGTH = SampleBatch._meta.get_field("batch_id").max_length or 100
# PositiveIntegerField: Postgres integer
STEP_MAX = 2**31 - 1
TOKENS_MAX = 2**63 - 1
# How a client may spell a non-finite number in JSON (which has none); "nan", "inf", "-inf" is the API's own.
NONFINITE_WORDS = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
                   "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf}
FINISHED_STATUSES = (Status.SUCCEEDED, Status.FAILED, Status.CANCELED)


class RunWriteRefused(Exception):
    """A write the run cannot take in its state: it is no longer running, it is not an external run (our own
    runs are written by their worker only), or it holds as many metric names as a run may. The API answers 409."""


@dataclass(frozen=True)
class LoggedRow:
    """One row a client logged; metrics without the names it sent as null; wall time and tokens when given."""

    step: int
    metrics: dict[str, float]
    wall_time: float | None
    tokens_seen: int | None


def _where(index: int, field: str, noun: str = "row") -> str:
    return f'{noun} {index}, field "{field}"'


def _logged_number(value: Any, where: str) -> float | None:
    """A float from a number, null (None: no value) or a non-finite number's word."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise ValidationError(f"{where}: {value} is too large for a float") from None
    if isinstance(value, str) and value.strip().lower() in NONFINITE_WORDS:
        return NONFINITE_WORDS[value.strip().lower()]
    raise ValidationError(f'{where}: expected a number, null or "nan", "inf", "-inf"; got {_shown(value)}')


def _whole_number(value: Any, where: str, *, maximum: int) -> int:
    if isinstance(value, float) and value.is_integer():  # JSON has one type of number: 10.0 is 10
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ValidationError(f"{where}: expected a whole number from 0 to {maximum:,}; got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _metric_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(f"{where}: a metric name must be a non-empty string; got {_shown(name)}")
    problem = typed_text_problem(name, max_length=METRIC_NAME_MAX_LENGTH)
    if problem:
        raise ValidationError(f"{where}: the metric name {_shown(name)} {problem}")
    return name


def _check_list(items: Any, *, field: str, maximum: int, per: str) -> None:
    """A client's list of rows or samples, of at most `maximum` items; ValidationError naming the field."""
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise ValidationError(f'field "{field}": expected a list of {field}')
    if len(items) > maximum:
        raise ValidationError(f'field "{field}": {len(items):,} {field}; at most {maximum:,} {per}')


def _logged_rows(rows: Sequence[Any]) -> list[LoggedRow]:
    """Parse a client's rows; ValidationError naming the row (0-based) and field of the first problem."""
    _check_list(rows, field="rows", maximum=EXTERNAL_ROWS_MAX, per="a request")
    parsed = []
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValidationError(f"row {index}: expected an object with step and metrics; got {_shown(row)}")
        unknown = sorted(set(row) - {"step", "metrics", "wall_time", "tokens_seen"})
        if unknown:
            raise ValidationError(f'{_where(index, unknown[0])}: unknown field; a row has step, metrics, wall_time '
                                  "and tokens_seen")
        step = _whole_number(row.get("step"), _where(index, "step"), maximum=STEP_MAX)
        metrics = row.get("metrics")
        if not isinstance(metrics, Mapping):
            raise ValidationError(f"{_where(index, 'metrics')}: expected an object of metric names to numbers")
        values = {}
        for name, value in metrics.items():
            name = _metric_name(name, _where(index, "metrics"))
            number = _logged_number(value, _where(index, f"metrics.{name}"))
            if number is not None:
                values[name] = number
        wall_time = _logged_number(row.get("wall_time"), _where(index, "wall_time"))
        if wall_time is not None and not math.isfinite(wall_time):
            raise ValidationError(f"{_where(index, 'wall_time')}: must be a finite number of seconds")
        tokens = row.get("tokens_seen")
        tokens = None if tokens is None else _whole_number(tokens, _where(index, "tokens_seen"), maximum=TOKENS_MAX)
        parsed.append(LoggedRow(step, values, wall_time, tokens))
    return parsed


def _merged_by_step(rows: list[LoggedRow]) -> dict[int, LoggedRow]:
    """Rows of one request for the same step are one row: later values win, as they would in two requests."""
    merged: dict[int, LoggedRow] = {}
    for row in rows:
        earlier = merged.get(row.step)
        if earlier is not None:
            row = LoggedRow(row.step, {**earlier.metrics, **row.metrics},
                            row.wall_time if row.wall_time is not None else earlier.wall_time,
                            row.tokens_seen if row.tokens_seen is not None else earlier.tokens_seen)
        merged[row.step] = row
    return merged


def _external_run_locked(run_id: int) -> Run:
    """The run, locked for this transaction; RunWriteRefused if Preflab runs it itself."""
    run = Run.objects.select_for_update().get(pk=run_id)
    if not run.is_external:
        raise RunWriteRefused(f"run {run_id} is a {run.kind} run that Preflab runs; only external runs (POST "
                              "/runs/external) take rows, samples, heartbeats and finish from a client")
    return run


def _not_running(run: Run) -> RunWriteRefused:
    return RunWriteRefused(f"run {run.pk} is {run.status}, no longer running; it takes no more writes")


def _storable_json(value: Any) -> Any:
    """Any JSON a client sent, as Postgres jsonb can hold it: non-finite floats spelled as the metrics spell them,
    NUL characters (which jsonb refuses) replaced."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        return {storable_text(str(key)): _storable_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_storable_json(item) for item in value]
    return encode_json_value(value)


def external_run_create(
    *, name: str, config: Mapping[str, Any], created_by: AbstractBaseUser | None, project_id: int | None = None,
    total_steps: int | None = None,
) -> Run:
    """A run a program outside Preflab logs through the API: running from now (its heartbeat too), never queued.

    Its config is any JSON object, stored as sent (it is shown and compared, never validated); `project_id` names
    the project whose data it trains on, if any."""
    _name_check(name)
    if not isinstance(config, Mapping):
        raise ValidationError({"config": f"expected a JSON object; got {_shown(config)}"})
    problem = length_problem(json.dumps(config, default=str), EXTERNAL_CONFIG_MAX_CHARS)
    if problem:
        raise ValidationError({"config": f"as JSON, the config {problem} (it is shown on the run's page)"})
    if total_steps is not None:
        _whole_number_field("total_steps", total_steps, minimum=1, maximum=STEP_MAX)
    data_source: dict[str, Any] = {"type": EXTERNAL_KIND}
    if project_id is not None:
        if not isinstance(project_id, int) or not selectors.project_reachable(project_id, user=created_by):
            raise ValidationError({"project_id": f"there is no project {_shown(project_id)}"})
        data_source["project_id"] = project_id
    now = timezone.now()
    return Run.objects.create(
        name=name.strip() or "external run", kind=EXTERNAL_KIND, config=_storable_json(dict(config)),
        data_source=data_source, status=Status.RUNNING, started_at=now, heartbeat_at=now, total_steps=total_steps,
        created_by=created_by,
    )


def _whole_number_field(field: str, value: Any, *, minimum: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValidationError({field: f"expected a whole number from {minimum} to {maximum:,}; got {_shown(value)}"})


def external_metrics_log(*, run_id: int, rows: Sequence[Any]) -> int:
    """Store a client's rows; the number of steps whose stored row changed.

    Idempotent by (run, step): a row for a stored step merges its metrics into the stored ones (a trainer logs
    train and eval metrics at one step in two calls), and a row equal to the stored one writes nothing, so a
    replayed request answers 0 even once the run has finished. Any other write to a run that is no longer running
    is RunWriteRefused. Non-finite values are stored; a null value means "no value at this step" and leaves a
    stored one alone. Progress, alerts and the run's metric names move as for our own runs."""
    logged = _merged_by_step(_logged_rows(rows))
    if not logged:
        return 0
    with transaction.atomic():
        run = _external_run_locked(run_id)
        stored = {row.step: row for row in MetricRow.objects.filter(run=run, step__in=list(logged))}
        now = time.time()
        changed = []
        for step, row in sorted(logged.items()):
            old = stored.get(step)
            metrics = {**(decode_json_value(old.metrics) if old else {}), **row.metrics}
            wall_time = row.wall_time if row.wall_time is not None else (old.wall_time if old else now)
            tokens = row.tokens_seen if row.tokens_seen is not None else (old.tokens_seen if old else run.tokens_seen)
            same = old is not None and (old.wall_time, old.tokens_seen, old.metrics) == (
                wall_time, tokens, encode_json_value(metrics))
            if not same:
                changed.append({"step": step, "wall_time": wall_time, "tokens_seen": tokens, "metrics": metrics})
        if run.status != Status.RUNNING:
            if changed:
                raise _not_running(run)
            return 0
        if not changed:
            run_heartbeat(run_id=run.pk)
            return 0
        names = set(run.metric_names).union(*(row["metrics"] for row in changed))
        if len(names) > RUN_METRIC_NAMES_MAX:
            raise RunWriteRefused(f"run {run.pk} would log {len(names):,} metric names; at most "
                                  f"{RUN_METRIC_NAMES_MAX:,} (each is a chart)")
        metric_rows_write(run_id=run.pk, rows=changed, progress_never_back=True)
    return len(changed)


def _logged_samples(samples: Sequence[Any]) -> list[dict[str, Any]]:
    _check_list(samples, field="samples", maximum=EXTERNAL_SAMPLES_MAX, per="a batch")
    parsed = []
    for index, sample in enumerate(samples):
        if not isinstance(sample, Mapping):
            raise ValidationError(f"sample {index}: expected an object with step, prompt and completion")
        unknown = sorted(set(sample) - {"step", "prompt", "completion", "rewards", "advantage"})
        if unknown:
            raise ValidationError(f"{_where(index, unknown[0], 'sample')}: unknown field; a sample has step, prompt, "
                                  "completion, rewards and advantage")
        step = _whole_number(sample.get("step"), _where(index, "step", "sample"), maximum=STEP_MAX)
        texts = {}
        for field, max_chars in (("prompt", PROMPT_MAX_CHARS), ("completion", RESPONSE_MAX_CHARS)):
            if not isinstance(sample.get(field), str):
                raise ValidationError(f"{_where(index, field, 'sample')}: expected text; got {_shown(sample.get(field))}")
            problem = length_problem(sample[field], max_chars)
            if problem:
                raise ValidationError(f"{_where(index, field, 'sample')}: the text {problem}")
            texts[field] = sample[field]
        rewards = sample.get("rewards")
        rewards = {} if rewards is None else rewards
        if not isinstance(rewards, Mapping):
            raise ValidationError(f"{_where(index, 'rewards', 'sample')}: expected an object of reward names to numbers")
        numbers = {}
        for name, value in rewards.items():
            name = _metric_name(name, _where(index, "rewards", "sample"))
            number = _logged_number(value, _where(index, f"rewards.{name}", "sample"))
            if number is not None:
                numbers[name] = number
        advantage = _logged_number(sample.get("advantage"), _where(index, "advantage", "sample"))
        parsed.append({"step": step, **texts, "rewards": numbers, "advantage": advantage})
    return parsed


def external_samples_log(*, run_id: int, batch_id: str, samples: Sequence[Any]) -> int:
    """Store a client's batch of samples once: a batch id already applied to the run writes nothing and answers
    0 (a retried request), even once the run has finished. The id is recorded in the samples' transaction."""
    if not isinstance(batch_id, str) or not batch_id.strip():
        raise ValidationError({"batch_id": "give the batch an id (a UUID the client makes), so a retry is recognised"})
    problem = typed_text_problem(batch_id, max_length=BATCH_ID_MAX_LENGTH)
    if problem:
        raise ValidationError({"batch_id": f"the batch id {problem}"})
    parsed = _logged_samples(samples)
    with transaction.atomic():
        run = _external_run_locked(run_id)
        if SampleBatch.objects.filter(run=run, batch_id=batch_id).exists():
            return 0
        if run.status != Status.RUNNING:
            raise _not_running(run)
        SampleBatch.objects.create(run=run, batch_id=batch_id, sample_count=len(parsed))
        samples_write(run_id=run.pk, samples=parsed)
        run_heartbeat(run_id=run.pk)
    return len(parsed)


def external_run_heartbeat(*, run_id: int) -> None:
    """The client is alive; RunWriteRefused if the run is not an external one, or no longer running."""
    with transaction.atomic():
        run = _external_run_locked(run_id)
        if not run_heartbeat(run_id=run.pk):
            raise _not_running(run)


def external_run_finish(*, run_id: int, status: str, error: str = "") -> Run:
    """The client's loop ended: succeeded, failed (with its error) or canceled (e.g. on cancel_requested).

    Finishing again with the status it already has is a replay (a retried request) and changes nothing; any other
    change of a finished run is RunWriteRefused."""
    if status not in FINISHED_STATUSES:
        raise ValidationError({"status": f"expected one of {', '.join(FINISHED_STATUSES)}; got {_shown(status)}"})
    if not isinstance(error, str):
        raise ValidationError({"error": f"expected text; got {_shown(error)}"})
    with transaction.atomic():
        run = _external_run_locked(run_id)
        if run.status == status:
            return run
        if run.status != Status.RUNNING:
            raise _not_running(run)
        if status == Status.FAILED and not error.strip():
            error = "the client reported the run failed, without a reason"
        error = _cut_to_bound(error, RUN_ERROR_MAX_CHARS)
        _transition(run.pk, status, only_from=Status.RUNNING, finished_at=timezone.now(), error=storable_text(error))
    run.refresh_from_db()
    return run


# --- periodic jobs ---------------------------------------------------------------------------------------

# A tick this fraction of a period or less after the last act is another beat's, and does nothing. Above one half,
# so two beats ticking at any phase act once per period between them; a quarter of a period is left for a tick's
# delivery to run late.
PERIODIC_CLAIM_FRACTION = 0.75
_NEVER = datetime(2000, 1, 1, tzinfo=UTC)


def periodic_job_claim(*, name: str, every_s: float) -> bool:
    """Whether this tick of the periodic job `name` should act: True (and the act recorded) unless the job acted
    less than PERIODIC_CLAIM_FRACTION of `every_s` ago. One conditional UPDATE, by the database's clock: of two beats
    ticking at once, exactly one gets it (Postgres re-checks the condition on the row the other one updated; SQLite
    has one writer)."""
    PeriodicJobClaim.objects.get_or_create(name=name, defaults={"acted_at": _NEVER})
    due = Now() - timedelta(seconds=every_s * PERIODIC_CLAIM_FRACTION)
    return bool(PeriodicJobClaim.objects.filter(name=name, acted_at__lte=due).update(acted_at=Now(), acts=F("acts") + 1))
