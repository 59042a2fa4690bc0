"""Project-wide pages: home, health and the researcher's system status."""

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from webapp import selectors
from webapp.accounts.roles import researcher_required


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")


@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and docker healthchecks: the process answers and the database is reachable."""
    return JsonResponse({"ok": selectors.database_is_reachable()})


@researcher_required
def system_status(request: HttpRequest) -> HttpResponse:
    context = {
        "database": selectors.database_description(),
        "broker": selectors.broker_description(),
        "data_dir": settings.DATA_DIR,
        "model_roots": settings.MODEL_ROOTS,
    }
    return render(request, "system_status.html", context)


@researcher_required
def worker_ping(request: HttpRequest) -> HttpResponse:
    """htmx fragment: round-trips the health task through the broker to a worker."""
    return render(request, "system_status.html#worker_status", {"worker": selectors.worker_ping(timeout_s=3.0)})


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "403.html", {"reason": str(exception or "")}, status=403)
