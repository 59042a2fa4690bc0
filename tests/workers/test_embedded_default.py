"""The README's run path on the embedded default: no variables, SQLite and the filesystem broker.

It runs migrate, seed_demo and serve exactly as `make run` does, logs in as the demo researcher with the
printed password, and has the web process round-trip a task through a separate worker process.
"""

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _embedded_env(data_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "DEBUG", "SECRET_KEY"}}
    env.update(PREFLAB_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_http(url: str, serve: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert serve.poll() is None, log.read_text()
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} never answered:\n{log.read_text()}")


def _login(opener: urllib.request.OpenerDirector, base: str, username: str, password: str) -> None:
    page = opener.open(f"{base}/accounts/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token})
    request = urllib.request.Request(f"{base}/accounts/login/", data=form.encode(), headers={"Referer": base})
    landing = opener.open(request)
    assert landing.url.rstrip("/") == base, landing.url


def test_run_command_serves_login_and_round_trips_a_task_through_a_real_worker(tmp_path):
    env = _embedded_env(tmp_path)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput"], cwd=REPO_ROOT, env=env, check=True, capture_output=True)
    seeded = subprocess.run([*manage, "seed_demo"], cwd=REPO_ROOT, env=env, check=True, capture_output=True, text=True)
    password = re.search(r"username 'researcher'\s+password '([^']+)'", seeded.stdout).group(1)
    assert "sqlite3" in (tmp_path / "preflab.sqlite3").name and (tmp_path / "preflab.sqlite3").exists()

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    serve = subprocess.Popen([*manage, "serve", "--addrport", f"127.0.0.1:{port}"], cwd=REPO_ROOT, env=env,
                             stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        _wait_for_http(f"{base}/accounts/login/", serve, log)
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        assert b"Log in" in opener.open(f"{base}/accounts/login/").read()
        _login(opener, base, "researcher", password)

        deadline, answer = time.monotonic() + 90, ""
        while time.monotonic() < deadline and "answered" not in answer:
            answer = opener.open(f"{base}/system/worker-ping", timeout=30).read().decode()
        assert re.search(r"worker \S+ answered \(pid \d+\)", answer), answer + log.read_text()
        worker_pid = int(re.search(r"pid (\d+)", answer).group(1))
        assert worker_pid not in {serve.pid, os.getpid()}
    finally:
        serve.send_signal(signal.SIGINT)  # what Ctrl-C sends
        _wait_for_exit(serve, log)
    terminal = log.read_text()
    assert "stopping" in terminal

    # The terminal holds one summary block (address and accounts) and no routine lines; those are in files.
    assert f"Preflab is running at {base}/" in terminal
    assert re.search(rf"researcher\s+password {re.escape(password)}", terminal), terminal
    assert '"GET ' not in terminal and "celery@" not in terminal and "INFO" not in terminal, terminal
    logs = tmp_path / "logs"
    assert '"GET /accounts/login/' in (logs / "web.log").read_text()
    assert "ready." in (logs / "worker-default.log").read_text()


def _descendants(pid: int) -> set[int]:
    """Every live process under `pid` (read from /proc: the children's children too)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, frontier = set(), [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.update(children)
        frontier.extend(children)
    return found


def _wait_for_exit(serve: subprocess.Popen, log: Path, timeout_s: float = 30) -> None:
    """Wait for serve to exit; if it does not, kill it and what it started, and fail showing what was still running
    and its terminal (a stop that hangs must say where)."""
    try:
        serve.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        left = {pid: _command_line(pid) for pid in [serve.pid, *_descendants(serve.pid)] if _alive(pid)}
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"serve still running {timeout_s:.0f} s after its signal; alive: {left}\n"
                             f"{log.read_text()}") from None


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_serve_stopped_by_a_signal_leaves_no_process_behind(tmp_path, stop_signal):
    env = _embedded_env(tmp_path)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO_ROOT, env=env, check=True,
                   capture_output=True)
    port = _free_port()
    log = tmp_path / "serve.log"
    serve = subprocess.Popen([sys.executable, "manage.py", "serve", "--addrport", f"127.0.0.1:{port}"], cwd=REPO_ROOT,
                             env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    children: set[int] = set()
    try:
        _wait_for_http(f"http://127.0.0.1:{port}/healthz", serve, log)
        children = _descendants(serve.pid)
        assert len(children) >= 3, f"expected the web server and two workers under serve, found {children}"
        serve.send_signal(stop_signal)
        _wait_for_exit(serve, log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.2)
        left = [pid for pid in children if _alive(pid)]
        assert not left, f"still running after {stop_signal.name} to serve: {left}\n{log.read_text()}"
        if stop_signal == signal.SIGTERM:
            assert "stopping" in log.read_text()
    finally:  # a failed check must not leave its processes to the next tests
        for pid in [*children, *_descendants(serve.pid)] + ([serve.pid] if serve.poll() is None else []):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
