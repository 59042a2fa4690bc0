"""Deployment security from the environment (HTTPS, HSTS, secure cookies, the proxy's header) and the
Content-Security-Policy every response carries."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from webapp.env import env_proxy_ssl_header

REPO_ROOT = Path(__file__).resolve().parents[2]
SECURITY_SETTINGS = ["SECURE_PROXY_SSL_HEADER", "SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
                     "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD",
                     "CONTENT_SECURITY_POLICY_REPORT_ONLY", "AXES_FAILURE_LIMIT", "PREFLAB_LOGIN_FAILURES_PER_ADDRESS",
                     "AXES_COOLOFF_TIME", "PREFLAB_PROXY_COUNT"]
SECURITY_VARIABLES = ["SECURE_PROXY_SSL_HEADER", "SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
                      "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD",
                      "PREFLAB_CSP_REPORT_ONLY", "PREFLAB_LOGIN_FAILURES_PER_USER", "PREFLAB_LOGIN_FAILURES_PER_ADDRESS",
                      "PREFLAB_LOGIN_LOCKOUT_MINUTES", "PREFLAB_PROXY_COUNT"]


def _settings_with(variables: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    """The security settings as a fresh process reads them with these variables (and none of the caller's)."""
    env = {key: value for key, value in os.environ.items()
           if key not in {"DATABASE_URL", "CELERY_BROKER_URL", *SECURITY_VARIABLES}}
    env.update(PREFLAB_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="webapp.settings", **variables)
    code = ("import django, json; django.setup(); from django.conf import settings as s; "
            f"print(json.dumps({{name: str(getattr(s, name)) for name in {SECURITY_SETTINGS!r}}}))")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("spelling", ["HTTP_X_FORWARDED_PROTO", "X-Forwarded-Proto", "x-forwarded-proto"])
def test_the_proxy_header_is_named_as_django_or_as_sent_and_must_say_https(monkeypatch, spelling):
    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", spelling)
    assert env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER") == ("HTTP_X_FORWARDED_PROTO", "https")


def test_no_proxy_header_is_trusted_unless_named(monkeypatch):
    monkeypatch.delenv("SECURE_PROXY_SSL_HEADER", raising=False)
    assert env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER") is None
    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", "")
    assert env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER") is None


def test_a_bad_proxy_header_names_the_variable(monkeypatch):
    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto: https")
    with pytest.raises(ImproperlyConfigured, match="SECURE_PROXY_SSL_HEADER='X-Forwarded-Proto: https' is not a header name"):
        env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")


def test_with_no_variable_everything_stays_comfortable_for_local_http(tmp_path):
    result = _settings_with({}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "SECURE_PROXY_SSL_HEADER": "None", "SECURE_SSL_REDIRECT": "False", "SESSION_COOKIE_SECURE": "False",
        "CSRF_COOKIE_SECURE": "False", "SECURE_HSTS_SECONDS": "0", "SECURE_HSTS_INCLUDE_SUBDOMAINS": "False",
        "SECURE_HSTS_PRELOAD": "False", "CONTENT_SECURITY_POLICY_REPORT_ONLY": "False", "AXES_FAILURE_LIMIT": "5",
        "PREFLAB_LOGIN_FAILURES_PER_ADDRESS": "20", "AXES_COOLOFF_TIME": "0:15:00", "PREFLAB_PROXY_COUNT": "0",
    }


def test_every_security_setting_is_read_from_the_environment(tmp_path):
    result = _settings_with({
        "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO", "SECURE_SSL_REDIRECT": "true",
        "SESSION_COOKIE_SECURE": "yes", "CSRF_COOKIE_SECURE": "1", "SECURE_HSTS_SECONDS": "300",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "on", "SECURE_HSTS_PRELOAD": "true", "PREFLAB_CSP_REPORT_ONLY": "true",
        "PREFLAB_LOGIN_FAILURES_PER_USER": "3", "PREFLAB_LOGIN_FAILURES_PER_ADDRESS": "50",
        "PREFLAB_LOGIN_LOCKOUT_MINUTES": "60", "PREFLAB_PROXY_COUNT": "2",
    }, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "SECURE_PROXY_SSL_HEADER": "('HTTP_X_FORWARDED_PROTO', 'https')", "SECURE_SSL_REDIRECT": "True",
        "SESSION_COOKIE_SECURE": "True", "CSRF_COOKIE_SECURE": "True", "SECURE_HSTS_SECONDS": "300",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "True", "SECURE_HSTS_PRELOAD": "True",
        "CONTENT_SECURITY_POLICY_REPORT_ONLY": "True", "AXES_FAILURE_LIMIT": "3",
        "PREFLAB_LOGIN_FAILURES_PER_ADDRESS": "50", "AXES_COOLOFF_TIME": "1:00:00", "PREFLAB_PROXY_COUNT": "2",
    }


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("SECURE_SSL_REDIRECT", "sometimes", "SECURE_SSL_REDIRECT='sometimes' is not a boolean"),
    ("SESSION_COOKIE_SECURE", "si", "SESSION_COOKIE_SECURE='si' is not a boolean"),
    ("SECURE_HSTS_SECONDS", "a year", "SECURE_HSTS_SECONDS='a year' is not an integer"),
    ("SECURE_HSTS_SECONDS", "-1", "SECURE_HSTS_SECONDS=-1 must be at least 0"),
    ("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto=https", "SECURE_PROXY_SSL_HEADER='X-Forwarded-Proto=https' is not"),
    ("PREFLAB_CSP_REPORT_ONLY", "maybe", "PREFLAB_CSP_REPORT_ONLY='maybe' is not a boolean"),
    ("PREFLAB_LOGIN_FAILURES_PER_USER", "0", "PREFLAB_LOGIN_FAILURES_PER_USER=0 must be at least 1"),
    ("PREFLAB_LOGIN_LOCKOUT_MINUTES", "soon", "PREFLAB_LOGIN_LOCKOUT_MINUTES='soon' is not an integer"),
])
def test_a_bad_value_stops_the_app_with_one_line_naming_the_variable(tmp_path, variable, value, message):
    result = _settings_with({variable: value}, tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(f"django.core.exceptions.ImproperlyConfigured: {message}")


@pytest.mark.django_db
def test_behind_the_proxy_plain_http_is_redirected_https_gets_hsts_and_the_health_check_stays_http(client, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    redirected = client.get("/accounts/login/")
    assert redirected.status_code == 301 and redirected["Location"] == "https://testserver/accounts/login/"
    secure = client.get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db
def test_secure_cookies_are_marked_secure(client, settings, annotator):
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    assert client.get("/accounts/login/").cookies["csrftoken"]["secure"] is True
    response = client.post("/accounts/login/", {"username": "abel", "password": "abel-password-1"})
    assert response.status_code == 302 and response.cookies["sessionid"]["secure"] is True


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/accounts/login/", "/healthz", "/no-such-page/", "/admin/login/", "/system/"])
def test_every_response_carries_the_content_security_policy(client, url):
    response = client.get(url)
    assert response["Content-Security-Policy"] == django_settings.CONTENT_SECURITY_POLICY
    assert "Content-Security-Policy-Report-Only" not in response


def test_the_policy_allows_nothing_from_elsewhere_and_no_inline_code():
    directives = dict(directive.split(" ", 1) for directive in django_settings.CONTENT_SECURITY_POLICY.split("; "))
    assert directives == {
        "default-src": "'self'", "script-src": "'self'", "style-src": "'self'", "img-src": "'self' blob: data:",
        "object-src": "'none'", "base-uri": "'self'", "form-action": "'self'", "frame-ancestors": "'none'",
    }


@pytest.mark.django_db
def test_report_only_mode_sends_the_policy_under_the_report_only_header(client, settings, annotator):
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = True
    client.force_login(annotator)
    response = client.get("/")
    assert response["Content-Security-Policy-Report-Only"] == django_settings.CONTENT_SECURITY_POLICY
    assert "Content-Security-Policy" not in response


@pytest.mark.django_db
def test_the_lockout_page_carries_the_policy_too(client, annotator, settings):
    settings.AXES_FAILURE_LIMIT = 1
    response = client.post("/accounts/login/", {"username": "abel", "password": "wrong"})
    assert response.status_code == 429
    assert response["Content-Security-Policy"] == django_settings.CONTENT_SECURITY_POLICY
