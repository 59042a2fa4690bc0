"""A small HTTP proxy in front of the live server that can play an outage: while `down`, every request is answered
503 (after `stall_s` seconds, as a hanging server would) without reaching the server. It records what it passed on, in order, so a test can see the order in which
the server received a client's requests."""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class OutageProxy:
    def __init__(self, target_url: str) -> None:
        target = urlsplit(target_url)
        self.target = (target.hostname, target.port)
        self.down = False
        self.stall_s = 0.0  # while down, how long a request hangs before its 503 (a server that hangs)
        self.refused = 0
        self.passed: list[tuple[str, str, object]] = []  # (method, path, JSON body or None) the server received
        self.keep_bodies = True  # off for a test that sends more than memory should hold
        self.answers: list[tuple[str, str, int, int]] = []  # (method, path, request bytes, the server's status)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OutageProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def bodies(self, method: str, path_end: str) -> list[object]:
        with self._lock:
            return [body for seen_method, path, body in self.passed if seen_method == method and path.endswith(path_end)]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.down:
                    time.sleep(proxy.stall_s)
                    with proxy._lock:
                        proxy.refused += 1
                    self._answer(503, b'{"detail": "down for the test"}', "application/json")
                    return
                headers = {name: value for name, value in self.headers.items()
                           if name.lower() not in ("host", "connection", "keep-alive")}
                # one connection per request, closed at once: the live server's thread (and its database session)
                # ends with it
                connection = http.client.HTTPConnection(*proxy.target, timeout=60)
                try:
                    connection.request(self.command, self.path, body=body, headers=headers)
                    answer = connection.getresponse()
                    content = answer.read()
                    path = self.path.split("?")[0]
                    with proxy._lock:
                        proxy.answers.append((self.command, path, len(body), answer.status))
                        if proxy.keep_bodies:
                            proxy.passed.append((self.command, path, json.loads(body) if body else None))
                    self._answer(answer.status, content, answer.getheader("Content-Type") or "application/json")
                finally:
                    connection.close()

            def _answer(self, status: int, content: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_DELETE = _forward

        return Handler
