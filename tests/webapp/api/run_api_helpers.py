"""What the runs API tests share: a client sending a user's bearer token over Django's test client."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from webapp.accounts.services import api_token_create


class ApiClient:
    """Requests to /api/v1 with a user's bearer token, as a program sends them."""

    def __init__(self, client: Client, token: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, path: str, **params: Any):
        return self.client.get(f"/api/v1{path}", params, headers=self.headers)

    def post(self, path: str, body: Any = None):
        return self.client.post(f"/api/v1{path}", json.dumps(body if body is not None else {}),
                                content_type="application/json", headers=self.headers)


def api_client_of(user) -> ApiClient:
    _, raw = api_token_create(user=user, name="tests")
    return ApiClient(Client(), raw)

