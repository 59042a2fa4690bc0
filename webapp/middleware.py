"""Request checks that hold for every page."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest


class RefuseNulInQuery:
    """PostgreSQL cannot store or compare text holding NUL, and no parameter of ours needs one: a query string
    carrying it gets a 400 naming the parameter, instead of a database error (a 500) where the value reaches a
    query. Form bodies are left to the forms (reading them here would parse uploads before the view chose how)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                return HttpResponseBadRequest(
                    f"{name[:40]!r} in the address holds a NUL character (%00), which no parameter accepts",
                    content_type="text/plain; charset=utf-8",
                )
        return self.get_response(request)
