"""The web process loads every URL module and view without torch or transformers, so pages start fast and stay small."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, pkgutil, sys
import django
django.setup()
from django.urls import get_resolver
resolver = get_resolver()
resolver.url_patterns  # imports every urls module and, through them, every view module
for module in pkgutil.walk_packages(["webapp"], prefix="webapp."):
    importlib.import_module(module.name)
import workers.tasks  # the default-queue worker loads its tasks without torch too
heavy = sorted(name for name in ("torch", "transformers", "tokenizers", "peft") if name in sys.modules)
print("HEAVY:" + ",".join(heavy))
"""


def test_web_process_imports_no_torch_or_transformers():
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120, env={"DJANGO_SETTINGS_MODULE": "webapp.settings", "PATH": "/usr/bin:/bin",
                                              "PREFLAB_DATA_DIR": str(REPO_ROOT / "var" / "import-probe")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "HEAVY:"
