"""A run's files sent to the server and fetched back (artifacts): sent directly, not through the run's journal,
with their length, so that a failure is an ApiError at once rather than a row waiting in the outbox."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import requests

from preflab_client.http import API_PREFIX, ApiError, Server, ServerUnreachable, error_detail

# (connect, read): the read waits for the server to have written the whole file
UPLOAD_TIMEOUT = (10.0, 600.0)
DOWNLOAD_CHUNK = 2**20


def upload_artifact(server: Server, run_id: int, path: str | Path, *, name: str | None = None,
                    kind: str = "file") -> dict:
    """PUT the file as the run's artifact `name` (the file's own name by default); the server keeps at most its
    PREFLAB_UPLOAD_MAX_BYTES (1 GiB unless set) and answers 413 past it. → {name, kind, size, sha256, created_at}."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file to log as an artifact")
    name = name or path.name
    where = f"runs/{run_id}/artifacts/{name}"
    with server.new_session() as session, path.open("rb") as body:
        try:
            response = session.put(f"{server.url}{API_PREFIX}/{where}", params={"kind": kind}, data=body,
                                   headers={"Content-Type": "application/octet-stream",
                                            "Content-Length": str(path.stat().st_size),
                                            # one request a session: nothing to keep alive
                                            "Connection": "close"}, timeout=UPLOAD_TIMEOUT)
        except requests.RequestException as error:
            raise ServerUnreachable(f"{type(error).__name__}: {error}", method="PUT", path=where) from None
        with response:
            if response.status_code >= 400:
                raise ApiError(response.status_code, error_detail(response), method="PUT", path=where)
            return response.json()


def save_response(response: requests.Response, dest: Path) -> Path:
    """Write a streamed answer to `dest` through a temporary file beside it: a broken download leaves nothing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with response, tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", delete=False) as partial:
        try:
            for chunk in response.iter_content(DOWNLOAD_CHUNK):
                partial.write(chunk)
        except BaseException:
            partial.close()
            os.unlink(partial.name)
            raise
    os.replace(partial.name, dest)
    return dest
