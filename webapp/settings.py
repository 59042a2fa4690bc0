"""Django settings. Everything that differs between machines comes from the environment (see README).

With no variables set this is the embedded default: SQLite (WAL) and a filesystem Celery broker inside
PREFLAB_DATA_DIR, so the web process and a real worker process talk with nothing else installed.
"""

import socket
from datetime import timedelta
from pathlib import Path

import plotly

from webapp.env import (
    cache_from_url,
    database_from_url,
    env_bool,
    env_dir,
    env_dirs,
    env_float,
    env_host,
    env_int,
    env_list,
    env_proxy_ssl_header,
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

# HTTPS, for a deployment behind a TLS-terminating proxy (docker-compose.yml sets them all). Off by default:
# `make run` serves plain HTTP on this machine, where secure cookies would never come back.
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# the container's health check asks over plain HTTP from inside the container
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)

# Every response says where a page may load from: this server only, no inline script or style, no eval
# (webapp.middleware.ContentSecurityPolicy; README, "Configuration").
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    # data: images are the icons inside the API docs page's stylesheet (django-ninja's Swagger UI); an image runs
    # no script and, from data:, loads nothing from elsewhere
    "img-src 'self' blob: data:",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])
CONTENT_SECURITY_POLICY_REPORT_ONLY = env_bool("PREFLAB_CSP_REPORT_ONLY", False)

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
    "axes",
    "ninja",
    "webapp",
    "webapp.accounts",
    "webapp.annotation",
    "webapp.experiments",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.middleware.ContentSecurityPolicy",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "webapp.middleware.RefuseNulInQuery",
    "webapp.uploads.UploadLimitMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # last, as axes asks: it turns a refused login into the lockout page
    "axes.middleware.AxesMiddleware",
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

# Login throttling (django-axes), on /accounts/login/ and /admin/login/ alike: a username is locked after
# PREFLAB_LOGIN_FAILURES_PER_USER failures from anywhere, an address after PREFLAB_LOGIN_FAILURES_PER_ADDRESS
# failures for any usernames (more: a team behind one NAT shares it), each for the lockout time.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_HANDLER = "webapp.accounts.throttling.PerUserAndPerAddressHandler"
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_FAILURE_LIMIT = env_int("PREFLAB_LOGIN_FAILURES_PER_USER", 5, minimum=1)
PREFLAB_LOGIN_FAILURES_PER_ADDRESS = env_int("PREFLAB_LOGIN_FAILURES_PER_ADDRESS", 20, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("PREFLAB_LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
# the lockout ends when announced, however often someone keeps trying meanwhile
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "webapp.accounts.throttling.locked_out_response"
AXES_CLIENT_IP_CALLABLE = "webapp.accounts.throttling.client_address"
# Behind N reverse proxies the client is the N-th address from the right of X-Forwarded-For (each proxy appends
# the one it saw); 0 reads the connection's own address, since a client can write the header itself.
PREFLAB_PROXY_COUNT = env_int("PREFLAB_PROXY_COUNT", 0, minimum=0)
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
# The largest request body, an upload above all (webapp.uploads: refused with a 413 while it streams in). Uploads
# stream to disk and imports are parsed a line at a time by a job, so this bounds disk and the length of one
# import's transaction, not memory. 1 GiB is a million rows of a kilobyte; a larger file goes in parts, or through
# `manage.py import_prompts`, which has no limit.
PREFLAB_UPLOAD_MAX_BYTES = env_int("PREFLAB_UPLOAD_MAX_BYTES", 2**30, minimum=1)
# Under the data directory, not /tmp (often a RAM disk): an accepted upload is then kept by a rename.
FILE_UPLOAD_TEMP_DIR = DATA_DIR / "uploads" / "incoming"
FILE_UPLOAD_TEMP_DIR.mkdir(parents=True, exist_ok=True)

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

CACHES = {"default": cache_from_url("CACHE_URL", env_str("CACHE_URL", ""))}

# A run whose heartbeat is older than this is considered dead (its worker was killed) and marked failed.
PREFLAB_HEARTBEAT_TIMEOUT_S = env_float("PREFLAB_HEARTBEAT_TIMEOUT_S", 60.0, minimum=1.0)
# A run whose training has not stopped this long after its worker saw the cancel (a stuck step) is killed by the
# worker and marked canceled, saying so (workers/supervision.py).
PREFLAB_CANCEL_GRACE_S = env_float("PREFLAB_CANCEL_GRACE_S", 60.0, minimum=1.0)
# A job queued for longer than this whose message the broker no longer holds is published again (the reconcile).
PREFLAB_REQUEUE_AFTER_S = env_float("PREFLAB_REQUEUE_AFTER_S", 60.0, minimum=1.0)
# How often celery beat runs the stale-heartbeat checks and the reconcile of queued jobs with the broker.
PREFLAB_RECONCILE_EVERY_S = env_float("PREFLAB_RECONCILE_EVERY_S", 10.0, minimum=0.5)
# A run on several nodes (num_nodes): the worker that claims it is node 0 and holds the rendezvous at this address
# (how the other nodes reach this machine) on a free port; the others must join within the timeout, or it fails.
PREFLAB_NODE_ADDRESS = env_host("PREFLAB_NODE_ADDRESS", socket.gethostname())
PREFLAB_NODE_JOIN_TIMEOUT_S = env_int("PREFLAB_NODE_JOIN_TIMEOUT_S", 600, minimum=1)
PREFLAB_METRICS_MAX_POINTS = env_int("PREFLAB_METRICS_MAX_POINTS", 2000, minimum=10)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"levelled": {"format": "[{asctime}] {levelname} {name}: {message}", "style": "{"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "levelled"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # The embedded filesystem broker has no host, and kombu warns about that on every connection. django-axes
    # says at INFO that it started and what it did at each login; its warnings (failures, lockouts) are kept.
    "loggers": {"kombu.connection": {"level": "ERROR"}, "axes": {"level": "WARNING"}},
}
