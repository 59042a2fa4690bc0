"""The main navigation and the home page's sections, collected from each app's `navigation.NAV_ITEMS`."""

from dataclasses import dataclass
from importlib import import_module

from django.http import HttpRequest
from django.urls import reverse

from webapp.accounts.roles import ANNOTATOR, has_role

NAV_APPS = ("webapp.annotation", "webapp.experiments")


@dataclass(frozen=True)
class NavItem:
    label: str
    url_name: str
    role: str
    help: str = ""


@dataclass(frozen=True)
class ResolvedNavItem:
    label: str
    url: str
    help: str
    active: bool


def _declared_items() -> list[NavItem]:
    items: list[NavItem] = []
    for app in NAV_APPS:
        try:
            module = import_module(f"{app}.navigation")
        except ModuleNotFoundError as error:
            if error.name != f"{app}.navigation":
                raise
            continue
        items.extend(module.NAV_ITEMS)
    return items


def _visible_to(request: HttpRequest, item: NavItem) -> bool:
    if item.role == ANNOTATOR:
        # Researchers may annotate too.
        return has_role(request.user, ANNOTATOR) or has_role(request.user, "researcher")
    return has_role(request.user, item.role)


def navigation(request: HttpRequest) -> dict[str, list[ResolvedNavItem]]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_items": [], "home_sections": []}
    resolved = []
    for item in _declared_items():
        if not _visible_to(request, item):
            continue
        url = reverse(item.url_name)
        resolved.append(ResolvedNavItem(item.label, url, item.help, request.path.startswith(url)))
    return {"nav_items": resolved, "home_sections": resolved}
