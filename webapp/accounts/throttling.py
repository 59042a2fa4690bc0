"""Login throttling with django-axes: per username and per client address, each with its own limit.

Axes counts the failures of each lockout parameter (settings.AXES_LOCKOUT_PARAMETERS: username, then address)
and compares the larger count with one limit, AXES_FAILURE_LIMIT. The address gets a limit of its own here.
"""

from math import ceil

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def client_address(request: HttpRequest) -> str | None:
    """The address a login attempt came from. Behind PREFLAB_PROXY_COUNT proxies it is the one the outermost
    proxy saw, read from the right of X-Forwarded-For: what lies further left the client may have written."""
    proxies = settings.PREFLAB_PROXY_COUNT
    if proxies == 0:
        return request.META.get("REMOTE_ADDR")
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if len(forwarded) < proxies:
        # not through every proxy: only the connection's address is known
        return request.META.get("REMOTE_ADDR")
    return forwarded[-proxies]


def _failures(attempts: QuerySet[AccessAttempt]) -> int:
    return attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0


class PerUserAndPerAddressHandler(AxesDatabaseHandler):
    def get_failures(self, request: HttpRequest, credentials: dict | None = None) -> int:
        """The failures axes compares with AXES_FAILURE_LIMIT, the per-user limit: the username's own, or that
        whole limit once the address has reached PREFLAB_LOGIN_FAILURES_PER_ADDRESS."""
        by_user, by_address = (_failures(attempts) for attempts in self.get_user_attempts(request, credentials))
        address_locked = by_address >= settings.PREFLAB_LOGIN_FAILURES_PER_ADDRESS
        return max(by_user, settings.AXES_FAILURE_LIMIT if address_locked else 0)

    def reset_user_attempts(self, request: HttpRequest, credentials: dict | None = None) -> int:
        """A successful login forgives the user's own failures from this address only. Axes would forgive every
        failure of the username or of the address: someone with an account could then guess another user's
        password a few times, log into their own account, and guess again, without end."""
        deleted, _ = AccessAttempt.objects.filter(
            username=get_client_username(request, credentials), ip_address=request.axes_ip_address
        ).delete()
        return deleted


def locked_out_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict | None = None
) -> HttpResponse:
    """What a refused login gets (settings.AXES_LOCKOUT_CALLABLE), on either login page: a 429 page saying
    why and for how long, with the same wait in Retry-After."""
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    context = {"username": get_client_username(request, credentials) or "", "minutes": ceil(seconds / 60)}
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response
