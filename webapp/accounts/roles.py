"""The two roles, as Django groups: annotators rank, researchers run everything else. Admins are superusers (any
role's pages) and staff (the Django admin): they reach every project and run, where a researcher reaches the projects
they own or were added to (webapp.annotation.selectors.projects_visible_to)."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

ANNOTATOR = "annotator"
RESEARCHER = "researcher"
ROLES = (ANNOTATOR, RESEARCHER)


_ROLE_CACHE = "_preflab_role_names"


def _role_names(user: AbstractBaseUser) -> frozenset[str]:
    # Every page asks several times (navigation, context, decorators): one query per request, not one per ask.
    names = getattr(user, _ROLE_CACHE, None)
    if names is None:
        names = frozenset(user.groups.values_list("name", flat=True))
        setattr(user, _ROLE_CACHE, names)
    return names


def has_role(user: AbstractBaseUser | AnonymousUser, role: str) -> bool:
    if not user.is_authenticated:
        return False
    if user.is_superuser:
        return True
    return role in _role_names(user)


def is_admin(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and (user.is_superuser or user.is_staff))


def is_researcher(user: AbstractBaseUser | AnonymousUser) -> bool:
    return has_role(user, RESEARCHER)


def is_annotator(user: AbstractBaseUser | AnonymousUser) -> bool:
    return has_role(user, ANNOTATOR)


def grant_role(user: AbstractBaseUser, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)
    user.__dict__.pop(_ROLE_CACHE, None)


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
