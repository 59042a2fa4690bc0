"""Request checks and response headers that hold for every page."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

API_PREFIX = "/api/"


class RefuseNulInQuery:
    """PostgreSQL cannot store or compare text holding NUL, and no parameter of ours needs one: a query string
    carrying it gets a 400 naming the parameter, instead of a database error (a 500) where the value reaches a
    query. Form bodies are left to the forms (reading them here would parse uploads before the view chose how).
    The API is left to itself: it refuses such text in the parameters it reads with a 422 in its own format, as it
    refuses it in a body (webapp.api.api.storable_input), and ignores the parameters it does not read."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                return HttpResponseBadRequest(
                    f"{name[:40]!r} in the address holds a NUL character (%00), which no parameter accepts",
                    content_type="text/plain; charset=utf-8",
                )
        return self.get_response(request)


class ContentSecurityPolicy:
    """Sends settings.CONTENT_SECURITY_POLICY with every response, as Content-Security-Policy-Report-Only while
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY (to try a change of policy on a deployment without breaking it)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.DEBUG and response.status_code in (404, 500):
            return response  # Django's debug pages are styled and scripted inline
        header = ("Content-Security-Policy-Report-Only" if settings.CONTENT_SECURITY_POLICY_REPORT_ONLY
                  else "Content-Security-Policy")
        response.headers.setdefault(header, settings.CONTENT_SECURITY_POLICY)
        return response
