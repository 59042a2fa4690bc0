"""The on-disk journal of what a run could not send yet, and how it is sent later.

One directory per run under the outbox (PREFLAB_OUTBOX_DIR, else ~/.cache/preflab/outbox), named after the
server and the run: `meta.json` (the server's address and the run's id, never the token), `journal.jsonl`
(append-only, one request a line — {"kind": "log" | "samples" | "update" | "finish", "body": ...} — fsync'd after each
append), `rejected.jsonl` (requests the server refused, with its answer, kept rather than dropped) and `lock`.
The process that owns the run holds the lock (flock) while it runs, so another process replays a journal only
once its owner has gone. Replaying twice is harmless: metric rows are idempotent by (run, step) and samples by
their batch id.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import requests

from preflab_client.http import API_PREFIX, Server, error_detail

try:
    import fcntl
except ImportError:  # Windows: no locking between processes (one training process per run dir there)
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger("preflab_client")

JOURNAL = "journal.jsonl"
REJECTED = "rejected.jsonl"
META = "meta.json"
LOCK = "lock"


def outbox_root(client: Server) -> Path:
    if client.outbox_dir is not None:
        return client.outbox_dir
    configured = os.environ.get("PREFLAB_OUTBOX_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "preflab" / "outbox"


def server_key(url: str) -> str:
    """The server as a directory name: "127.0.0.1_8000"."""
    parts = urlsplit(url)
    return re.sub(r"[^A-Za-z0-9.-]+", "_", f"{parts.netloc}{parts.path}").strip("_") or "server"


def entry_counts(entry: dict) -> tuple[int, int]:
    """(metric rows, samples) that one journal entry carries."""
    body = entry.get("body", {})
    if entry.get("kind") == "log":
        return len(body.get("rows", ())), 0
    if entry.get("kind") == "samples":
        return 0, len(body.get("samples", ()))
    return 0, 0


class Unreachable(Exception):
    """No answer, a timeout, or an answer that says to try later (5xx, 408, 429)."""


class Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"{status}: {detail}")


RETRYABLE_STATUSES = (408, 425, 429)
ENTRY_PATHS = {"log": "log", "samples": "samples", "finish": "finish", "update": "update"}


class EntrySender:
    """Sends one run's requests with a session of its own (each thread has one)."""

    def __init__(self, client: Server, run_id: int, *, timeout: tuple[float, float] = (5.0, 30.0)) -> None:
        self.session = client.new_session()
        self.base = f"{client.url}{API_PREFIX}/runs/{run_id}"
        self.timeout = timeout

    def send(self, entry: dict) -> Any:
        return self.call("POST", ENTRY_PATHS[entry["kind"]], entry["body"])

    def call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.base}/{path}" if path else self.base
        try:
            response = self.session.request(
                method, url, data=None if body is None else json.dumps(body, allow_nan=False).encode(),
                headers={"Content-Type": "application/json"} if body is not None else None, timeout=self.timeout)
        except requests.RequestException as error:
            raise Unreachable(f"{type(error).__name__}: {error}") from None
        if response.status_code >= 500 or response.status_code in RETRYABLE_STATUSES:
            raise Unreachable(f"HTTP {response.status_code}: {error_detail(response)}")
        if response.status_code >= 400:
            raise Refused(response.status_code, error_detail(response))
        return response.json() if response.content else None


class RunOutbox:
    """The directory of one run; appends and rewrites of its journal are serialised by a thread lock, other
    processes are kept out by the flock on `lock`."""

    def __init__(self, root: Path, *, server_url: str, run_id: int) -> None:
        self.directory = root / f"{server_key(server_url)}-run-{run_id}"
        self.journal = self.directory / JOURNAL
        self.rejected = self.directory / REJECTED
        self.server_url = server_url
        self.run_id = run_id
        self._lock_file: IO[str] | None = None
        self._mutex = threading.RLock()

    @property
    def held(self) -> bool:
        return self._lock_file is not None

    def acquire(self, *, wait: bool) -> bool:
        """Hold the run's directory (creating it); False when another process holds it and `wait` is off."""
        with self._mutex:
            if self._lock_file is not None:
                return True
            self.directory.mkdir(parents=True, exist_ok=True)
            handle = open(self.directory / LOCK, "a")  # noqa: SIM115 -- held open for the run's lifetime
            if fcntl is not None:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    handle.close()
                    return False
            self._lock_file = handle
            meta = self.directory / META
            if not meta.exists():
                _write_synced(meta, json.dumps({"url": self.server_url, "run_id": self.run_id}) + "\n", mode="w")
            return True

    def release(self) -> None:
        """Let go of the directory, removing it when nothing is left in it to send or to look at."""
        with self._mutex:
            if self._lock_file is None:
                return
            if not self.journal.exists() and not self.rejected.exists():
                for name in (META, LOCK):
                    (self.directory / name).unlink(missing_ok=True)
                with contextlib.suppress(OSError):  # something else was put there
                    self.directory.rmdir()
            self._lock_file.close()
            self._lock_file = None

    def append(self, entries: list[dict]) -> None:
        if not entries:
            return
        with self._mutex:
            self.acquire(wait=True)
            _write_synced(self.journal, "".join(json.dumps(entry, allow_nan=False) + "\n" for entry in entries))

    def entries(self) -> Iterator[dict]:
        """The journal's entries, oldest first, as far as the file reached when reading began. A last line cut
        short (the process died while writing it) ends the reading, with a warning."""
        with self._mutex:
            try:
                size = self.journal.stat().st_size
            except FileNotFoundError:
                return
        with open(self.journal, "rb") as handle:
            read = 0
            for line in handle:
                read += len(line)
                if read > size:
                    return
                try:
                    yield json.loads(line)
                except ValueError:
                    logger.warning("preflab: %s ends with a line cut short (the process stopped while writing "
                                   "it); it is skipped", self.journal)
                    return

    def drop_first(self, count: int, *, drop_torn: bool = False) -> None:
        """Forget the first `count` entries (sent), and with `drop_torn` a line cut short by a crash (which
        entries() skipped); the journal goes when nothing else is in it."""
        if count <= 0 and not drop_torn:
            return
        with self._mutex:
            replacement = self.journal.with_suffix(".tmp")
            kept = 0
            if not self.journal.exists():
                return
            with open(self.journal, "rb") as source, open(replacement, "wb") as target:
                for index, line in enumerate(source):
                    # appends hold the mutex, so a line that does not parse was cut short by a crash
                    if index >= count and _parses(line):
                        target.write(line)
                        kept += 1
                target.flush()
                os.fsync(target.fileno())
            if kept:
                os.replace(replacement, self.journal)
            else:
                replacement.unlink()
                self.journal.unlink()

    def reject(self, entry: dict, refusal: Refused) -> None:
        with self._mutex:
            self.acquire(wait=True)
            record = {"status": refusal.status, "detail": refusal.detail, "entry": entry}
            _write_synced(self.rejected, json.dumps(record, allow_nan=False) + "\n")

    def pending_counts(self) -> tuple[int, int, int]:
        """(entries, metric rows, samples) still in the journal."""
        entries = rows = samples = 0
        for entry in self.entries():
            entries += 1
            entry_rows, entry_samples = entry_counts(entry)
            rows += entry_rows
            samples += entry_samples
        return entries, rows, samples


@dataclass
class Drained:
    rows: int = 0
    samples: int = 0
    entries: int = 0
    complete: bool = True
    finish_answer: Any = None


def drain(outbox: RunOutbox, sender: EntrySender, *, on_refused=None) -> Drained:
    """Send the journal in order until it is empty (complete) or the server stops answering (the rest stays)."""
    result = Drained()
    try:
        for entry in outbox.entries():
            try:
                answer = sender.send(entry)
            except Unreachable:
                result.complete = False
                break
            except Refused as refusal:
                outbox.reject(entry, refusal)
                if on_refused is not None:
                    on_refused(entry, refusal)
            else:
                rows, samples = entry_counts(entry)
                result.rows += rows
                result.samples += samples
                if entry["kind"] == "finish":
                    result.finish_answer = answer
            result.entries += 1
    finally:
        outbox.drop_first(result.entries, drop_torn=result.complete)
    return result


def replay_outboxes(client: Server) -> int:
    """Send the journals that runs of `client`'s server left behind (their processes have gone); returns the
    metric rows and samples sent."""
    root = outbox_root(client)
    if not root.is_dir():
        return 0
    sent = 0
    for directory in sorted(root.glob(f"{server_key(client.url)}-run-*")):
        try:
            meta = json.loads((directory / META).read_text())
        except (OSError, ValueError):
            continue  # not written yet by its owner, or not ours
        if meta.get("url") != client.url or not (directory / JOURNAL).exists():
            continue
        outbox = RunOutbox(root, server_url=client.url, run_id=int(meta["run_id"]))
        if not outbox.acquire(wait=False):
            continue  # its process is still running and sends it itself
        sender = EntrySender(client, outbox.run_id)
        try:
            result = drain(outbox, sender, on_refused=_warn_refused(outbox))
        finally:
            sender.session.close()
            outbox.release()
        if result.entries:
            logger.info("preflab: replayed %d metric rows and %d samples of run %d from %s", result.rows,
                        result.samples, outbox.run_id, outbox.directory)
        sent += result.rows + result.samples
        if not result.complete:
            logger.warning("preflab: the server at %s stopped answering; the rest of run %d stays in %s",
                           client.url, outbox.run_id, outbox.journal)
            break
    return sent


def _warn_refused(outbox: RunOutbox):
    def warn(entry: dict, refusal: Refused) -> None:
        logger.warning("preflab: the server refused a %s request of run %d (%s); it is kept in %s", entry["kind"],
                       outbox.run_id, refusal, outbox.rejected)

    return warn


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _write_synced(path: Path, text: str, *, mode: str = "a") -> None:
    with open(path, mode, encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
