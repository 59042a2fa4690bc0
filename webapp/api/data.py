"""API endpoints: data."""

from __future__ import annotations

from ninja import Router

router = Router(tags=["data"])
