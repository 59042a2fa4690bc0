"""Helpers shared by the experiments tests (also imported by tests/e2e/test_experiments_*.py)."""

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from django import forms
from django.conf import settings

from webapp.experiments import services
from webapp.experiments.models import ModelRef, Run
from webapp.experiments.services import model_register

ARITHMETIC = {"type": "arithmetic", "level": 1, "size": 32}


def register_tiny_model(tiny_model_dir: Path) -> ModelRef:
    """The session's tiny model, registered with its parent as a model root (override MODEL_ROOTS first)."""
    return model_register(path=str(tiny_model_dir), name="tiny arithmetic")


def tiny_model_roots(tiny_model_dir: Path) -> list[Path]:
    return [*settings.MODEL_ROOTS, Path(tiny_model_dir).parent.resolve()]


def small_config(model: ModelRef, **overrides) -> dict:
    """A reward-model config that trains in seconds on the tiny model."""
    return {"model": model.path, "batch_size": 4, "max_length": 64, "max_prompt_length": 16, "max_steps": 6,
            "checkpoint_every": 2, **overrides}


def wait_for(
    predicate: Callable[[], bool], *, timeout_s: float, what: str | Callable[[], str], poll_s: float = 0.2
) -> None:
    """`what` may be a callable so that what it describes (a worker's log, say) is read at the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    description = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout_s} s waiting for {description}")


def run_status(run_id: int) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def finished_run_with_checkpoints(model: ModelRef, model_dir: Path, created_by, steps=(2, 4, 6)) -> Run:
    """A failed SFT run (queue it nowhere: patch webapp.queueing.publish first) with a checkpoint directory per step
    under settings.RUNS_DIR, registered as its sink would, and a metric row per step up to the last."""
    run = services.run_create(kind="sft", config=small_config(model), data_source=ARITHMETIC,
                              created_by=created_by, name="to resume")
    for step in steps:
        directory = Path(run.config["output_dir"]) / "checkpoints" / f"step-{step}"
        directory.mkdir(parents=True)
        (directory / "model.safetensors").write_bytes(b"w" * 1000 * step)
        shutil.copy(Path(model_dir) / "config.json", directory / "config.json")
        services.model_register_checkpoint(run_id=run.pk, step=step, path=str(directory))
    services.metric_rows_write(run_id=run.pk, rows=[
        {"step": step, "wall_time": 0.0, "tokens_seen": step, "metrics": {"loss": 1.0}}
        for step in range(1, max(steps) + 1)])
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED)
    return run


def as_the_browser_posts(form: forms.Form) -> dict[str, str]:
    """What a browser submits for `form` as it is first shown: every field's initial value (a ticked box as "on",
    an unticked one not at all; file fields left out)."""
    posted = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(field, forms.BooleanField):
            if value:
                posted[name] = "on"
        elif not isinstance(field, forms.FileField):
            posted[name] = "" if value is None else str(value)
    return posted
