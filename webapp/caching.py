"""The cache is an optimisation, never a dependency.

With CACHE_URL on the broker's Redis (the compose setup), a Redis outage must not turn every page that reads the
cache into a 500: a read that fails is a miss and a write that fails is skipped, with a warning. After a failure
the cache is left alone for CACHE_RETRY_AFTER_S, so an outage costs neither a connection attempt per request nor
a warning per request; the first request after that tries again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache import cache
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

CACHE_RETRY_AFTER_S = 30.0
# What Django's Redis cache raises when its server is down, refuses or times out (redis's ConnectionError and
# TimeoutError are RedisErrors; a socket error can surface as itself).
CACHE_ERRORS = (RedisError, OSError)

_skip_until = 0.0


def cache_get(key: str) -> Any | None:
    """The cached value, or None when there is none or the cache cannot be read."""
    if _skipping():
        return None
    try:
        return cache.get(key)
    except CACHE_ERRORS as error:
        _cache_failed("read", error)
        return None


def cache_set(key: str, value: Any, timeout_s: float) -> None:
    """Cache `value`; skipped (the caller computes it again next time) when the cache cannot be written."""
    if _skipping():
        return
    try:
        cache.set(key, value, timeout_s)
    except CACHE_ERRORS as error:
        _cache_failed("written", error)


def _skipping() -> bool:
    return time.monotonic() < _skip_until


def _cache_failed(done: str, error: Exception) -> None:
    global _skip_until
    _skip_until = time.monotonic() + CACHE_RETRY_AFTER_S
    logger.warning("the cache could not be %s (%s: %s); computing without it, and trying it again in %.0f s",
                   done, type(error).__name__, error, CACHE_RETRY_AFTER_S)
