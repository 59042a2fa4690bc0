"""Uploads to a real web server process, for tests/webapp/test_large_upload_server.py and
bench/bench_upload_memory.py: the server as deployed (gunicorn, as docker-compose.yml runs it) or as `manage.py
serve` runs it (runserver), a multipart body generated on the fly (never held in memory or written to disk by the
sender), and a process's peak resident memory."""

from __future__ import annotations

import http.client
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.processes import ChildProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
SEND_CHUNK = 2**20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


@dataclass
class WebServer(ChildProcess):
    port: int
    kind: str

    @property
    def request_pid(self) -> int:
        """The process that handles requests: gunicorn's one worker, or runserver itself."""
        if self.kind == "runserver":
            return self.process.pid
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return int(children[0])



def start_web_server(kind: str, env: dict[str, str], log_path: Path) -> WebServer:
    """`kind` is "gunicorn" (one sync worker, docker-compose's timeout) or "runserver" (threaded, no reloader)."""
    port = free_port()
    commands = {
        "gunicorn": [sys.executable, "-m", "gunicorn", "webapp.wsgi:application", "--bind", f"127.0.0.1:{port}",
                     "--workers", "1", "--timeout", "120", "--no-control-socket"],
        "runserver": [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
    }
    log = log_path.open("w")
    process = subprocess.Popen(commands[kind], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = WebServer(process=process, log_path=log_path, port=port, kind=kind)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{kind} exited with {process.returncode}:\n{server.log_tail()}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
            if kind == "runserver" or Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().strip():
                return server
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"{kind} did not answer within 60 s:\n{server.log_tail()}")


def server_environment(base: dict[str, str], **overrides: str) -> dict[str, str]:
    """A production-like server environment (DEBUG off) on top of `base` (the database, broker and data dir), with
    this process's SECRET_KEY, so that the sessions it creates are the server's."""
    from django.conf import settings

    return {**base, "DEBUG": "false", "SECRET_KEY": settings.SECRET_KEY, "ALLOWED_HOSTS": "127.0.0.1",
            "PYTHONUNBUFFERED": "1", **overrides}


def row_bytes(index: int, size: int) -> bytes:
    """One JSONL import row of exactly `size` bytes, a new id each: a prompt and two responses sharing the room."""
    head = f'{{"id": "r{index:010d}", "prompt": "'.encode()
    middle, tail = b'", "responses": ["', b'"]}\n'
    room = size - len(head) - len(middle) - len(tail) - len(b'", "')
    third = room // 3
    prompt = (f"Question {index}: " + "how many words are in this sentence " * (third // 36 + 1)).encode()[:third]
    first = (f"answer A{index} " + "lorem ipsum dolor sit amet " * (third // 27 + 1)).encode()[:third]
    second = (f"answer B{index} " + "consectetur adipiscing elit " * (room // 28 + 1)).encode()[: room - 2 * third]
    return head + prompt + middle + first + b'", "' + second + tail


def jsonl_body(total: int, *, row_size: int = 8192) -> Iterator[bytes]:
    """`total` bytes of JSONL rows (a multiple of row_size), in chunks of about SEND_CHUNK, made as they are sent."""
    if total % row_size:
        raise ValueError(f"{total} is not a multiple of the row size {row_size}")
    rows_per_chunk = max(1, SEND_CHUNK // row_size)
    for start in range(0, total // row_size, rows_per_chunk):
        stop = min(start + rows_per_chunk, total // row_size)
        yield b"".join(row_bytes(index, row_size) for index in range(start, stop))


@dataclass(frozen=True)
class UploadAnswer:
    status: int
    body: str
    location: str
    seconds: float


def post_file(
    port: int, path: str, *, fields: dict[str, str], file_field: str, file_name: str, file_size: int,
    file_chunks: Iterator[bytes], session_cookie: str, chunked: bool = False,
) -> UploadAnswer:
    """POST a multipart form whose file is sent chunk by chunk as it is generated, with an exact Content-Length
    (or, `chunked`, none: Transfer-Encoding: chunked); CSRF passes with a token of our own in the cookie and the
    header, as Django accepts."""
    boundary = "----preflab" + secrets.token_hex(12)
    head = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ) + (f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{file_name}"\r\n'
         "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    csrf = secrets.token_hex(16)

    def body() -> Iterator[bytes]:
        yield head
        sent = 0
        for chunk in file_chunks:
            yield chunk
            sent += len(chunk)
        if sent != file_size:
            raise ValueError(f"the file chunks held {sent} bytes, not {file_size}")
        yield tail

    return post_stream(port, path, body(), length=None if chunked else len(head) + file_size + len(tail), headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "Cookie": f"sessionid={session_cookie}; csrftoken={csrf}", "X-CSRFToken": csrf})


def post_stream(port: int, path: str, chunks: Iterable[bytes], *, length: int | None,
                headers: dict[str, str]) -> UploadAnswer:
    """POST a body sent chunk by chunk as it is made, with `length` as its Content-Length, or with none
    (Transfer-Encoding: chunked) when it is None; the server's answer, also when it comes before the end of the
    body (the sending then stops)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.monotonic()
    connection.putrequest("POST", path)
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.putheader(*(("Content-Length", str(length)) if length is not None else ("Transfer-Encoding", "chunked")))
    connection.endheaders()
    try:
        for chunk in chunks:
            connection.send(chunk if length is not None else b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if length is None:
            connection.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered before reading everything; its answer is read below
    response = connection.getresponse()
    body = response.read().decode(errors="replace")
    connection.close()
    return UploadAnswer(response.status, body, response.getheader("Location") or "", time.monotonic() - started)


def zero_bytes(total: int) -> Iterator[bytes]:
    """`total` bytes in chunks of SEND_CHUNK, for a body whose content does not matter."""
    chunk = bytes(SEND_CHUNK)
    for start in range(0, total, SEND_CHUNK):
        yield chunk[: min(SEND_CHUNK, total - start)]


def session_cookie_for(user) -> str:
    """A logged-in session in the database the server reads (as the login page would create it)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value

