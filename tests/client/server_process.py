"""The web app as a real server process on a port of the test's choosing, so that a test can kill it and start it
again on the same address (Django's live_server cannot be stopped in the middle of a test)."""

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import REPO_ROOT, worker_environment
from tests.processes import ChildProcess


def start_server(port: int, log_path: Path) -> ChildProcess:
    """`manage.py runserver` on 127.0.0.1:port against the test database; returns once /healthz answers."""
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=REPO_ROOT, env=worker_environment(), stdout=log, stderr=subprocess.STDOUT,
    )
    server = ChildProcess(process=process, log_path=log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}:\n{server.log_tail()}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
            return server
        except OSError:
            time.sleep(0.2)
    server.stop()
    raise AssertionError(f"the server did not answer within 60 s:\n{server.log_tail()}")
