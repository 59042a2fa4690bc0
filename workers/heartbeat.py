"""A background thread that calls `beat` every interval until stopped, on its own database connection, so a job
whose single step (a generation batch, a slow training step) outlasts the stale-heartbeat timeout still shows its
worker alive, and a killed worker stops beating at once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

from django.db import connection

logger = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, beat: Callable[[], None], *, every_s: float, name: str) -> None:
        self._beat = beat
        self._every_s = every_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self._every_s):
                try:
                    self._beat()
                except Exception:  # a lost beat (a database hiccup, a locked SQLite) must not end the beating
                    logger.exception("heartbeat %s: a beat failed; beating on", self._thread.name)
        finally:
            connection.close()
