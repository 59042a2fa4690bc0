"""Preflab's Python client: the HTTP API (`Client`), runs logged from any training script (`ExternalRun`,
from `Client.init_run`) and a transformers/TRL callback (`PreflabCallback`, which needs transformers and is
imported only when asked for). Importing it makes `TrainingArguments(report_to="preflab")` known to transformers
(preflab_client.integration)."""

from __future__ import annotations

from typing import Any

from preflab_client.client import Client
from preflab_client.http import ApiError, ServerUnreachable
from preflab_client.integration import register as _register_with_transformers
from preflab_client.metric_names import preflab_name
from preflab_client.runs import ExternalRun

_register_with_transformers()

__all__ = ["ApiError", "Client", "ExternalRun", "PreflabCallback", "ServerUnreachable", "preflab_name"]


def __getattr__(name: str) -> Any:
    if name == "PreflabCallback":  # transformers is imported only by those who use the callback
        from preflab_client.callback import PreflabCallback

        return PreflabCallback
    raise AttributeError(f"module 'preflab_client' has no attribute {name!r}")
