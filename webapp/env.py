"""Typed readers for settings that come from the environment.

Each reader fails at start with `ImproperlyConfigured` naming the variable and what is wrong with it, so a
typo in a deployment is a one-line error at boot rather than a surprise at the first request.
"""

import ipaddress
import os
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use one of 1/0, true/false, yes/no, on/off.")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer.") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}.")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}.")
    return value


def env_list(name: str, default: list[str], *, separator: str = ",") -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(separator) if item.strip()]


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """Django's SECURE_PROXY_SSL_HEADER from the name of the header a TLS-terminating proxy sets, as Django
    (`HTTP_X_FORWARDED_PROTO`) or as sent (`X-Forwarded-Proto`): a request is secure when it says `https`.
    Empty for none: trusting such a header without a proxy that overwrites it lets any client claim https."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    meta_name = raw.upper().replace("-", "_")
    if not meta_name.startswith("HTTP_"):
        meta_name = f"HTTP_{meta_name}"
    if not re.fullmatch(r"HTTP_[A-Z0-9_]+", meta_name):
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a header name: use e.g. HTTP_X_FORWARDED_PROTO (the header must say https).")
    return (meta_name, "https")


_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def env_host(name: str, default: str) -> str:
    """A host name or IP address other machines reach this one by (no scheme, no port); unset or empty: `default`."""
    raw = os.environ.get(name, "").strip()
    value = raw or default
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if len(value) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in value.removesuffix(".").split(".")):
        return value
    where = f"{name}={raw!r}" if raw else f"{name} is unset and this machine's host name {value!r}"
    raise ImproperlyConfigured(
        f"{where} is not a host name or an IP address: give the address other machines reach this one by, "
        "without a scheme or a port (e.g. 10.0.0.5 or gpu-node-1.cluster.local).")


def env_dir(name: str, default: Path, *, create: bool) -> Path:
    """A directory path; created when `create` is set, refused when it exists as something else."""
    path = Path(os.environ.get(name, str(default))).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ImproperlyConfigured(f"{name}={path} exists but is not a directory.")
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ImproperlyConfigured(f"{name}={path} cannot be created: {error.strerror}.") from None
    return path


def env_dirs(name: str, default: list[Path]) -> list[Path]:
    """A list of existing directories separated by the OS path separator (':' on Linux), like PATH."""
    raw = os.environ.get(name)
    if raw is None:
        return [path.resolve() for path in default]
    paths = [Path(item).expanduser().resolve() for item in raw.split(os.pathsep) if item.strip()]
    for path in paths:
        if not path.is_dir():
            raise ImproperlyConfigured(f"{name}: {path} is not an existing directory.")
    return paths


def database_from_url(name: str, url: str) -> dict:
    """A Django DATABASES entry from `sqlite:///abs/path.db` or `postgres://user:pass@host:port/db`."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # As dj-database-url: sqlite:///relative.db and sqlite:////absolute/path.db.
        db_path = unquote(parts.path)[1:]
        if not db_path or db_path == "/":
            raise ImproperlyConfigured(f"{name}={url!r}: a sqlite URL needs a file path, e.g. sqlite:////data/db.sqlite3.")
        return _sqlite_database(Path(db_path))
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise ImproperlyConfigured(f"{name}={url!r}: the database name is missing (postgres://host:5432/NAME).")
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"{name}={url!r}: the port is not a number.") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": database,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    raise ImproperlyConfigured(
        f"{name}={url!r}: unsupported scheme {parts.scheme!r}; use sqlite:///PATH or postgres://USER@HOST:PORT/NAME."
    )


CACHE_SOCKET_TIMEOUT_S = 1.0


def cache_from_url(name: str, url: str) -> dict:
    """A Django CACHES entry: empty for a cache in each process's memory, or `redis://host:6379/N` for one
    cache every web process shares (computed chart series are then computed once, not once per process)."""
    if not url:
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    if urlsplit(url).scheme in {"redis", "rediss"}:
        # a Redis that stops answering costs a request at most this long (webapp.caching computes without it)
        timeouts = {"socket_connect_timeout": CACHE_SOCKET_TIMEOUT_S, "socket_timeout": CACHE_SOCKET_TIMEOUT_S}
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url, "KEY_PREFIX": "preflab",
                "OPTIONS": timeouts}
    raise ImproperlyConfigured(f"{name}={url!r}: unsupported; leave it empty (memory of each process) or use redis://HOST:6379/N.")


def _sqlite_database(path: Path) -> dict:
    # WAL + a busy timeout + IMMEDIATE transactions: the web process and the worker write the same file, and
    # without these SQLite answers "database is locked" under the lightest concurrency.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # A file, not :memory:, so a worker process in a test can open the same test database.
        "TEST": {"NAME": str(path.with_name(f"test_{path.name}"))},
        "OPTIONS": {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
        },
    }
