"""Bearer-token authentication for the API (personal tokens, stored hashed)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):  # filled in by the token work
        return None
