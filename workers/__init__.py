"""The Celery app and its tasks: thin glue from database rows to trainer/ and back."""

from workers.app import app

__all__ = ["app"]
