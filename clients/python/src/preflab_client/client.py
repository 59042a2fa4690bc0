"""`Client`: Preflab's HTTP API v1 (/api/v1/) from Python, with a personal token.

    client = Client("http://preflab:8000", token)      # or PREFLAB_URL / PREFLAB_TOKEN from the environment
    project = client.create_project("math prompts")
    client.import_records(project["id"], records)
    pairs = client.export_pairs(project["id"])          # a datasets.Dataset, TRL's preference format

Every refusal is an `ApiError` carrying the HTTP status and the server's detail. Lists the server pages are
iterated page by page (generators), so a large project never sits in memory as one answer.
"""

from __future__ import annotations

import json
import logging
import os
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import requests
import urllib3

from preflab_client.artifacts import save_response, upload_artifact
from preflab_client.http import (
    API_PREFIX,
    ApiError,
    ServerUnreachable,
    api_base_url,
    error_detail,
    not_the_api_text,
    token_session,
)
from preflab_client.offline import (
    RUN_FILE,
    OfflineRun,
    Synced,
    offline_directories,
    offline_root,
    sync_offline,
)
from preflab_client.outbox import replay_outboxes
from preflab_client.runs import ExternalRun
from preflab_client.values import decode_metrics, plain_json

if TYPE_CHECKING:
    from datasets import Dataset

logger = logging.getLogger("preflab_client")

# (connect, read) seconds; an import of many records or a long export may take minutes to answer
DEFAULT_TIMEOUT = (10.0, 300.0)
PAGE_SIZE = 500
# Up to this many records go as one JSON body; more are written as NDJSON to a temporary file and streamed
# from it, so the encoded records are never held in memory next to the records themselves.
JSON_BODY_MAX_RECORDS = 1000


class Client:
    """Preflab's API. `url` is the server (PREFLAB_URL), `token` a personal token (PREFLAB_TOKEN); `outbox_dir`
    is where runs keep what they could not send yet (PREFLAB_OUTBOX_DIR, else ~/.cache/preflab/outbox)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
        outbox_dir: str | Path | None = None,
    ) -> None:
        url = url or os.environ.get("PREFLAB_URL")
        token = token or os.environ.get("PREFLAB_TOKEN")
        if not url:
            raise ValueError("no Preflab URL: pass url= or set PREFLAB_URL")
        if not token:
            raise ValueError("no Preflab token: pass token= or set PREFLAB_TOKEN (create one on your account page)")
        self.url = api_base_url(url)
        self._token = token
        self.timeout = timeout
        self.outbox_dir = Path(outbox_dir) if outbox_dir is not None else None
        self._session = self.new_session()

    def __repr__(self) -> str:  # never the token
        return f"Client(url={self.url!r})"

    def close(self) -> None:
        """Close the kept-alive connections (a run's own connections close when it finishes)."""
        self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def new_session(self) -> requests.Session:
        """A session that sends the token (one per thread: requests' sessions are not shared across threads)."""
        return token_session(self._token)

    def api_url(self, path: str) -> str:
        return f"{self.url}{API_PREFIX}/{path.lstrip('/')}"

    # --- requests -------------------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json_body: Any = None,
                data: Any = None, headers: Mapping[str, str] | None = None, stream: bool = False) -> Any:
        """One call: the decoded JSON answer (None for 204), or the response itself when `stream`."""
        response = self._send(method, path, params=params, json_body=json_body, data=data, headers=headers,
                              stream=stream)
        if stream:
            return response
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:  # a page, not the API (a wrong base URL, a login page behind a proxy)
            raise ApiError(response.status_code, not_the_api_text(response), method=method, path=path) from None

    def _send(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json_body: Any = None,
              data: Any = None, headers: Mapping[str, str] | None = None, stream: bool = False) -> requests.Response:
        headers = dict(headers or {})
        if json_body is not None:
            data = json.dumps(plain_json(json_body), allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        params = {key: value for key, value in (params or {}).items() if value is not None}
        try:
            response = self._session.request(method, self.api_url(path), params=params, data=data,
                                             headers=headers, timeout=self.timeout, stream=stream)
        except requests.RequestException as error:
            raise ServerUnreachable(f"{type(error).__name__}: {error}", method=method, path=path) from None
        if response.status_code >= 400:
            status, detail = response.status_code, error_detail(response)
            response.close()
            del response  # an error kept by the caller keeps this frame: it must not keep the connection open
            raise ApiError(status, detail, method=method, path=path)
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json_body=body if body is not None else {})

    def pages(self, path: str, **params: Any) -> Iterator[dict]:
        """Every item of a paged list ({"items", "count", "next"}), fetched PAGE_SIZE at a time."""
        offset: Any = 0
        while offset is not None:
            page = self.get(path, **params, limit=PAGE_SIZE, offset=offset)
            yield from page["items"]
            offset = page.get("next")
            if not page["items"]:
                return

    # --- projects ------------------------------------------------------------------------------------------

    def projects(self, *, archived: str | None = None) -> Iterator[dict]:
        """archived: None (projects not archived), "only" or "all"."""
        return self.pages("projects", archived=archived)

    def create_project(self, name: str, **fields: Any) -> dict:
        """fields: guidelines, mode (one of the server's annotation modes: ProjectIn.mode in its OpenAPI schema),
        responses_per_item, annotators_per_item, lease_minutes; for the ratings mode rating_aspects ([{name,
        description}]), rating_min and rating_max."""
        return self.post("projects", {"name": name, **fields})

    def project(self, project_id: int) -> dict:
        """The project with its progress and agreement figures."""
        return self.get(f"projects/{project_id}")

    def suggestion_agreement(self, project_id: int) -> dict:
        """Per suggestion source: its agreement with the annotators (accuracy with its interval, tau-b, ties), over
        the project and per round: {"sources": [...], "rounds": [{"round": n, "sources": [...]}]}."""
        return self.get(f"projects/{project_id}/suggestions/agreement")

    def members(self, project_id: int) -> list[dict]:
        return self.get(f"projects/{project_id}/members")

    def add_member(self, project_id: int, username: str) -> Any:
        return self.post(f"projects/{project_id}/members", {"username": username})

    def remove_member(self, project_id: int, username: str) -> None:
        self.request("DELETE", f"projects/{project_id}/members/{username}")

    # --- data ----------------------------------------------------------------------------------------------

    def import_records(self, project_id: int, records: Iterable[Mapping[str, Any]]) -> dict:
        """Import prompts (and responses or chosen/rejected pairs) in any format the project page's import takes.
        All or nothing; records whose external id exists are skipped. → {"created": n, "skipped": m}.

        A short list goes as one JSON body; anything longer (or any iterator) is encoded one record at a time
        into a temporary NDJSON file and streamed from there with its exact length.
        """
        if isinstance(records, list | tuple) and len(records) <= JSON_BODY_MAX_RECORDS:
            return self.post(f"projects/{project_id}/records", {"records": list(records)})
        with tempfile.TemporaryFile(prefix="preflab-records-") as body:
            size = _write_ndjson(records, body)
            body.seek(0)
            return self.request("POST", f"projects/{project_id}/records", data=body, headers={
                "Content-Type": "application/x-ndjson", "Content-Length": str(size)})

    def prompts(self, project_id: int) -> Iterator[dict]:
        """Every prompt of the project with its responses."""
        return self.pages(f"projects/{project_id}/prompts")

    def add_responses(self, prompt_id: int, texts: Iterable[str], *, source: str = "api",
                      detail: Mapping[str, Any] | None = None, model: str | None = None) -> list[dict]:
        """Add responses to a prompt, as a round of its project (calls naming one `model` join its round).
        source: "api" (the default), "model", "run" or "imported" (ResponsesIn.source in the OpenAPI schema);
        detail: how they were made (any JSON object). → [{id, text, prompt, round}]."""
        body: dict[str, Any] = {"texts": list(texts), "source": source}
        if detail is not None:
            body["detail"] = dict(detail)
        if model is not None:
            body["model"] = model
        return self.post(f"prompts/{prompt_id}/responses", body)

    def rankings(self, project_id: int) -> Iterator[dict]:
        """The project's rankings, as the rankings export writes them."""
        return self.pages(f"projects/{project_id}/rankings")

    def items(self, project_id: int) -> Iterator[dict]:
        """The project's items as this token's user annotates them: {id, external_id, prompt, messages,
        responses: [{id, text}] (those you are shown), answer (yours, or None)}."""
        return self.pages(f"projects/{project_id}/items")

    def submit_ranking(self, item_id: int, ranking: Iterable[int | Iterable[int]], rationale: str | None = None, *,
                       all_bad: bool = False, suggestion: int | None = None) -> dict:
        """Rank an item as this token's user, as the annotation page does: `ranking` is response ids best first,
        a list of ids in it a tie ([12, [14, 13], 15]). Sending the same answer again writes nothing
        (`changed` False); a different one replaces yours. `suggestion`: the id of the item's machine suggestion
        this answer accepts (recorded as its origin when the answer is that suggestion unchanged).
        → {id, item, tiers, all_bad, rationale, changed}."""
        body: dict[str, Any] = {
            "ranking": [entry if isinstance(entry, int) else list(entry) for entry in ranking], "all_bad": all_bad}
        if rationale is not None:
            body["rationale"] = rationale
        if suggestion is not None:
            body["suggestion"] = suggestion
        return self.post(f"items/{item_id}/ranking", body)

    def submit_labels(self, item_id: int, labels: Mapping[int, float | Mapping[str, float]],
                      rationale: str | None = None, *, suggestion: int | None = None) -> dict:
        """Label an item of a thumbs or ratings project as this token's user, as the annotation page does: thumbs
        {response id: 1 (up) or 0 (down)}, ratings {response id: {aspect: rating}}, every response shown (and
        aspect). The same answer again writes nothing (`changed` False); a different one replaces yours.
        `suggestion`: as submit_ranking's (any row of the item's suggestion names it).
        → {id, item, labels: [{response, aspect, value}], rationale, changed, ...}."""
        rows = [{"response": response, "aspect": aspect, "value": value}
                for response, given in labels.items()
                for aspect, value in (given.items() if isinstance(given, Mapping) else [("", given)])]
        body: dict[str, Any] = {"labels": rows}
        if rationale is not None:
            body["rationale"] = rationale
        if suggestion is not None:
            body["suggestion"] = suggestion
        return self.post(f"items/{item_id}/ranking", body)

    def pairs(self, project_id: int, *, format: str | None = "standard", strategy: str = "all",
              aggregation: str = "all", binarization: str = "random", seed: int = 0) -> Iterator[dict]:
        """Every preference pair as TRL rows, streamed as JSON lines from the server. format: "standard",
        "conversational", or None for the page export's choice (conversational when the project holds a
        conversation). aggregation: how disagreeing annotators' pairs combine: "all", "majority",
        "drop_conflicts", "resolved" (unresolved items left out, adjudicated ones as decided) or
        "annotator:<username>"; each row names its item's label_source. A ratings project's pairs are its ratings binarized:
        binarization "random" (a seeded random lower-rated response is rejected) or "worst"."""
        return self._json_lines(f"projects/{project_id}/pairs", {
            "format": format, "strategy": strategy, "aggregation": aggregation, "binarization": binarization,
            "seed": seed})

    def unpaired(self, project_id: int, *, format: str | None = "standard", aggregation: str = "all",
                 binarization: str = "random", seed: int = 0) -> Iterator[dict]:
        """Every unpaired (KTO) row, TRL's {prompt, completion, label} with annotator, response_id and source,
        streamed: thumbs as given, rankings' best up and worst down, ratings' binarized pairs (the README,
        «From feedback to training data»). format and aggregation as for `pairs`."""
        return self._json_lines(f"projects/{project_id}/unpaired", {
            "format": format, "aggregation": aggregation, "binarization": binarization, "seed": seed})

    def _json_lines(self, path: str, params: dict) -> Iterator[dict]:
        response = self.request("GET", path, params={**params, "stream": "jsonl"}, stream=True)
        with response:
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)

    def export_pairs(self, project_id: int, format: str | None = "standard", *, strategy: str = "all",
                     aggregation: str = "all", binarization: str = "random", seed: int = 0) -> Dataset:
        """The project's preference pairs as a `datasets.Dataset` (TRL's standard or conversational format),
        the rows the page's JSONL export writes. Needs `pip install preflab-client[datasets]`."""
        try:
            import datasets
        except ImportError as error:
            raise ImportError(
                "Client.export_pairs returns a datasets.Dataset and needs the datasets package: "
                "pip install 'preflab-client[datasets]' (or use Client.pairs for plain dicts)"
            ) from error
        from preflab_client.pair_dataset import dataset_from_rows

        return dataset_from_rows(datasets, self.pairs(project_id, format=format, strategy=strategy,
                                                         aggregation=aggregation, binarization=binarization,
                                                         seed=seed))

    # --- models --------------------------------------------------------------------------------------------

    def models(self) -> Iterator[dict]:
        return self.pages("models")

    def register_model(self, path: str, name: str | None = None) -> dict:
        body = {"path": path} if name is None else {"path": path, "name": name}
        return self.post("models", body)

    # --- runs ----------------------------------------------------------------------------------------------

    def runs(self, *, status: str | None = None, kind: str | None = None, q: str | None = None,
             tag: str | None = None, group: str | None = None, archived: str | None = None) -> Iterator[dict]:
        """archived: None (runs not archived), "only" or "all"."""
        return self.pages("runs", status=status, kind=kind, q=q, tag=tag, group=group, archived=archived)

    def run(self, run_id: int) -> dict:
        return self.get(f"runs/{run_id}")

    def create_run(self, kind: str, name: str, config: Mapping[str, Any],
                   data_source: Mapping[str, Any] | None = None) -> dict:
        """Launch a run on Preflab's workers, as the launch form does. A trainer's kind needs `data_source`
        ({"type": "arithmetic", "level": 1, "size": 64}, {"type": "project_pairs", "project_id": 3}); kind
        "external" takes none (or {"project_id": 3} for its project)."""
        body: dict[str, Any] = {"kind": kind, "name": name, "config": dict(config)}
        if data_source is not None:
            body["data_source"] = dict(data_source)
        return self.post("runs", body)

    def cancel_run(self, run_id: int) -> Any:
        return self.post(f"runs/{run_id}/cancel")

    def resume_run(self, run_id: int, checkpoint_id: int, *, remove_later: bool | None = None) -> dict:
        body: dict[str, Any] = {"checkpoint_id": checkpoint_id}
        if remove_later is not None:
            body["remove_later"] = remove_later
        return self.post(f"runs/{run_id}/resume", body)

    def fork_run(self, run_id: int, *, name: str | None = None, config: Mapping[str, Any] | None = None) -> dict:
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if config is not None:
            body["config"] = dict(config)
        return self.post(f"runs/{run_id}/fork", body)

    # --- archive and delete --------------------------------------------------------------------------------

    def archive_run(self, run_id: int, *, archived: bool = True) -> dict:
        """Hide the run from the lists (`archived=False` shows it again): {"id", "archived_at"}."""
        return self.post(f"runs/{run_id}/archive", {"archived": archived})

    def run_disk_usage(self, run_id: int) -> dict:
        """{"bytes", "text"}: what the run's checkpoints, samples, data and logs take on disk."""
        return self.get(f"runs/{run_id}/disk")

    def delete_run(self, run_id: int) -> dict:
        """Delete a run that is not queued or running, with its files: {"freed_bytes", "freed"}."""
        return self.request("DELETE", f"runs/{run_id}")

    def delete_checkpoint(self, run_id: int, checkpoint_id: int) -> dict:
        """Delete one checkpoint of a run that has ended, unless something uses it: {"freed_bytes", "freed"}."""
        return self.request("DELETE", f"runs/{run_id}/checkpoints/{checkpoint_id}")

    def archive_project(self, project_id: int, *, archived: bool = True) -> dict:
        return self.post(f"projects/{project_id}/archive", {"archived": archived})

    def delete_project(self, project_id: int) -> dict:
        """Delete a project (its items, rankings, rounds, jobs and uploads; its runs stay): {"freed_bytes", "freed"}."""
        return self.request("DELETE", f"projects/{project_id}")

    def metrics(self, run_id: int) -> Iterator[dict]:
        """Every logged row {step, wall_time, tokens_seen, metrics} in step order, none downsampled away;
        non-finite values come back as floats (nan, inf)."""
        after: int | None = None
        while True:
            page = self.get(f"runs/{run_id}/metrics", after_step=after, limit=PAGE_SIZE)
            for row in page["rows"]:
                yield {**row, "metrics": decode_metrics(row["metrics"])}
            after = page.get("next_after_step")
            if after is None or not page["rows"]:
                return

    def samples(self, run_id: int, *, step: int | None = None) -> Iterator[dict]:
        return self.pages(f"runs/{run_id}/samples", step=step)

    # --- lineage and checkpoints ------------------------------------------------------------------------------

    def lineage(self, run_id: int) -> dict:
        """{run, parent_id, data: {type, source, project, aggregation, rows, sha256}, checkpoints: [{id, step,
        ...}], rounds: [{project, round, checkpoint_id, step, model, responses, ...}]}: data source → run →
        checkpoints → the annotation rounds sampled from them."""
        return self.get(f"runs/{run_id}/lineage")

    def download_checkpoint(self, checkpoint_id: int, dest_dir: str | Path) -> Path:
        """Download a checkpoint (a directory: weights, config, tokenizer) into `dest_dir`, which must not exist or
        be empty, so that `AutoModelForCausalLM.from_pretrained(dest_dir)` loads it. Unpacked as it arrives into
        a temporary directory beside `dest_dir`, renamed into place once whole: a failed download leaves nothing."""
        dest = Path(dest_dir)
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise FileExistsError(f"{dest}: exists and is not an empty directory; choose a new one")
        dest.parent.mkdir(parents=True, exist_ok=True)
        response = self.request("GET", f"checkpoints/{checkpoint_id}/archive", stream=True)
        with response, tempfile.TemporaryDirectory(prefix=".preflab-download-", dir=dest.parent) as partial:
            try:
                with tarfile.open(fileobj=response.raw, mode="r|") as archive:
                    archive.extractall(partial, filter="data")
            except (tarfile.TarError, requests.RequestException, urllib3.exceptions.HTTPError, OSError) as error:
                raise ApiError(response.status_code, f"the checkpoint's download broke off: {error}",
                               method="GET", path=f"checkpoints/{checkpoint_id}/archive") from None
            if dest.exists():
                dest.rmdir()
            os.replace(partial, dest)
            Path(partial).mkdir()  # for TemporaryDirectory's cleanup, which expects it
        return dest

    # --- artifacts --------------------------------------------------------------------------------------------

    def upload_artifact(self, run_id: int, path: str | Path, *, name: str | None = None, kind: str = "file") -> dict:
        """Send a file as an external run's artifact (`ExternalRun.log_artifact` does this for its own run)."""
        return upload_artifact(self, run_id, path, name=name, kind=kind)

    def artifacts(self, run_id: int) -> list[dict]:
        """The run's artifacts: [{name, kind, size, sha256, created_at}] by name."""
        return self.get(f"runs/{run_id}/artifacts")

    def download_artifact(self, run_id: int, name: str, dest: str | Path) -> Path:
        """Save the run's artifact `name` as the file `dest` (or into `dest` under its name, if `dest` is a
        directory); written whole or not at all."""
        dest = Path(dest)
        if dest.is_dir():
            dest = dest / name
        return save_response(self.request("GET", f"runs/{run_id}/artifacts/{name}", stream=True), dest)

    # --- runs logged from here -----------------------------------------------------------------------------

    def init_run(self, name: str, config: Mapping[str, Any] | None = None, project_id: int | None = None,
                 total_steps: int | None = None, *, tags: Iterable[str] = (), group: str | None = None,
                 system_metrics: bool | float = False, run_id: int | None = None,
                 mode: str | None = None) -> ExternalRun | OfflineRun:
        """Start a run logged by this program (kind "external") and return it: `run.log(metrics, step)`,
        `run.log_samples(samples, step)`, `run.summary[...] = ...`, `run.config.update(...)`, `run.tags = ...`,
        `run.finish()` or `with client.init_run(...) as run:`. `tags` and `group` find it again
        (`runs(tag=..., group=...)`); `system_metrics=True` (or a number of seconds, default 10) logs CPU, RAM and
        GPU memory as system/... metrics (preflab_client.system_metrics).

        `run_id=N` (MLflow's `start_run(run_id=)`, W&B's `resume=`) reattaches to your external run N instead: it
        is running again whatever its end was, its rows, samples and config are kept (name, config, tags and the
        rest are not used), and rows for steps it has merge into them. ApiError 403 for another user's run, 409
        for a run Preflab runs itself.

        `mode="offline"` (or PREFLAB_MODE=offline) never contacts the server: the run is written to a directory
        (`run.directory`) that `preflab sync` or `Client.sync_offline` sends later (preflab_client.offline)."""
        mode = mode or os.environ.get("PREFLAB_MODE") or "online"
        if mode not in ("online", "offline"):
            raise ValueError(f'mode must be "online" or "offline" (PREFLAB_MODE); got {mode!r}')
        body = self._run_create_body(name, config, project_id, total_steps, tags, group)
        if mode == "offline":
            if run_id is not None:
                raise ValueError("an offline run cannot reattach to a run of the server (run_id)")
            return OfflineRun(offline_root(self) / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}", body)
        if run_id is not None:
            run = ExternalRun(self, self.post(f"runs/{int(run_id)}/reattach"))
        else:
            run = ExternalRun(self, self.post("runs/external", body))
        if system_metrics:
            from preflab_client.system_metrics import SYSTEM_METRICS_SECONDS, SystemMetrics

            seconds = SYSTEM_METRICS_SECONDS if system_metrics is True else float(system_metrics)
            run.system_metrics = SystemMetrics(run, seconds).start()
        return run

    @staticmethod
    def _run_create_body(name: str, config: Mapping[str, Any] | None, project_id: int | None,
                         total_steps: int | None, tags: Iterable[str] = (),
                         group: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name, "config": dict(config or {})}
        if project_id is not None:
            body["project_id"] = project_id
        if total_steps is not None:
            body["total_steps"] = total_steps
        if tags:
            body["tags"] = [str(tag) for tag in tags]
        if group:
            body["group"] = group
        return body

    def sync_offline(self, path: str | Path | None = None) -> list[Synced]:
        """Send offline runs (`init_run(..., mode="offline")`) to this server: the run directory `path`, or every
        one under `path` (default: the outbox directory's offline/). A run synced before is not sent again."""
        root = Path(path) if path is not None else offline_root(self)
        directories = [root] if (root / RUN_FILE).exists() else offline_directories(root)
        return [sync_offline(self, directory) for directory in directories]

    def replay_outbox(self) -> int:
        """Send what runs of this server left on disk (a process that crashed or lost the server), oldest
        first; returns the number of metric rows and samples sent."""
        return replay_outboxes(self)


def _write_ndjson(records: Iterable[Mapping[str, Any]], handle: IO[bytes]) -> int:
    size = 0
    for record in records:
        line = (json.dumps(plain_json(record), ensure_ascii=False, allow_nan=False) + "\n").encode()
        handle.write(line)
        size += len(line)
    return size
