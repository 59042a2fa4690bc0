"""Docker cannot run here, so check that docker-compose.yml agrees with the settings the code reads."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from webapp.env import database_from_url

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIRED_VARIABLES = {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS",
                      "PREFLAB_DATA_DIR", "PREFLAB_MODEL_ROOTS"}


# what an operator's .env gives the variables compose requires (`${NAME:?message}`)
REQUIRED_IN_DOT_ENV = {"SECRET_KEY": secrets.token_urlsafe(50), "POSTGRES_PASSWORD": "0123456789abcdef"}
COMPOSE_VARIABLE = re.compile(r"\$\{(\w+)(?:(:\?|:-)([^}]*))?\}")


def _compose() -> dict:
    return yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())


def _interpolated(value: str, dot_env: dict[str, str]) -> str:
    """`value` as compose reads it with `dot_env` as .env: `${NAME:-default}` falls back on its default,
    `${NAME:?message}` must be given."""

    def resolve(match: re.Match) -> str:
        name, kind, default = match.groups()
        if name in dot_env:
            return dot_env[name]
        if kind == ":?":
            raise AssertionError(f"compose would refuse to start: {default}")
        return default or ""

    return COMPOSE_VARIABLE.sub(resolve, str(value))


def _web_environment(dot_env: dict[str, str]) -> dict[str, str]:
    return _service_environment("web", dot_env)


def _service_environment(service: str, dot_env: dict[str, str]) -> dict[str, str]:
    environment = _compose()["services"][service]["environment"]
    return {name: _interpolated(value, dot_env) for name, value in environment.items()}


def _gpu_workers() -> dict[str, dict]:
    """The services whose Celery worker takes the gpu queue."""
    return {name: service for name, service in _compose()["services"].items()
            if "-Q" in service.get("command", []) and "gpu" in service["command"][service["command"].index("-Q") + 1]}


def _variables_read_by_settings() -> set[str]:
    source = (REPO_ROOT / "webapp" / "settings.py").read_text()
    return set(re.findall(r'env_\w+\(\s*"([A-Z_]+)"', source))


def test_the_services_of_a_deployment_are_there():
    assert {"postgres", "redis", "web", "worker"} <= set(_compose()["services"])


def test_postgres_keeps_its_data_and_has_a_healthcheck():
    postgres = _compose()["services"]["postgres"]
    assert any(volume.endswith(":/var/lib/postgresql/data") for volume in postgres["volumes"])
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_web_runs_gunicorn_on_the_wsgi_app_after_migrating():
    command = " ".join(_compose()["services"]["web"]["command"])
    assert "manage.py migrate" in command
    assert "gunicorn webapp.wsgi:application" in command


def test_worker_listens_on_the_gpu_queue_one_job_at_a_time_with_one_gpu_reserved():
    worker = _compose()["services"]["worker"]
    command = worker["command"]
    assert command[:4] == ["celery", "-A", "workers", "worker"]
    assert command[command.index("-Q") + 1] == "gpu"
    assert command[command.index("--concurrency") + 1] == "1"
    assert command[command.index("--pool") + 1] == "solo"
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


def test_one_documented_command_starts_either_the_single_gpu_or_the_multi_gpu_worker_never_both():
    gpu_workers = _gpu_workers()
    assert set(gpu_workers) == {"worker", "node-worker"}
    # a service without a profile starts with every profile: both forms have one, and not the same
    assert gpu_workers["worker"].get("profiles") == ["single-gpu"]
    assert gpu_workers["node-worker"].get("profiles") == ["multi-gpu"]
    documented = set(re.findall(r"docker compose --profile ([\w-]+) up", (REPO_ROOT / "README.md").read_text()))
    documented |= set(re.findall(r"docker compose --profile ([\w-]+) up", (REPO_ROOT / "docker-compose.yml").read_text()))
    assert documented == {"single-gpu", "multi-gpu"}
    for profile in documented:
        started = [name for name, service in gpu_workers.items() if profile in service["profiles"]]
        assert len(started) == 1, (profile, started)


def test_the_multi_gpu_variant_gives_one_worker_every_gpu_of_its_node_and_room_for_nccl():
    node_worker = _compose()["services"]["node-worker"]
    assert node_worker["profiles"] == ["multi-gpu"]  # started only when asked for, instead of `worker`
    assert node_worker["command"] == _compose()["services"]["worker"]["command"]
    devices = node_worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert node_worker["ipc"] == "host" and node_worker["shm_size"] == "16gb"


def test_web_and_workers_get_every_setting_and_only_settings_the_code_reads():
    read_by_settings = _variables_read_by_settings()
    assert read_by_settings >= REQUIRED_VARIABLES
    for name in ("web", "worker", "node-worker", "light-worker"):
        environment = _compose()["services"][name]["environment"]
        assert set(environment) >= REQUIRED_VARIABLES, name
        assert set(environment) <= read_by_settings, name


def test_the_deployment_urls_point_at_the_compose_services():
    environment = _web_environment(REQUIRED_IN_DOT_ENV)
    database = database_from_url("DATABASE_URL", environment["DATABASE_URL"])
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert database["HOST"] == "postgres" and database["NAME"] == "preflab"
    assert database["PASSWORD"] == REQUIRED_IN_DOT_ENV["POSTGRES_PASSWORD"]
    assert environment["CELERY_BROKER_URL"].startswith("redis://redis:6379")
    assert environment["DEBUG"] == "false"


def test_compose_refuses_to_start_without_a_postgres_password_or_a_secret_key():
    text = (REPO_ROOT / "docker-compose.yml").read_text()
    for name in ("POSTGRES_PASSWORD", "SECRET_KEY"):
        uses = [match.group(2) for match in COMPOSE_VARIABLE.finditer(text) if match.group(1) == name]
        assert uses and set(uses) == {":?"}, f"{name} must be required everywhere, found {uses}"
    assert "POSTGRES_PASSWORD" in _compose()["services"]["postgres"]["environment"]
    for name in REQUIRED_IN_DOT_ENV:
        with pytest.raises(AssertionError, match=f"compose would refuse to start: set {name}"):
            _web_environment({key: value for key, value in REQUIRED_IN_DOT_ENV.items() if key != name})


@pytest.mark.parametrize("service", ["web", "node-worker"])
def test_manage_py_check_deploy_is_clean_with_the_compose_environment(tmp_path, service):
    # the gpu workers' own settings (PREFLAB_NODE_ADDRESS left empty: the container's host name) pass as well
    environment = _service_environment(service, REQUIRED_IN_DOT_ENV)
    # the container's own paths, which exist only in it, are replaced by directories here
    environment.update(PREFLAB_DATA_DIR=str(tmp_path), PREFLAB_MODEL_ROOTS=str(tmp_path))
    outside = {name: value for name, value in os.environ.items() if name not in _variables_read_by_settings()}
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                            cwd=REPO_ROOT, env={**outside, **environment}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
    assert environment["DEBUG"] == "false" and environment["SECURE_PROXY_SSL_HEADER"] == "HTTP_X_FORWARDED_PROTO"


def test_the_web_server_is_reachable_from_this_host_only_for_its_tls_proxy():
    assert _compose()["services"]["web"]["ports"] == ["127.0.0.1:8000:8000"]


def test_the_image_runs_as_an_unprivileged_user_who_owns_the_data_directory():
    instructions = [line.split(None, 1) for line in (REPO_ROOT / "Dockerfile").read_text().splitlines()
                    if line.strip() and not line.startswith("#")]
    users = [argument.strip() for keyword, argument in instructions if keyword == "USER"]
    assert users and users[-1] not in {"root", "0"} and not users[-1].startswith(("root:", "0:"))
    last_user = max(index for index, (keyword, _) in enumerate(instructions) if keyword == "USER")
    assert all(keyword != "RUN" for keyword, _ in instructions[last_user:]), "nothing runs as root after USER"
    creation = " ".join(argument for keyword, argument in instructions if keyword == "RUN")
    assert f"useradd --no-log-init --create-home --uid 10001 {users[-1]}" in creation
    assert f"chown {users[-1]}:{users[-1]} /data" in creation
