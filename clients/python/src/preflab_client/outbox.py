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
import socket
import threading
import time
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

    def parts(self, entry: dict) -> list[tuple[dict, Refused]]:
        """What of `entry` was refused, and why: all of it."""
        return [(entry, self)]


class PartlyRefused(Refused):
    """Pieces of an entry were refused (to be kept aside, each with its reason); the others were stored."""

    def __init__(self, refused: list[tuple[dict, Refused]]) -> None:
        self.refused = refused
        first = refused[0][1]
        super().__init__(first.status, f"{len(refused)} piece(s) refused, the first: {first.detail}")

    def parts(self, entry: dict) -> list[tuple[dict, Refused]]:
        return self.refused


RETRYABLE_STATUSES = (408, 425, 429)
ENTRY_PATHS = {"log": "log", "samples": "samples", "finish": "finish", "update": "update"}
ENTRY_ITEMS = {"log": "rows", "samples": "samples"}

# Bounds of one request the client builds, below the server's: at most 10,000 rows and 1,000 samples a request
# (EXTERNAL_ROWS_MAX, EXTERNAL_SAMPLES_MAX) and 50 MiB a JSON body (DATA_UPLOAD_MAX_MEMORY_SIZE).
REQUEST_ROWS_MAX = 2_000
REQUEST_SAMPLES_MAX = 500
REQUEST_BYTES_MAX = 8 * 1024 * 1024
REQUEST_ITEMS_MAX = {"log": REQUEST_ROWS_MAX, "samples": REQUEST_SAMPLES_MAX}


def entry_pieces(entry: dict, max_items: int | None = None) -> list[dict]:
    """`entry` as requests of at most `max_items` rows or samples each (the kind's bound when None), in order. A
    piece of a samples batch gets an id derived from the batch's, so that sending the same entry again (a replay)
    makes the same pieces, each written once by the server."""
    field = ENTRY_ITEMS.get(entry.get("kind", ""))
    limit = max_items or REQUEST_ITEMS_MAX.get(entry.get("kind", ""), 0)
    items = entry.get("body", {}).get(field) if field else None
    if not isinstance(items, list) or len(items) <= limit:
        return [entry]
    pieces = []
    for number, start in enumerate(range(0, len(items), limit)):
        body = {**entry["body"], field: items[start:start + limit]}
        if entry["kind"] == "samples":
            body["batch_id"] = f"{entry['body'].get('batch_id', '')}.{number}"
        pieces.append({**entry, "body": body})
    return pieces


def _encoded(body: Any) -> bytes:
    return json.dumps(body, allow_nan=False).encode()


def size_refusal(refusal: Refused) -> bool:
    """The server refused a request for its size (413, or the 422 of too many rows or samples): a smaller
    request is taken, so this is never final while the request can be split."""
    detail = refusal.detail
    return refusal.status == 413 or (refusal.status == 422 and "at most" in detail
                                     and ("a request" in detail or "a batch" in detail))


class EntrySender:
    """Sends one run's requests with a session of its own (each thread has one)."""

    def __init__(self, client: Server, run_id: int, *, timeout: tuple[float, float] = (5.0, 30.0)) -> None:
        self.session = client.new_session()
        self.base = f"{client.url}{API_PREFIX}/runs/{run_id}"
        self.timeout = timeout

    def send(self, entry: dict) -> Any:
        """Send one entry as requests within REQUEST_*_MAX (an entry journaled by an older client may hold many
        more rows); a piece the server refuses for its size is halved and sent again, and so is one it refuses
        for its content (a 422), down to the rows or samples at fault, so that only they are refused
        (PartlyRefused names them) and the others are stored. The pieces go in order; when the server stops
        answering the entry is sent again whole later, which the server's idempotence makes harmless. The answer
        of a log or samples entry adds up its pieces' `written`."""
        if entry["kind"] not in ENTRY_ITEMS:
            return self._send_within_size(entry)
        return self._send_pieces(entry_pieces(entry))

    def _send_pieces(self, pieces: list[dict]) -> dict:
        written = 0
        refused: list[tuple[dict, Refused]] = []
        for piece in pieces:
            try:
                answer = self._send_within_size(piece)
            except Refused as refusal:
                refused += refusal.parts(piece)
                continue
            if isinstance(answer, dict) and isinstance(answer.get("written"), int):
                written += answer["written"]
        if refused:
            raise PartlyRefused(refused)
        return {"written": written}

    def _send_within_size(self, entry: dict) -> Any:
        field = ENTRY_ITEMS.get(entry["kind"])
        count = len(entry["body"].get(field) or ()) if field else 0
        data = _encoded(entry["body"])
        if count > 1 and len(data) > REQUEST_BYTES_MAX:
            return self._send_halves(entry, count)
        try:
            return self.call("POST", ENTRY_PATHS[entry["kind"]], data=data)
        except Refused as refusal:
            if count > 1 and (size_refusal(refusal) or refusal.status == 422):
                return self._send_halves(entry, count)
            raise

    def _send_halves(self, entry: dict, count: int) -> Any:
        return self._send_pieces(entry_pieces(entry, max_items=(count + 1) // 2))

    def call(self, method: str, path: str, body: Any = None, *, data: bytes | None = None) -> Any:
        url = f"{self.base}/{path}" if path else self.base
        if data is None and body is not None:
            data = _encoded(body)
        try:
            response = self.session.request(
                method, url, data=data,
                headers={"Content-Type": "application/json"} if data is not None else None, timeout=self.timeout)
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
    unreachable: bool = False
    finish_answer: Any = None


def drain(outbox: RunOutbox, sender: EntrySender, *, on_refused=None, budget_s: float | None = None) -> Drained:
    """Send the journal in order until it is empty (complete), the server stops answering (unreachable), or
    `budget_s` seconds have passed (the rest stays for the next call)."""
    result = Drained()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    try:
        for entry in outbox.entries():
            if deadline is not None and result.entries and time.monotonic() > deadline:
                result.complete = False
                break
            if entry.get("kind") == "finish":
                entry = honest_finish(entry, outbox.rejected)
            try:
                answer = sender.send(entry)
            except Unreachable:
                result.complete = False
                result.unreachable = True
                break
            except Refused as refusal:
                for part, reason in refusal.parts(entry):
                    outbox.reject(part, reason)
                    if on_refused is not None:
                        on_refused(part, reason)
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


def undelivered_counts(rejected: Path) -> tuple[int, int]:
    """(metric rows, samples) of a run that the server refused, kept in its rejected.jsonl."""
    rows = samples = 0
    try:
        lines = rejected.read_bytes().splitlines()
    except FileNotFoundError:
        return 0, 0
    for line in lines:
        try:
            entry_rows, entry_samples = entry_counts(json.loads(line).get("entry", {}))
        except (ValueError, AttributeError):
            continue
        rows += entry_rows
        samples += entry_samples
    return rows, samples


def undelivered_error(rejected: Path) -> str | None:
    """What a run that could not deliver everything ends with, or None when the server took every row."""
    rows, samples = undelivered_counts(rejected)
    if not rows and not samples:
        return None
    return (f"{rows:,} metric rows and {samples:,} samples were not delivered (the server refused them); they are "
            f"kept in {rejected} on host {socket.gethostname()}")


def honest_finish(entry: dict, rejected: Path) -> dict:
    """A finish as "succeeded" becomes "failed" with undelivered_error when the server refused rows or samples of
    the run (kept in `rejected`): a run never says it succeeded while rows of it are missing."""
    error = undelivered_error(rejected)
    if error is None or entry["body"].get("status") != "succeeded":
        return entry
    return {**entry, "body": {"status": "failed", "error": error}}


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
