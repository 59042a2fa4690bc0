"""Bearer-token authentication for the API (personal tokens, stored hashed) and the roles, as on the pages.

A missing, unknown or revoked token, or an inactive user's, is a 401 whose detail says which of these it is and
where a new token is made (the tokens page's address). A valid token of someone who is not a researcher, on a researcher endpoint, is a 403
{"detail": "researchers only"}. The roles are the pages' (webapp.accounts.roles).

Every endpoint is a researcher's unless it says otherwise: the API's default `TokenAuth()` refuses the others,
during authentication, so an annotator is refused before the request's body or parameters are even read (a
check inside the endpoint would come after ninja's 422 for a body they may not send). An endpoint meant for
annotators too would declare `auth=TokenAuth(researchers_only=False)`. `researcher_only` marks a researcher
endpoint in its module and checks again, in case its auth is ever overridden.

The raw token must never reach a log: ninja's HttpBearer logs the whole Authorization header (with DEBUG on) when
its scheme is not "Bearer", so the header is read here instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from django.urls import reverse
from ninja.errors import HttpError
from ninja.security import HttpBearer

from webapp.accounts.roles import is_researcher
from webapp.accounts.selectors import api_token_refusal
from webapp.accounts.services import api_token_authenticate

RESEARCHERS_ONLY = "researchers only"


class TokenAuth(HttpBearer):
    def __init__(self, *, researchers_only: bool = True) -> None:
        self.researchers_only = researchers_only
        super().__init__()

    def __call__(self, request: HttpRequest) -> User | None:
        scheme, _, token = request.headers.get(self.header, "").partition(" ")
        if scheme.lower() != self.openapi_scheme or not token.strip():
            raise unauthenticated(request, "no token: send the header Authorization: Bearer <token>")
        return self.authenticate(request, token.strip())

    def authenticate(self, request: HttpRequest, token: str) -> User | None:
        user = api_token_authenticate(raw=token)
        if user is None:
            raise unauthenticated(request, api_token_refusal(raw=token))
        # the pages' helpers (roles, services taking the request's user) work unchanged
        request.user = user
        if self.researchers_only:
            require_researcher(user)
        return user


def unauthenticated(request: HttpRequest, problem: str) -> HttpError:
    """A 401 saying what is wrong with the credentials and where a new token is made."""
    tokens_page = request.build_absolute_uri(reverse("api_tokens"))
    return HttpError(401, f"{problem}; make a personal token on {tokens_page}")


def require_researcher(user: Any) -> None:
    """403 {"detail": "researchers only"} unless `user` is a researcher (or a superuser)."""
    if not is_researcher(user):
        raise HttpError(403, RESEARCHERS_ONLY)


Endpoint = Callable[..., Any]


def researcher_only(endpoint: Endpoint) -> Endpoint:
    """Marks a researcher endpoint and checks the role again; put it under the router's decorator:

        @router.get("/things", response=Page[Thing])
        @researcher_only
        def things(request): ...
    """

    @wraps(endpoint)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        require_researcher(request.auth)
        return endpoint(request, *args, **kwargs)

    # ninja reads the parameters' types from the signature, resolving annotations written as strings (PEP 563)
    # in the function's module globals: the wrapper's would be this module's, so they are resolved here.
    checked.__signature__ = inspect.signature(endpoint, eval_str=True)  # type: ignore[attr-defined]
    return checked
