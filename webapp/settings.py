"""Django settings. Everything that differs between machines comes from the environment (see README).

With no variables set this is the embedded default: SQLite (WAL) and a filesystem Celery broker inside
PREFLAB_DATA_DIR, so the web process and a real worker process talk with nothing else installed.
"""

from pathlib import Path

import plotly

from webapp.env import (
    cache_from_url,
    database_from_url,
    env_bool,
    env_dir,
    env_dirs,
    env_float,
    env_int,
    env_list,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DATA_DIR = env_dir("PREFLAB_DATA_DIR", BASE_DIR / "var", create=True)
MODEL_ROOTS = env_dirs("PREFLAB_MODEL_ROOTS", [DATA_DIR / "models"])
RUNS_DIR = DATA_DIR / "runs"

DEBUG = env_bool("DEBUG", True)
_INSECURE_DEV_KEY = "preflab-insecure-dev-key-set-SECRET_KEY-in-production"
SECRET_KEY = env_str("SECRET_KEY", _INSECURE_DEV_KEY if DEBUG else "")
if not SECRET_KEY:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("SECRET_KEY is required when DEBUG is off (set it to a long random string).")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "webapp",
    "webapp.accounts",
    "webapp.annotation",
    "webapp.experiments",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "webapp.middleware.RefuseNulInQuery",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"
ASGI_APPLICATION = "webapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.accounts.context_processors.roles",
                "webapp.navigation.navigation",
            ],
            "builtins": ["template_partials.templatetags.partials"],
        },
    },
]

# DATA_DIR is absolute, so this is sqlite://// + the path: an absolute path, as dj-database-url reads it.
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'preflab.sqlite3'}")
DATABASES = {"default": database_from_url("DATABASE_URL", DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
# plotly.js is served from the copy the plotly package ships: no CDN, GPU clusters are often offline.
STATICFILES_DIRS = [BASE_DIR / "static", ("plotly", Path(plotly.__file__).parent / "package_data")]
WHITENOISE_USE_FINDERS = True
DATA_UPLOAD_MAX_MEMORY_SIZE = 50 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024

# Celery. The embedded default needs no server: kombu's filesystem transport and a file result backend.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
_BROKER_DIR = DATA_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR / "queue"),
        "data_folder_out": str(_BROKER_DIR / "queue"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        "control_folder": str(_BROKER_DIR / "control"),
        "store_processed": False,
    }
    (DATA_DIR / "results").mkdir(exist_ok=True)
    _DEFAULT_RESULT_BACKEND = f"file://{DATA_DIR / 'results'}"
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {}
    _DEFAULT_RESULT_BACKEND = CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
if not CELERY_BROKER_URL.startswith(("filesystem://", "redis://", "rediss://", "amqp://", "memory://")):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL={CELERY_BROKER_URL!r}: unsupported; use filesystem:// (embedded), redis://HOST:6379/0 or amqp://."
    )
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", _DEFAULT_RESULT_BACKEND) or None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)

CACHES = {"default": cache_from_url("CACHE_URL", env_str("CACHE_URL", ""))}

# A run whose heartbeat is older than this is considered dead (its worker was killed) and marked failed.
PREFLAB_HEARTBEAT_TIMEOUT_S = env_float("PREFLAB_HEARTBEAT_TIMEOUT_S", 60.0, minimum=1.0)
PREFLAB_METRICS_MAX_POINTS = env_int("PREFLAB_METRICS_MAX_POINTS", 2000, minimum=10)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"levelled": {"format": "[{asctime}] {levelname} {name}: {message}", "style": "{"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "levelled"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # The embedded filesystem broker has no host, and kombu warns about that on every connection.
    "loggers": {"kombu.connection": {"level": "ERROR"}},
}
