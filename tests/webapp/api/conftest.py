"""The API's test helpers: personal tokens of the role fixtures' users, and a client sending one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from webapp.accounts.services import api_token_create


class ApiClient:
    """Django's test client with `Authorization: Bearer <token>` on every request (none when token is None)."""

    def __init__(self, client: Client, token: str | None) -> None:
        self.client = client
        self.token = token

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def get(self, path: str, params: dict[str, Any] | None = None):
        return self.client.get(_url(path), params or {}, headers=self._headers())

    def post(self, path: str, body: Any = None):
        data = "" if body is None else json.dumps(body)
        return self.client.post(_url(path), data, content_type="application/json", headers=self._headers())

    def post_bytes(self, path: str, data: bytes, content_type: str):
        return self.client.post(_url(path), data, content_type=content_type, headers=self._headers())

    def delete(self, path: str):
        return self.client.delete(_url(path), headers=self._headers())

    def request(self, method: str, path: str):
        """A request with no parameters (and an empty JSON body, for a method that has one)."""
        if method == "GET":
            return self.client.get(_url(path), headers=self._headers())
        return self.client.generic(method, _url(path), b"", content_type="application/json", headers=self._headers())


def _url(path: str) -> str:
    return path if path.startswith("/api/") else "/api/v1" + path


@pytest.fixture
def researcher_token(researcher) -> str:
    return api_token_create(user=researcher, name="tests")[1]


@pytest.fixture
def annotator_token(annotator) -> str:
    return api_token_create(user=annotator, name="tests")[1]


@pytest.fixture
def api(researcher_token) -> ApiClient:
    """A researcher's API client."""
    return ApiClient(Client(), researcher_token)


@pytest.fixture
def annotator_api(annotator_token) -> ApiClient:
    return ApiClient(Client(), annotator_token)


@pytest.fixture
def anonymous_api() -> ApiClient:
    return ApiClient(Client(), None)
