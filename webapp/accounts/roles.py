"""The two roles, as Django groups: annotators rank, researchers run everything else. Admins are superusers."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

ANNOTATOR = "annotator"
RESEARCHER = "researcher"
ROLES = (ANNOTATOR, RESEARCHER)


def has_role(user: AbstractBaseUser | AnonymousUser, role: str) -> bool:
    if not user.is_authenticated:
        return False
    if user.is_superuser:
        return True
    return user.groups.filter(name=role).exists()


def is_researcher(user: AbstractBaseUser | AnonymousUser) -> bool:
    return has_role(user, RESEARCHER)


def is_annotator(user: AbstractBaseUser | AnonymousUser) -> bool:
    return has_role(user, ANNOTATOR)


def grant_role(user: AbstractBaseUser, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)


ViewFunction = Callable[..., HttpResponse]


def researcher_required(view: ViewFunction) -> ViewFunction:
    """403 for anyone who is not a researcher (login itself is enforced by LoginRequiredMiddleware)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_researcher(request.user):
            raise PermissionDenied("This page is for researchers.")
        return view(request, *args, **kwargs)

    wrapped.required_role = RESEARCHER  # type: ignore[attr-defined]
    return wrapped


def annotator_required(view: ViewFunction) -> ViewFunction:
    """403 for anyone who is neither an annotator nor a researcher (researchers may annotate too)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not (is_annotator(request.user) or is_researcher(request.user)):
            raise PermissionDenied("This page is for annotators.")
        return view(request, *args, **kwargs)

    wrapped.required_role = ANNOTATOR  # type: ignore[attr-defined]
    return wrapped
