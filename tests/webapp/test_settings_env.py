import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp.env import cache_from_url, database_from_url, env_bool, env_dirs, env_host, env_int

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_sqlite_url_gives_wal_immediate_transactions_and_a_busy_timeout(tmp_path):
    db = database_from_url("DATABASE_URL", f"sqlite:///{tmp_path}/x.sqlite3")
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == f"{tmp_path}/x.sqlite3"
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]
    assert "busy_timeout" in db["OPTIONS"]["init_command"]


def test_postgres_url_is_split_into_parts():
    db = database_from_url("DATABASE_URL", "postgres://ann:s%40cret@db.example:6543/preflab?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "ann", "s@cret", "db.example", "6543", "preflab")
    assert db["OPTIONS"] == {"sslmode": "require"}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://x/y", "unsupported scheme 'mysql'"),
        ("postgres://host:5432/", "database name is missing"),
        ("postgres://host:port/db", "port is not a number"),
        ("sqlite://", "needs a file path"),
    ],
)
def test_bad_database_url_names_the_variable_and_the_problem(url, message):
    with pytest.raises(ImproperlyConfigured, match=message) as error:
        database_from_url("DATABASE_URL", url)
    assert "DATABASE_URL" in str(error.value)


def test_bad_boolean_and_integer_name_the_variable(monkeypatch):
    monkeypatch.setenv("DEBUG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="DEBUG='maybe' is not a boolean"):
        env_bool("DEBUG", True)
    monkeypatch.setenv("PREFLAB_METRICS_MAX_POINTS", "lots")
    with pytest.raises(ImproperlyConfigured, match="PREFLAB_METRICS_MAX_POINTS='lots' is not an integer"):
        env_int("PREFLAB_METRICS_MAX_POINTS", 2000)


def test_model_roots_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("PREFLAB_MODEL_ROOTS", f"{tmp_path}:{tmp_path / 'missing'}")
    with pytest.raises(ImproperlyConfigured, match="PREFLAB_MODEL_ROOTS: .*missing is not an existing directory"):
        env_dirs("PREFLAB_MODEL_ROOTS", [])


@pytest.mark.parametrize("value", ["10.0.0.5", "::1", "gpu-node-1", "gpu-node-1.cluster.local"])
def test_a_node_address_is_a_host_name_or_an_ip_address(monkeypatch, value):
    monkeypatch.setenv("PREFLAB_NODE_ADDRESS", value)
    assert env_host("PREFLAB_NODE_ADDRESS", "this-machine") == value
    monkeypatch.setenv("PREFLAB_NODE_ADDRESS", "")
    assert env_host("PREFLAB_NODE_ADDRESS", "this-machine") == "this-machine"


@pytest.mark.parametrize("value", ["10.0.0.5:29500", "tcp://10.0.0.5", "gpu node", "-node", "node_1"])
def test_a_bad_node_address_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("PREFLAB_NODE_ADDRESS", value)
    with pytest.raises(ImproperlyConfigured, match=f"PREFLAB_NODE_ADDRESS='{value}' is not a host name or an IP "
                                                   "address: .* without a scheme or a port"):
        env_host("PREFLAB_NODE_ADDRESS", "this-machine")


def _django_check(env_overrides: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items()
           if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "DEBUG", "SECRET_KEY"}}
    env.update(PREFLAB_DATA_DIR=str(tmp_path), **env_overrides)
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_app_refuses_to_start_with_a_bad_variable_and_says_which(tmp_path):
    result = _django_check({"CELERY_BROKER_URL": "kafka://nowhere"}, tmp_path)
    assert result.returncode != 0
    assert "CELERY_BROKER_URL='kafka://nowhere': unsupported" in result.stderr


def test_production_mode_requires_a_secret_key(tmp_path):
    result = _django_check({"DEBUG": "false"}, tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in result.stderr


def test_no_variables_gives_the_embedded_default(tmp_path):
    env = {key: value for key, value in os.environ.items()
           if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "DEBUG", "SECRET_KEY"}}
    env["PREFLAB_DATA_DIR"] = str(tmp_path)
    code = ("import django; django.setup(); from django.conf import settings as s; "
            "print(s.DATABASES['default']['ENGINE'], s.DATABASES['default']['NAME'], s.CELERY_BROKER_URL, "
            "s.CELERY_RESULT_BACKEND)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                            env={**env, "DJANGO_SETTINGS_MODULE": "webapp.settings"}, timeout=120)
    assert result.returncode == 0, result.stderr
    engine, name, broker, backend = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert name == f"{tmp_path}/preflab.sqlite3"
    assert broker == "filesystem://"
    assert backend == f"file://{tmp_path}/results"


def test_cache_url_gives_each_process_its_memory_or_a_shared_redis(tmp_path):
    assert cache_from_url("CACHE_URL", "")["BACKEND"].endswith("LocMemCache")
    shared = cache_from_url("CACHE_URL", "redis://cache.example:6379/1")
    assert shared["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert shared["LOCATION"] == "redis://cache.example:6379/1"
    with pytest.raises(ImproperlyConfigured, match="CACHE_URL='memcached://x': unsupported"):
        cache_from_url("CACHE_URL", "memcached://x")
    result = _django_check({"CACHE_URL": "memcached://x"}, tmp_path)
    assert result.returncode != 0 and "CACHE_URL='memcached://x': unsupported" in result.stderr
