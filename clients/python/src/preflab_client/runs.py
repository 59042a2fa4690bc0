"""`ExternalRun`: a training run logged into Preflab's dashboards by a program outside Preflab.

    with client.init_run("my grpo", config=args, total_steps=1000) as run:
        for step in range(1, 1001):
            ...
            run.log({"loss": loss, "reward/mean": reward}, step=step)
            if run.should_stop:        # someone pressed Cancel on the run's page
                break

Logging never blocks or crashes training. `log` only puts the row in memory; a background thread sends rows
in batches (up to BATCH_ROWS rows, or what gathered in BATCH_SECONDS), sends a heartbeat every
HEARTBEAT_SECONDS and reads whether the run was asked to stop. While the server cannot be reached (no
connection, a timeout, a 5xx), every batch goes to the run's journal on disk (preflab_client.outbox) and the
journal is replayed in order once the server answers again. The server makes replays harmless: metric rows
are idempotent by (run, step), samples by a batch id chosen here.

Delivery: every request stays within the server's bounds (preflab_client.outbox: REQUEST_ROWS_MAX rows,
REQUEST_SAMPLES_MAX samples, REQUEST_BYTES_MAX bytes; a 413 halves the request, never final). When more than
OUTGOING_ITEMS_MAX rows and samples wait in memory (a loop logging faster than the server stores), they go to the
journal and are sent from there in order, so memory stays bounded. Rows the server refuses for their content are
kept in rejected.jsonl, and a run finished as "succeeded" then ends "failed", saying how many and where
(outbox.honest_finish). A run the server failed for missing heartbeats still takes this run's rows, and a
heartbeat reopens it (webapp.experiments.services.external); `Client.init_run(..., run_id=N)` reattaches to a
run by id, `mode="offline"` writes one to disk instead (preflab_client.offline).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from preflab_client.artifacts import upload_artifact
from preflab_client.http import Server
from preflab_client.outbox import (
    REQUEST_ROWS_MAX,
    REQUEST_SAMPLES_MAX,
    EntrySender,
    Refused,
    RunOutbox,
    Unreachable,
    drain,
    entry_counts,
    honest_finish,
    outbox_root,
    replay_outboxes,
    undelivered_error,
)
from preflab_client.values import NotANumber, metric_value, number_text, plain_json, storable_text

logger = logging.getLogger("preflab_client")

BATCH_ROWS = 500
# rows and samples sealed but not yet sent that the sending thread keeps in memory; past this it writes them to the
# journal and sends from there, so a loop that logs faster than the server stores keeps memory bounded
OUTGOING_ITEMS_MAX = 20_000
# how long one turn of the thread sends from the journal before it seals (and spills) what was logged meanwhile
JOURNAL_TURN_SECONDS = 1.0
BATCH_SECONDS = 1.0
HEARTBEAT_SECONDS = 10.0
RETRY_SECONDS = 2.0
FINISH_TIMEOUT = 30.0
# how long a program that ends without finish() waits for its last rows before they stay on disk
EXIT_TIMEOUT = 5.0


class ExternalRun:
    """Made by `Client.init_run`. `id`, `name` and `url` (the run's page) describe it."""

    def __init__(self, client: Server, run: Mapping[str, Any]) -> None:
        self.id: int = run["id"]
        self.name: str = run.get("name", "")
        self.url: str | None = run.get("url")
        self.server_url = client.url
        self._client = client
        self._sender = EntrySender(client, self.id)
        self._outbox = RunOutbox(outbox_root(client), server_url=client.url, run_id=self.id)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        # the batch being gathered: one row per step (a step logged twice merges, as the server does)
        self._rows: dict[int, dict] = {}
        self._samples: list[dict] = []
        self._batch_started: float | None = None
        # sealed requests not yet answered, oldest first; while offline they go to the journal instead
        self._outgoing: deque[dict] = deque()
        self._online = True
        # the queue went past OUTGOING_ITEMS_MAX: sending from the journal, the server answering
        self._spilled = False
        self._next_retry = 0.0
        self._last_heartbeat = time.monotonic()
        self._closing = False
        self._close_deadline = 0.0
        self._abandoned = False
        self._finished = False
        self._finish_answer: Any = None
        self._stop_requested = False
        self._warned: set[str] = set()
        # W&B's run.summary / run.config / run.tags: a change is sent in order with the rows (an "update" request)
        self.summary = RunFields(self, "summary", run.get("summary") or {})
        self.config = RunFields(self, "config", run.get("config") or {})
        self._tags: tuple[str, ...] = tuple(run.get("tags") or ())
        self.group: str = run.get("group") or ""
        self.system_metrics: Any = None  # a SystemMetrics sampler, with init_run(system_metrics=True)
        self.latest_step = 0  # the highest step logged: system metrics are logged at it
        self._thread = threading.Thread(target=self._work, name=f"preflab-run-{self.id}", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    def __repr__(self) -> str:
        return f"ExternalRun(id={self.id}, name={self.name!r}, url={self.url!r})"

    # --- what a training loop calls ------------------------------------------------------------------------

    def log(self, metrics: Mapping[str, Any], step: int, *, wall_time: float | None = None,
            tokens_seen: int | None = None) -> None:
        """Metrics of one step (Preflab's names: loss, reward/mean, kl, ...). Numbers of any kind; NaN and
        infinities are kept; None is stored as null. Never raises and never waits for the network."""
        try:
            step = _step_number(step)
            values: dict[str, Any] = {}
            for name, value in metrics.items():
                try:
                    values[str(name)] = metric_value(value)
                except NotANumber:
                    self._warn_once(f"not-a-number:{name}", "preflab: metric %r is not a number (%s); it is not "
                                    "logged", name, type(value).__name__)
            if not values and tokens_seen is None:
                return
            with self._lock:
                if self._refuse_after_finish():
                    return
                row = self._rows.get(step)
                if row is None:
                    row = self._rows[step] = {"step": step, "metrics": {},
                                              "wall_time": time.time() if wall_time is None else float(wall_time)}
                row["metrics"].update(values)
                self.latest_step = max(self.latest_step, step)
                if tokens_seen is not None:
                    row["tokens_seen"] = int(tokens_seen)
                self._batch_grew()
        except Exception as error:  # a logging call must never take the training down
            self._warn_once("log-error", "preflab: log() of run %d failed (%s); training goes on", self.id, error)

    def log_samples(self, samples: Iterable[Mapping[str, Any]], step: int) -> None:
        """What the model wrote at `step`: dicts with prompt, completion, and optionally rewards ({name: number})
        and advantage. Never raises."""
        try:
            step = _step_number(step)
            rows = [_sample_row(sample, step) for sample in samples]
            with self._lock:
                if self._refuse_after_finish():
                    return
                self._samples.extend(rows)
                self._batch_grew()
        except Exception as error:
            self._warn_once("samples-error", "preflab: log_samples() of run %d failed (%s); training goes on",
                            self.id, error)

    def log_artifact(self, path: str | Path, name: str | None = None, kind: str = "file") -> dict:
        """Send a file (an evaluation table, a plot, a model card) as this run's artifact `name` (the file's name
        by default), directly and at once, also after finish(): unlike log(), a failure raises (an ApiError
        saying why; 413 past the server's PREFLAB_UPLOAD_MAX_BYTES, 1 GiB unless set). The same name again
        replaces it. → {name, kind, size, sha256, created_at}."""
        return upload_artifact(self._client, self.id, path, name=name, kind=kind)

    @property
    def tags(self) -> tuple[str, ...]:
        return self._tags

    @tags.setter
    def tags(self, tags: Iterable[str]) -> None:
        """`run.tags = [...]` (or `run.tags += ("best",)`) replaces the run's tags on the server."""
        tags = tuple(dict.fromkeys(str(tag).strip() for tag in tags))
        self._tags = tags
        self.update(tags=list(tags))

    def update(self, *, summary: Mapping[str, Any] | None = None, config: Mapping[str, Any] | None = None,
               tags: Iterable[str] | None = None) -> None:
        """Merge `summary` / `config` into the run's (key by key) and replace its tags; sent after the rows
        logged before it, kept in the journal like them. Never raises. `run.summary[...] = ...`,
        `run.config.update(...)` and `run.tags = ...` call this."""
        try:
            body = update_body(summary=summary, config=config, tags=tags)
            if not body:
                return
            with self._lock:
                if self._refuse_after_finish():
                    return
                self._seal()
                self._outgoing.append({"kind": "update", "body": body})
            self._wake.set()
        except Exception as error:
            self._warn_once("update-error", "preflab: update() of run %d failed (%s); training goes on", self.id,
                            error)

    @property
    def should_stop(self) -> bool:
        """True once the run was asked to stop on Preflab (Cancel on its page); read with each heartbeat."""
        return self._stop_requested

    @property
    def finished(self) -> bool:
        return self._finished

    def finish(self, status: str | None = None, *, error: str | None = None,
               timeout: float = FINISH_TIMEOUT) -> dict | None:
        """Send what is left and end the run: "succeeded", or "canceled" if it was asked to stop. Waits at
        most `timeout` seconds; what could not be sent by then stays on disk (a warning says where) for
        `Client.replay_outbox()` or the next `init_run`. Returns the run as the server has it, or None."""
        if self.system_metrics is not None:
            self.system_metrics.stop()
        with self._lock:
            if self._finished:
                return self._finish_answer
            self._finished = True
            body: dict[str, Any] = {"status": status or ("canceled" if self._stop_requested else "succeeded")}
            if error:
                body["error"] = storable_text(error)
            self._seal()
            self._outgoing.append({"kind": "finish", "body": body})
        self._close(timeout, finishing=True)
        return self._finish_answer

    def fail(self, message: str, *, timeout: float = FINISH_TIMEOUT) -> dict | None:
        """End the run as failed with `message` as its error."""
        return self.finish("failed", error=message, timeout=timeout)

    def __enter__(self) -> ExternalRun:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.finish()
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("canceled", error="interrupted (KeyboardInterrupt)")
        else:
            self.fail(f"{exc_type.__name__}: {exc}")

    # --- the background thread -----------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            replay_outboxes(self._client)  # what earlier processes of this server left behind
        except Exception as error:
            logger.warning("preflab: could not replay earlier runs' journals: %s", error)
        while True:
            try:
                if self._step_once():
                    return
            except Exception:  # keep working: a bug here must not silence the run
                logger.exception("preflab: run %d: unexpected error in the sending thread", self.id)
                time.sleep(RETRY_SECONDS)

    def _step_once(self) -> bool:
        """One turn of the thread's loop; True when the thread is done."""
        with self._lock:
            if self._abandoned:
                return True
            if self._batch_due():
                self._seal()
            closing = self._closing
            waiting = self._outgoing_items() if self._online else 0
            if waiting > OUTGOING_ITEMS_MAX:
                self._online, self._spilled, self._next_retry = False, True, 0.0
                logger.debug("preflab: run %d: %d rows and samples wait to be sent; they go to the journal %s and "
                             "are sent from there, in order", self.id, waiting, self._outbox.journal)
        self._send_outgoing()
        if not self._online and time.monotonic() >= self._next_retry:
            self._replay_journal()
        if self._online and not closing and time.monotonic() - self._last_heartbeat >= HEARTBEAT_SECONDS:
            self._heartbeat()
        if closing:
            with self._lock:
                idle = not self._outgoing and not self._rows and not self._samples
            if idle and (self._online or time.monotonic() >= self._close_deadline):
                return True
        self._wake.wait(self._seconds_to_wait(closing))
        self._wake.clear()
        return False

    def _refuse_after_finish(self) -> bool:
        """Checked with the lock held, so that nothing is added behind the finish request."""
        if self._finished:
            self._warn_once("log-after-finish", "preflab: run %d is finished; what is logged after finish() is "
                            "ignored", self.id)
        return self._finished

    def _batch_grew(self) -> None:
        """Called with the lock held after rows were added."""
        if self._batch_started is None:
            self._batch_started = time.monotonic()
            self._wake.set()
        elif len(self._rows) + len(self._samples) >= BATCH_ROWS:
            self._wake.set()

    def _batch_due(self) -> bool:
        if self._batch_started is None:
            return False
        full = len(self._rows) + len(self._samples) >= BATCH_ROWS
        return full or self._closing or time.monotonic() - self._batch_started >= BATCH_SECONDS

    def _outgoing_items(self) -> int:
        return sum(sum(entry_counts(entry)) for entry in self._outgoing)

    def _seal(self) -> None:
        """The gathered rows become requests at the end of the outgoing queue (lock held), each within the
        server's bounds of a request (REQUEST_ROWS_MAX; EntrySender also splits by bytes)."""
        rows = list(self._rows.values())
        for start in range(0, len(rows), REQUEST_ROWS_MAX):
            self._outgoing.append({"kind": "log", "body": {"rows": rows[start:start + REQUEST_ROWS_MAX]}})
        for start in range(0, len(self._samples), REQUEST_SAMPLES_MAX):
            self._outgoing.append({"kind": "samples", "body": {
                "batch_id": str(uuid.uuid4()), "samples": self._samples[start:start + REQUEST_SAMPLES_MAX]}})
        self._rows = {}
        self._samples = []
        self._batch_started = None

    def _seconds_to_wait(self, closing: bool) -> float:
        if closing:
            if self._online or self._spilled:
                return 0.05 if self._online else 0.0
            return min(RETRY_SECONDS, max(0.0, self._close_deadline - time.monotonic()))
        now = time.monotonic()
        waits = [HEARTBEAT_SECONDS - (now - self._last_heartbeat), 1.0]
        if self._batch_started is not None:
            waits.append(BATCH_SECONDS - (now - self._batch_started))
        if not self._online:
            waits.append(self._next_retry - now)
        return max(0.01, min(waits))

    def _send_outgoing(self) -> None:
        while True:
            with self._lock:
                if self._abandoned or not self._outgoing:
                    return
                if not self._online:
                    self._outbox.append(list(self._outgoing))
                    self._outgoing.clear()
                    return
                head = entry = self._outgoing[0]
            if entry["kind"] == "finish":
                entry = honest_finish(entry, self._outbox.rejected)
            try:
                answer = self._sender.send(entry)
            except Unreachable as error:
                self._go_offline(error)
                continue  # the next turn journals this entry and everything after it
            except Refused as refusal:
                for part, reason in refusal.parts(entry):
                    self._refused(part, reason)
            else:
                if entry["kind"] == "finish":
                    self._finish_answer = answer
            with self._lock:
                if self._outgoing and self._outgoing[0] is head:
                    self._outgoing.popleft()

    def _go_offline(self, error: Unreachable) -> None:
        with self._lock:
            was_reachable = self._online or self._spilled
            self._online, self._spilled = False, False
            self._next_retry = time.monotonic() + RETRY_SECONDS
        if was_reachable:
            logger.warning("preflab: the server at %s cannot be reached (%s); run %d keeps what it logs in %s and "
                           "sends it when the server answers again", self.server_url, error, self.id,
                           self._outbox.journal)

    def _replay_journal(self) -> None:
        result = drain(self._outbox, self._sender, on_refused=self._refused, budget_s=JOURNAL_TURN_SECONDS)
        if result.finish_answer is not None:
            self._finish_answer = result.finish_answer
        if result.unreachable:
            self._go_offline(Unreachable("no answer while sending the journal"))
            return
        if not result.complete:
            return  # the next turn goes on, after sealing what was logged meanwhile
        with self._lock:
            self._online = True
            spilled, self._spilled = self._spilled, False
        if spilled:
            return
        logger.info("preflab: the server at %s answers again; replayed %d metric rows and %d samples of run %d",
                    self.server_url, result.rows, result.samples, self.id)

    def _refused(self, entry: dict, refusal: Refused) -> None:
        """A request the server will never take (a 4xx): kept in rejected.jsonl, not retried, not dropped."""
        self._outbox.reject(entry, refusal)
        self._warn_once(f"refused:{refusal.status}", "preflab: the server refused a %s request of run %d (%s); it "
                        "is kept in %s", entry["kind"], self.id, refusal, self._outbox.rejected)

    def _heartbeat(self) -> None:
        self._last_heartbeat = time.monotonic()
        try:
            self._sender.call("POST", "heartbeat")
            run = self._sender.call("GET", "")
        except (Unreachable, Refused) as error:
            logger.debug("preflab: heartbeat of run %d: %s", self.id, error)
            return
        if run.get("cancel_requested") or run.get("status") == "canceled":
            if not self._stop_requested:
                logger.info("preflab: run %d was asked to stop", self.id)
            self._stop_requested = True

    # --- ending ------------------------------------------------------------------------------------------

    def _close(self, timeout: float, *, finishing: bool) -> None:
        with self._lock:
            self._closing = True
            self._close_deadline = time.monotonic() + timeout
        self._wake.set()
        self._thread.join(timeout + 5)
        if self._thread.is_alive():  # stuck in a request: keep everything not yet answered on disk
            with self._lock:
                self._abandoned = True
                self._seal()
                self._outbox.append(list(self._outgoing))
                self._outgoing.clear()
        atexit.unregister(self._at_exit)
        undelivered = undelivered_error(self._outbox.rejected)
        if undelivered:
            logger.warning("preflab: run %d: %s", self.id, undelivered)
        entries, rows, samples = self._outbox.pending_counts()
        if entries:
            logger.warning(
                "preflab: run %d: %d metric rows, %d samples%s could not be sent within %.0f s; they are kept in %s "
                "and sent by Client.replay_outbox() or the next init_run", self.id, rows, samples,
                " and the end of the run" if finishing else "", timeout, self._outbox.journal)
        self._outbox.release()
        if not self._thread.is_alive():
            self._sender.session.close()

    def _at_exit(self) -> None:
        """The program ends without finish(): send what was logged (briefly), keep the rest on disk. The run
        itself is left open; the server fails it when its heartbeats stop."""
        if self._finished:
            return
        if self.system_metrics is not None:
            self.system_metrics.stop()
        logger.warning("preflab: the program ends but run %d was not finished (call run.finish() or use "
                       "`with client.init_run(...) as run:`)", self.id)
        with self._lock:
            self._finished = True
            self._seal()
        self._close(EXIT_TIMEOUT, finishing=False)

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)


class RunFields(dict):
    """`run.summary` and `run.config`: a dict whose changes (`[key] = value`, `update`, `setdefault`) are sent to
    the run on the server, merged into its stored fields. Removing a key is not sent (the server merges)."""

    def __init__(self, run: ExternalRun, field: str, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self._run = run
        self._field = field

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def update(self, values: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), /, **more: Any) -> None:
        changes = {str(key): value for key, value in dict(values, **more).items()}
        super().update(changes)
        if changes:
            self._run.update(**{self._field: changes})

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]


def update_body(*, summary: Mapping[str, Any] | None, config: Mapping[str, Any] | None,
                tags: Iterable[str] | None) -> dict[str, Any]:
    """The body of an "update" request (POST /runs/{id}/update); empty when there is nothing to change."""
    body: dict[str, Any] = {}
    if summary:
        body["summary"] = plain_json(dict(summary))
    if config:
        body["config"] = plain_json(dict(config))
    if tags is not None:
        body["tags"] = [str(tag) for tag in tags]
    return body


def _step_number(step: Any) -> int:
    number = int(step)
    if number != step or number < 0:
        raise ValueError(f"step must be a whole number >= 0, got {step!r}")
    return number


def _sample_row(sample: Mapping[str, Any], step: int) -> dict:
    row: dict[str, Any] = {"step": step, "prompt": _text(sample.get("prompt", "")),
                           "completion": _text(sample.get("completion", ""))}
    rewards = sample.get("rewards")
    if rewards:
        row["rewards"] = {str(name): metric_value(value) for name, value in rewards.items()}
    advantage = sample.get("advantage")
    if advantage is not None:
        row["advantage"] = number_text(float(advantage))
    return row


def _text(value: Any) -> str:
    """A prompt or completion as storable text: a conversation ({role, content} messages) as "role: content"
    turns, a single assistant message as its content."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list | tuple) and all(isinstance(item, Mapping) for item in value):
        if len(value) == 1 and value[0].get("role") == "assistant":
            return storable_text(str(value[0].get("content", "")))
        return storable_text("\n\n".join(f"{item.get('role', '')}: {item.get('content', '')}" for item in value))
    return storable_text(str(value))
