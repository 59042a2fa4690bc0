"""The model registry: the one way a model is named (model_resolve), registration, and the checkpoints runs
write."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from trainer.kinds import run_kind
from trainer.modeling.model_names import is_hub_id, looks_local
from webapp.experiments import selectors
from webapp.experiments.models import MODEL_FIELDS, ModelRef, Run
from webapp.text import typed_text_problem

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
