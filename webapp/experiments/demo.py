"""Demo data for `make run`: the tiny arithmetic model, built under the first model root and registered, and a
queued SFT run of it, so the first visit finds a run to watch live and, once it ends, an SFT checkpoint to
start GRPO or PPO from."""

import subprocess
import sys

from django.conf import settings
from django.contrib.auth.models import User

from trainer.builtin_datasets import arithmetic
from webapp.experiments.models import Run
from webapp.experiments.services import model_register, run_create

DEMO_MODEL_DIRECTORY = "tiny-arithmetic"
DEMO_SFT_RUN_NAME = "demo: SFT of the tiny model on level-1 arithmetic"
# the trainer's SFT recipe for this model, with held-out accuracy and samples on the charts as it learns
DEMO_SFT_SETTINGS = {**arithmetic.TINY_MODEL_SFT_SETTINGS, "eval_every": 25, "sample_every": 50}


def seed_demo_data(stdout) -> None:
    directory = settings.MODEL_ROOTS[0] / DEMO_MODEL_DIRECTORY
    if not (directory / "config.json").is_file():
        stdout.write(f"building the tiny arithmetic model in {directory} (a few seconds)…")
        # A separate process: building needs torch, which the web process never imports.
        subprocess.run([sys.executable, str(settings.BASE_DIR / "manage.py"), "build_demo_model", str(directory)],
                       check=True)
    model = model_register(path=str(directory), name="tiny arithmetic (demo)")
    stdout.write(f"demo model '{model.name}' registered: {model.path}")
    existing = Run.objects.filter(name=DEMO_SFT_RUN_NAME).first()
    if existing is not None:
        stdout.write(f"demo run #{existing.pk} exists ({existing.status}): {existing.name}")
        return
    run = run_create(
        kind="sft",
        config={"model": model.path, **DEMO_SFT_SETTINGS},
        data_source={"type": "arithmetic", "level": 1, "size": len(arithmetic.problems(1, "train"))},
        created_by=User.objects.filter(username="researcher").first(),
        name=DEMO_SFT_RUN_NAME,
    )
    stdout.write(f"demo run #{run.pk} queued: {run.name} (the worker starts it)")
