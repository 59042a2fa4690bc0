"""Demo data for `make run`: the tiny arithmetic model, built under the first model root and registered."""

import subprocess
import sys

from django.conf import settings

from webapp.experiments.services import model_register

DEMO_MODEL_DIRECTORY = "tiny-arithmetic"


def seed_demo_data(stdout) -> None:
    directory = settings.MODEL_ROOTS[0] / DEMO_MODEL_DIRECTORY
    if not (directory / "config.json").is_file():
        stdout.write(f"building the tiny arithmetic model in {directory} (a few seconds)…")
        # A separate process: building needs torch, which the web process never imports.
        subprocess.run([sys.executable, str(settings.BASE_DIR / "manage.py"), "build_demo_model", str(directory)],
                       check=True)
    model = model_register(path=str(directory), name="tiny arithmetic (demo)")
    stdout.write(f"demo model '{model.name}' registered: {model.path}")
