"""The client is its own package: requests is its only dependency, and importing it (runs, journal, metric names)
loads neither Django nor torch, transformers or datasets; the token shows in no repr."""

import subprocess
import sys
import tomllib

import pytest
from preflab_client import Client

from tests.conftest import REPO_ROOT

HEAVY = ("django", "torch", "transformers", "datasets", "trl", "webapp", "trainer")


def test_the_package_depends_on_requests_only():
    project = tomllib.loads((REPO_ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    assert project["name"] == "preflab-client"
    assert [requirement.split(">")[0] for requirement in project["dependencies"]] == ["requests"]
    assert set(project["optional-dependencies"]) == {"datasets", "transformers", "system"}


def test_importing_the_client_loads_no_heavy_package(tmp_path):
    code = ("import sys; import preflab_client, preflab_client.runs, preflab_client.outbox, preflab_client.metric_names, "
            "preflab_client.system_metrics; "
            f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))")
    # run from an empty directory so that the repository's own packages are not on the path
    completed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


def test_the_token_is_in_no_repr():
    token = "pfl_" + "s3cret" * 6
    client = Client("http://127.0.0.1:9/api/v1/", token)
    assert client.url == "http://127.0.0.1:9"
    assert token not in repr(client) and token not in str(vars(client).get("url"))


def test_url_and_token_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("PREFLAB_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("PREFLAB_TOKEN", "pfl_" + "t" * 40)
    assert Client().url == "http://127.0.0.1:9"
    monkeypatch.delenv("PREFLAB_TOKEN")
    with pytest.raises(ValueError, match="PREFLAB_TOKEN"):
        Client()
