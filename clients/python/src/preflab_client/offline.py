"""Offline runs: logged to a local directory without contacting the server, and synced later.

    run = client.init_run("on the plane", config=args, mode="offline")   # or PREFLAB_MODE=offline
    ...run.log(...), run.log_samples(...), run.finish() as ever...
    # later, with the server in reach:
    client.sync_offline(run.directory)                                  # or: preflab sync [DIR ...]

The directory (under the outbox directory's `offline/`) holds `run.json` (the request that creates the run),
`journal.jsonl` (its log, samples and finish requests, in the outbox's format and within its request bounds) and,
once synced, `synced.json` ({"url", "run_id", "complete"}). Syncing creates the run once (the run id is written
before anything else is sent), then sends the journal in order; a sync stopped half way (the server went away)
sends it again from the start, which the server's idempotence makes harmless (rows by step, samples by batch id).
A complete sync is not repeated: syncing again answers which run it went to. Rows the server refuses go to the
directory's rejected.jsonl, and the run then ends failed saying how many (as an online run does).
"""

from __future__ import annotations

import atexit
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflab_client.http import Server
from preflab_client.outbox import (
    JOURNAL,
    REJECTED,
    REQUEST_ROWS_MAX,
    REQUEST_SAMPLES_MAX,
    EntrySender,
    Refused,
    Unreachable,
    _write_synced,
    entry_counts,
    honest_finish,
    outbox_root,
)
from preflab_client.values import NotANumber, metric_value, storable_text

logger = logging.getLogger("preflab_client")

RUN_FILE = "run.json"
SYNCED_FILE = "synced.json"
# rows kept in memory before they are written to the journal (one write and fsync for them all)
FLUSH_ROWS = 1_000


def offline_root(client: Server) -> Path:
    return outbox_root(client) / "offline"


class OfflineRun:
    """What `Client.init_run(..., mode="offline")` returns: the methods of ExternalRun, writing to `directory`."""

    def __init__(self, directory: Path, create_body: Mapping[str, Any]) -> None:
        self.directory = directory
        self.id: int | None = None  # known once synced
        self.name: str = create_body.get("name", "")
        self.url: str | None = None
        directory.mkdir(parents=True)
        _write_synced(directory / RUN_FILE, json.dumps(create_body, allow_nan=False) + "\n", mode="w")
        self._journal = directory / JOURNAL
        self._rows: dict[int, dict] = {}
        self._samples: list[dict] = []
        self._finished = False
        from preflab_client.runs import RunFields

        self.summary = RunFields(self, "summary", {})
        self.config = RunFields(self, "config", create_body.get("config") or {})
        self._tags: tuple[str, ...] = tuple(create_body.get("tags") or ())
        atexit.register(self._at_exit)

    def __repr__(self) -> str:
        return f"OfflineRun(name={self.name!r}, directory='{self.directory}')"

    @property
    def should_stop(self) -> bool:
        return False  # nobody can press Cancel on a run the server does not know

    @property
    def finished(self) -> bool:
        return self._finished

    def log(self, metrics: Mapping[str, Any], step: int, *, wall_time: float | None = None,
            tokens_seen: int | None = None) -> None:
        from preflab_client.runs import _step_number

        if self._finished:
            logger.warning("preflab: offline run %s is finished; what is logged after finish() is ignored",
                           self.directory)
            return
        step = _step_number(step)
        values = {}
        for name, value in metrics.items():
            try:
                values[str(name)] = metric_value(value)
            except NotANumber:
                logger.warning("preflab: metric %r is not a number (%s); it is not logged", name,
                               type(value).__name__)
        row = self._rows.setdefault(step, {"step": step, "metrics": {},
                                           "wall_time": time.time() if wall_time is None else float(wall_time)})
        row["metrics"].update(values)
        if tokens_seen is not None:
            row["tokens_seen"] = int(tokens_seen)
        if len(self._rows) + len(self._samples) >= FLUSH_ROWS:
            self._flush()

    def log_samples(self, samples: Iterable[Mapping[str, Any]], step: int) -> None:
        from preflab_client.runs import _sample_row, _step_number

        if self._finished:
            return
        step = _step_number(step)
        self._samples.extend(_sample_row(sample, step) for sample in samples)
        if len(self._rows) + len(self._samples) >= FLUSH_ROWS:
            self._flush()

    @property
    def tags(self) -> tuple[str, ...]:
        return self._tags

    @tags.setter
    def tags(self, tags: Iterable[str]) -> None:
        self._tags = tuple(dict.fromkeys(str(tag).strip() for tag in tags))
        self.update(tags=list(self._tags))

    def update(self, *, summary: Mapping[str, Any] | None = None, config: Mapping[str, Any] | None = None,
               tags: Iterable[str] | None = None) -> None:
        """As ExternalRun.update: written to the journal after the rows logged before it, sent by the sync."""
        from preflab_client.runs import update_body

        body = update_body(summary=summary, config=config, tags=tags)
        if body and not self._finished:
            self._flush(then=[{"kind": "update", "body": body}])

    def finish(self, status: str | None = None, *, error: str | None = None, timeout: float = 0.0) -> None:
        """Write what is left and the end of the run; `preflab sync` sends it all."""
        if self._finished:
            return
        body: dict[str, Any] = {"status": status or "succeeded"}
        if error:
            body["error"] = storable_text(error)
        self._flush(then=[{"kind": "finish", "body": body}])
        self._finished = True
        atexit.unregister(self._at_exit)
        logger.info("preflab: offline run kept in %s; `preflab sync %s` (or Client.sync_offline) sends it",
                    self.directory, self.directory)

    def fail(self, message: str, *, timeout: float = 0.0) -> None:
        self.finish("failed", error=message)

    def __enter__(self) -> OfflineRun:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.finish()
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("canceled", error="interrupted (KeyboardInterrupt)")
        else:
            self.fail(f"{exc_type.__name__}: {exc}")

    def _flush(self, then: list[dict] | None = None) -> None:
        entries = []
        rows = list(self._rows.values())
        for start in range(0, len(rows), REQUEST_ROWS_MAX):
            entries.append({"kind": "log", "body": {"rows": rows[start:start + REQUEST_ROWS_MAX]}})
        for start in range(0, len(self._samples), REQUEST_SAMPLES_MAX):
            entries.append({"kind": "samples", "body": {"batch_id": str(uuid.uuid4()),
                                                        "samples": self._samples[start:start + REQUEST_SAMPLES_MAX]}})
        entries += then or []
        self._rows, self._samples = {}, []
        if entries:
            _write_synced(self._journal, "".join(json.dumps(entry, allow_nan=False) + "\n" for entry in entries))

    def _at_exit(self) -> None:
        """The program ends without finish(): keep what was logged; the run stays open until synced and ended."""
        self._flush()


@dataclass
class Synced:
    run_id: int
    rows: int = 0
    samples: int = 0
    already: bool = False  # synced completely before: nothing was sent this time

    def __str__(self) -> str:
        if self.already:
            return f"already synced: run {self.run_id}"
        return f"synced to run {self.run_id}: {self.rows:,} metric rows, {self.samples:,} samples"


def sync_offline(client: Any, directory: str | Path) -> Synced:
    """Create the offline run in `directory` on `client`'s server and send what it logged (the module's
    docstring); ServerUnreachable (an ApiError) if the server stops answering, after which syncing again goes on."""
    from preflab_client.http import ServerUnreachable

    directory = Path(directory)
    create_body = json.loads((directory / RUN_FILE).read_text())
    synced_path = directory / SYNCED_FILE
    state = json.loads(synced_path.read_text()) if synced_path.exists() else None
    if state is not None and state.get("url") != client.url:
        raise ValueError(f"{directory} was synced to {state.get('url')}, not {client.url}")
    if state is not None and state.get("complete"):
        return Synced(run_id=state["run_id"], already=True)
    if state is None:
        run = client.post("runs/external", create_body)
        state = {"url": client.url, "run_id": run["id"], "complete": False}
        _write_synced(synced_path, json.dumps(state) + "\n", mode="w")
    result = Synced(run_id=state["run_id"])
    sender = EntrySender(client, result.run_id)
    rejected = directory / REJECTED
    try:
        for entry in _journal_entries(directory / JOURNAL):
            if entry["kind"] == "finish":
                entry = honest_finish(entry, rejected)
            try:
                sender.send(entry)
            except Unreachable as error:
                raise ServerUnreachable(f"{error}; run `preflab sync {directory}` again to go on",
                                        method="POST", path=f"runs/{result.run_id}") from None
            except Refused as refusal:
                for part, reason in refusal.parts(entry):
                    record = {"status": reason.status, "detail": reason.detail, "entry": part}
                    _write_synced(rejected, json.dumps(record, allow_nan=False) + "\n")
                    logger.warning("preflab: the server refused a %s request of offline run %s (%s); it is kept in "
                                   "%s", part["kind"], directory, reason, rejected)
                continue
            rows, samples = entry_counts(entry)
            result.rows += rows
            result.samples += samples
    finally:
        sender.session.close()
    _write_synced(synced_path, json.dumps({**state, "complete": True}) + "\n", mode="w")
    return result


def _journal_entries(journal: Path) -> Iterable[dict]:
    if not journal.exists():
        return
    with open(journal, "rb") as handle:
        for line in handle:
            try:
                yield json.loads(line)
            except ValueError:
                logger.warning("preflab: %s ends with a line cut short; it is skipped", journal)
                return


def offline_directories(root: Path) -> list[Path]:
    """The offline runs under `root`, oldest first."""
    return sorted(path.parent for path in root.glob(f"*/{RUN_FILE}"))
