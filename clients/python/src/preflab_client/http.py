"""The HTTP ground every part of the client stands on: the API's prefix, its errors and their one-line detail,
and a session that sends the token. `Server` is what runs and their journal need of a client.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import requests

API_PREFIX = "/api/v1"


class Server(Protocol):
    """A client as runs and the outbox see it (`preflab_client.client.Client` is one)."""

    url: str
    outbox_dir: Path | None

    def new_session(self) -> requests.Session: ...


class ApiError(Exception):
    """The server refused a request (`status` is the HTTP status, `detail` the server's explanation), or could
    not be reached (`ServerUnreachable`, status None)."""

    def __init__(self, status: int | None, detail: str, *, method: str = "", path: str = "") -> None:
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}{status if status is not None else 'no answer'}: {detail}")


class ServerUnreachable(ApiError):
    """No answer: the connection failed or timed out."""

    def __init__(self, detail: str, *, method: str = "", path: str = "") -> None:
        super().__init__(None, detail, method=method, path=path)


def api_base_url(url: str) -> str:
    """The server's address without a trailing slash or the API prefix: "http://host:8000"."""
    url = url.strip().rstrip("/")
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the Preflab URL must start with http:// or https://, got {url!r}")
    return url


def token_session(token: str) -> requests.Session:
    """A session that sends the token (one per thread: requests' sessions are not shared across threads)."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    session.headers["User-Agent"] = "preflab-client/0.1"
    return session


def error_detail(response: requests.Response) -> str:
    """The server's {"detail": ...} as one line (a validation error's list becomes "where: what; ...")."""
    try:
        detail = response.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return not_the_api_text(response)
    if isinstance(detail, list):
        return "; ".join(_validation_error_text(item) for item in detail)
    return str(detail)


def not_the_api_text(response: requests.Response) -> str:
    """An answer that is not the API's JSON (a proxy's or another site's page, a wrong base URL): its status and
    a hint, never the page itself; a short plain-text answer is kept, as it may be the explanation."""
    status = f"HTTP {response.status_code} {response.reason or ''}".strip()
    content_type = response.headers.get("Content-Type", "").split(";")[0].strip() or "no content type"
    text = response.text.strip()
    if content_type == "text/plain" and text and "<" not in text and len(text) <= 300:
        return f"{status}: {text}"
    return (f"{status}, answered with {content_type}, not the Preflab API's JSON: is {response.url} behind a "
            f"proxy, or is the client's URL not the Preflab server's address?")


def _validation_error_text(item: object) -> str:
    if not isinstance(item, Mapping):
        return str(item)
    where = ".".join(str(part) for part in item.get("loc", ()))
    return f"{where}: {item.get('msg', '')}" if where else str(item.get("msg", item))
