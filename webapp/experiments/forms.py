"""The launch form, built from the trainer's config dataclass of the chosen run kind (trainer/config.py)."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

from django import forms
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from trainer.config import SEED_MAX
from trainer.kinds import run_kind
from trainer.rewards import REWARD_FUNCTIONS
from webapp.annotation.feedback import BINARIZATIONS, DEFAULT_BINARIZATION, DEFAULT_SEED
from webapp.experiments import selectors
from webapp.experiments.models import ModelRef
from webapp.experiments.services import MODEL_FIELDS, SERVICE_FIELDS, field_architectures
from webapp.text import counted
from webapp.text_bounds import CONFIG_TEXT_MAX_CHARS
from webapp.uploads import limit_text

REWARD_PREFIX = "reward__"
DATA_SOURCE_CHOICES = [
    ("arithmetic", "Arithmetic task (built in)"),
    ("project_pairs", "A project's feedback (pairs; KTO rows for KTO)"),
    ("project_prompts", "A project's prompts"),
    ("upload", "Upload a JSONL file"),
]
GROUP_ORDER = ("model", "optimisation", "processes", "data", "logging", "advanced")
# the "data" group holds sequence lengths and sampling settings; the data source has its own card
GROUP_TITLES = {"data": "Sequences and sampling", "processes": "Processes (data parallel, sharded)"}
OPEN_GROUPS = ("model", "optimisation")
# the fields above the config groups, in the order the page shows them
SOURCE_FIELDS = ("name", "data_source", "level", "size", "project", "aggregation", "binarization", "binarization_seed",
                 "upload")


def _projects(user: AbstractBaseUser) -> list[tuple[int, str, str, int]]:
    try:
        from webapp.annotation.selectors import projects_for_training
    except ImportError:
        return []
    return list(projects_for_training(user))


def _aggregation_choices(user: AbstractBaseUser) -> list[tuple[str, str]]:
    try:
        from webapp.annotation.forms import aggregation_choices
        from webapp.annotation.selectors import pair_annotators_for_training
    except ImportError:
        return [("all", "all")]
    return aggregation_choices(pair_annotators_for_training(user))


def _model_label(model: ModelRef) -> str:
    if model.run_id is not None:
        return f"{model.name} ({model.get_architecture_display()})"
    return f"{model.name} ({model.get_source_display()}, {model.get_architecture_display()})"


def _model_choices(architectures: tuple[str, ...], *, blank: str, user: AbstractBaseUser) -> list:
    """A blank first (nothing chosen for the user), base models, then each run's checkpoints newest first (those of
    the runs `user` sees)."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for model in selectors.models_offered(architectures, user=user):
        group = f"run #{model.run.pk} {model.run.name}" if model.run_id is not None else "base models"
        groups.setdefault(group, []).append((model.path, _model_label(model)))
    return [("", blank), *groups.items()]


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [option for option in typing.get_args(annotation) if option is not type(None)]
        return options[0], len(options) < len(typing.get_args(annotation))
    return annotation, False


def _form_field(kind: str, name: str, annotation: Any, dataclass_field: dataclasses.Field) -> forms.Field:
    base, optional = _unwrap_optional(annotation)
    help_text = dataclass_field.metadata.get("help", "")
    if name in MODEL_FIELDS:
        required = name == "model"
        # the choices are the user's: LaunchForm sets them
        return forms.ChoiceField(
            required=required, help_text=help_text,
            error_messages={"required": "choose a model: this run needs one to start from"},
        )
    if base is bool:
        return forms.BooleanField(required=False, help_text=help_text)
    if typing.get_origin(base) is Literal:
        # a choice left out of a posted form (an older client, a script) takes the trainer's default
        return forms.ChoiceField(choices=[(value, value) for value in typing.get_args(base)], help_text=help_text,
                                 required=dataclass_field.default is dataclasses.MISSING)
    if base is int:
        return forms.IntegerField(required=False, help_text=help_text)
    if base is float:
        return forms.FloatField(required=False, help_text=help_text)
    if typing.get_origin(base) is list:
        return forms.CharField(required=False, max_length=CONFIG_TEXT_MAX_CHARS, help_text=f"{help_text} (comma-separated)")
    return forms.CharField(required=not optional and dataclass_field.default is dataclasses.MISSING,
                           max_length=CONFIG_TEXT_MAX_CHARS, help_text=help_text)


def visible_config_fields(kind: str) -> list[dataclasses.Field]:
    return [
        f for f in dataclasses.fields(run_kind(kind).config_class)
        if not f.metadata.get("test_only") and f.name not in SERVICE_FIELDS and f.name != "rewards"
    ]


def _initial_value(value: Any) -> Any:
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return value


class LaunchForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="A name to find the run by.")
    data_source = forms.ChoiceField(choices=DATA_SOURCE_CHOICES, initial="arithmetic")
    level = forms.TypedChoiceField(choices=[(1, "1"), (2, "2"), (3, "3")], coerce=int, initial=1, required=False,
                                   help_text="Arithmetic level: 1 = a + b, 2 = two operations, 3 = three.")
    size = forms.IntegerField(min_value=1, initial=64, required=False, help_text="Arithmetic problems to train on.")
    project = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    aggregation = forms.ChoiceField(required=False, initial="all", help_text=(
        "A project's pairs: how annotators who disagree on a pair are combined (the README, «Annotators who disagree»)."))
    binarization = forms.ChoiceField(
        required=False, initial=DEFAULT_BINARIZATION, choices=[(name, name) for name in BINARIZATIONS],
        help_text="A project's ratings as pairs: chosen = the best mean rating, rejected = a random lower-rated "
                  "response (seeded) or the worst.")
    binarization_seed = forms.IntegerField(required=False, min_value=0, max_value=SEED_MAX, initial=DEFAULT_SEED,
                                           help_text="The seed of the random binarization of ratings.")
    upload = forms.FileField(required=False, help_text="JSONL; one object per line with the fields the kind needs.")

    def __init__(self, *args: Any, kind: str, user: AbstractBaseUser, initial_config: dict[str, Any] | None = None,
                 kept_upload: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """`user`: who launches; the projects and checkpoints offered are those they see. `kept_upload`: a forked
        run's uploaded data source, trained on unless another file is chosen (selectors.inherited_upload)."""
        super().__init__(*args, **kwargs)
        self.kind = kind
        self.kept_upload = kept_upload
        self.fields["upload"].help_text += f" At most {limit_text()}."
        self.fields["aggregation"].choices = _aggregation_choices(user)
        if kept_upload:
            self.fields["upload"].help_text = (
                f"Kept from the parent run: {kept_upload.get('name', 'its file')}"
                f"{', ' + counted(kept_upload['rows'], 'row') if kept_upload.get('rows') else ''}. "
                f"Choose a file only to train on another. {self.fields['upload'].help_text}")
        self.fields["project"].choices = [("", "— choose —")] + [
            (project_id, f"{name} ({feedback}, {counted(prompts, 'prompt')})")
            for project_id, name, feedback, prompts in _projects(user)
        ]
        cls = run_kind(kind).config_class
        hints = typing.get_type_hints(cls)
        self.config_groups: dict[str, list[str]] = {}
        defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        defaults.update({f.name: f.default_factory() for f in dataclasses.fields(cls)
                         if f.default_factory is not dataclasses.MISSING})
        values = {**defaults, **(initial_config or {})}
        for f in visible_config_fields(kind):
            self.fields[f.name] = _form_field(kind, f.name, hints[f.name], f)
            if values.get(f.name) is not None:
                self.initial.setdefault(f.name, _initial_value(values[f.name]))
            if f.name in MODEL_FIELDS:
                blank = "— choose a model —" if self.fields[f.name].required else "— none —"
                self.fields[f.name].choices = _model_choices(field_architectures(kind, f.name), blank=blank, user=user)
            self.config_groups.setdefault(f.metadata.get("group", "advanced"), []).append(f.name)
        if run_kind(kind).online:
            weights = values.get("rewards") or {}
            for reward_name, (_, help_text) in REWARD_FUNCTIONS.items():
                field_name = REWARD_PREFIX + reward_name
                self.fields[field_name] = forms.FloatField(required=False, help_text=help_text, label=reward_name)
                self.initial.setdefault(field_name, weights.get(reward_name))

    def grouped_config_fields(self) -> list[tuple[str, str, list[forms.BoundField], bool]]:
        """(group, its title, its fields, whether it is shown open) in GROUP_ORDER: the model and optimisation
        groups are open, and so is any group holding an error."""
        grouped = []
        for group in GROUP_ORDER:
            if group not in self.config_groups:
                continue
            fields = [self[name] for name in self.config_groups[group]]
            shown_open = group in OPEN_GROUPS or any(field.errors for field in fields)
            grouped.append((group, GROUP_TITLES.get(group, group.capitalize()), fields, shown_open))
        return grouped

    def error_summary(self) -> list[tuple[str, str, str]]:
        """(the field's element id, its label, the message) of every error in the order the page shows the
        fields; errors of no field come first with an empty id."""
        shown_order = [*SOURCE_FIELDS, *(field.name for field in self.reward_fields()),
                       *(name for group in GROUP_ORDER for name in self.config_groups.get(group, []))]
        summary = [("", "", message) for message in self.non_field_errors()]
        for name in shown_order:
            bound = self[name]
            summary.extend((bound.id_for_label, str(bound.label), message) for message in bound.errors)
        return summary

    def reward_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name.startswith(REWARD_PREFIX)]

    def config(self) -> dict[str, Any]:
        """The config dict of the visible fields; an empty number leaves the trainer's default."""
        hints = typing.get_type_hints(run_kind(self.kind).config_class)
        config: dict[str, Any] = {}
        for f in visible_config_fields(self.kind):
            value = self.cleaned_data.get(f.name)
            base, optional = _unwrap_optional(hints[f.name])
            if typing.get_origin(base) is list:
                config[f.name] = [item.strip() for item in (value or "").split(",") if item.strip()]
            elif value in (None, ""):
                if optional:
                    config[f.name] = None
            else:
                config[f.name] = value
        if run_kind(self.kind).online:
            config["rewards"] = {
                name.removeprefix(REWARD_PREFIX): value
                for name, value in self.cleaned_data.items()
                if name.startswith(REWARD_PREFIX) and value is not None
            }
        return config

    def data_source_value(self) -> dict[str, Any]:
        """The data source as stored on the run (an upload is stored by the service, see upload_store)."""
        source = self.cleaned_data["data_source"]
        if source == "arithmetic":
            return {"type": "arithmetic", "level": self.cleaned_data.get("level") or 1,
                    "size": self.cleaned_data.get("size")}
        if source == "project_pairs":
            return {"type": source, "project_id": self.cleaned_data.get("project"),
                    "aggregation": self.cleaned_data.get("aggregation") or "all", **self._ratings_binarization()}
        if source == "project_prompts":
            return {"type": source, "project_id": self.cleaned_data.get("project")}
        return {"type": "upload"}

    def _ratings_binarization(self) -> dict[str, Any]:
        """The ratings' binarization, stored only where it is not the default (a source without it is the default)."""
        options = {"binarization": self.cleaned_data.get("binarization") or DEFAULT_BINARIZATION,
                   "binarization_seed": self.cleaned_data.get("binarization_seed")}
        if options["binarization_seed"] is None:
            options["binarization_seed"] = DEFAULT_SEED
        defaults = {"binarization": DEFAULT_BINARIZATION, "binarization_seed": DEFAULT_SEED}
        return {key: value for key, value in options.items() if value != defaults[key]}

    # set when the job queue could not take the launch: the form itself was fine
    queue_unavailable = False

    def add_service_errors(self, error: ValidationError) -> None:
        if not hasattr(error, "error_dict"):  # about the launch as a whole (e.g. the job queue is unreachable)
            self.queue_unavailable = getattr(error, "code", None) == "queue_unavailable"
            self.add_error(None, error.messages)
            return
        for field, messages in error.message_dict.items():
            # the service names a reward as rewards.<name>; the form shows each reward as its own field
            if field.startswith("rewards.") and REWARD_PREFIX + field.removeprefix("rewards.") in self.fields:
                field = REWARD_PREFIX + field.removeprefix("rewards.")
            if field in self.fields:
                self.add_error(field, messages)
            else:
                self.add_error(None, [f"{field}: {message}" for message in messages])
