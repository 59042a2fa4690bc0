"""Docker cannot run here, so check that docker-compose.yml agrees with the settings the code reads."""

import re
from pathlib import Path

import yaml

from webapp.env import database_from_url

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIRED_VARIABLES = {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS",
                      "PREFLAB_DATA_DIR", "PREFLAB_MODEL_ROOTS"}


def _compose() -> dict:
    return yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())


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


def test_web_and_workers_get_every_setting_and_only_settings_the_code_reads():
    read_by_settings = _variables_read_by_settings()
    assert read_by_settings >= REQUIRED_VARIABLES
    for name in ("web", "worker", "light-worker"):
        environment = _compose()["services"][name]["environment"]
        assert set(environment) >= REQUIRED_VARIABLES, name
        assert set(environment) <= read_by_settings, name


def test_the_deployment_urls_point_at_the_compose_services():
    environment = _compose()["services"]["web"]["environment"]
    database = database_from_url("DATABASE_URL", environment["DATABASE_URL"].replace("${POSTGRES_PASSWORD:-preflab}", "pw"))
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert database["HOST"] == "postgres" and database["NAME"] == "preflab"
    assert environment["CELERY_BROKER_URL"].startswith("redis://redis:6379")
    assert environment["DEBUG"] == "false"
