"""The output of `make run`'s processes: everything to a log file, only warnings and errors to the terminal.

Celery prints a banner, a line per beat tick and a line per task; runserver a line per request (the pages poll
every few seconds). Those bury the start-up summary, so each process's output is relayed line by line: all of
it to `<data dir>/logs/<name>.log`, and to the terminal only the records at WARNING or above, with the lines
that follow such a record (a traceback) until the next record starts.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

LOUD_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
# "[2026-11-23 20:01:02,345: WARNING/MainProcess] ..." (celery's worker and beat)
_CELERY_RECORD = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+: (?P<level>[A-Z]+)/")
# "[23/Nov/2026 20:01:02] \"GET /runs/rows HTTP/1.1\" 200 1234" (runserver's request line)
_REQUEST_RECORD = re.compile(r'^\[[^\]]+\] "[^"]*" (?P<status>\d{3}) ')
# "[2026-11-23 20:01:02,345] ERROR django.request: ..." (webapp.settings.LOGGING's format)
_DJANGO_RECORD = re.compile(r"^\[[^\]]+\] (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def record_is_loud(line: str) -> bool | None:
    """True/False when `line` starts a log record (loud: WARNING or above); None for any other line."""
    if match := _CELERY_RECORD.match(line) or _DJANGO_RECORD.match(line):
        return match["level"] in LOUD_LEVELS
    if match := _REQUEST_RECORD.match(line):
        # A 4xx is the browser's mistake (a favicon, an expired page), not the server's; a 5xx is ours.
        return match["status"].startswith("5")
    return None


class LineFilter:
    """Decides per line whether it reaches the terminal: a record by its level, other lines as their record."""

    def __init__(self) -> None:
        self._loud = False  # the banner and start-up lines before the first record stay in the file

    def __call__(self, line: str) -> bool:
        loud = record_is_loud(line)
        if loud is not None:
            self._loud = loud
        return self._loud


def relay(
    stream: IO[str], log_path: Path, echo: Callable[[str], None], watch: Callable[[str], None] = lambda line: None
) -> threading.Thread:
    """Copy `stream` line by line into `log_path`, `echo` the loud lines and show every line to `watch`, in a
    daemon thread."""
    shown = LineFilter()

    def copy() -> None:
        with log_path.open("a", encoding="utf-8") as log:
            for line in stream:
                log.write(line)
                log.flush()
                watch(line)
                if shown(line):
                    echo(line.rstrip("\n"))

    thread = threading.Thread(target=copy, name=f"relay-{log_path.stem}", daemon=True)
    thread.start()
    return thread
