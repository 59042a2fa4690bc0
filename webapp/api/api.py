"""The NinjaAPI instance mounted at /api/v1/ and the routers of each area.

Each area's endpoints live in their own module (projects, data, registry, runs, external) as a ninja Router;
views stay thin: parse with a schema, authorise, call a service or a selector.
"""

from __future__ import annotations

from django.urls import URLPattern
from ninja import NinjaAPI

from webapp.api import data, external, projects, registry, runs
from webapp.api.auth import TokenAuth

api = NinjaAPI(
    title="Preflab API",
    version="1",
    urls_namespace="api-v1",
    auth=TokenAuth(),
    docs_url="/docs",
)
api.add_router("/projects", projects.router)
api.add_router("/", data.router)
api.add_router("/models", registry.router)
api.add_router("/runs", runs.router)
api.add_router("/runs", external.router)


def api_urls() -> tuple[list[URLPattern], str, str]:
    """The API's URL patterns, exempt from the pages' login redirect: a program is authenticated by its token
    (a missing or bad one is a 401, not a redirect to the login page)."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        pattern.callback.login_required = False
    return patterns, app_name, namespace
