"""Start the web server and the Celery workers together; Ctrl-C or SIGTERM stops them all.

The terminal shows one summary block once everything is up (address, demo accounts, where the logs are), then
only warnings and errors; each process's full output goes to a file under `<data dir>/logs/`.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from webapp.celery_app import DEFAULT_QUEUE, GPU_QUEUE
from webapp.management.commands.seed_demo import demo_accounts_file
from webapp.parent_death import die_with_parent
from webapp.process_logs import relay

READY_TIMEOUT_S = 90.0


class StopRequested(Exception):
    """SIGTERM (a service manager, `kill`, docker stop) asks for what Ctrl-C does: stop every process."""


def _stop_requested(signum: int, _frame: object) -> None:
    raise StopRequested(signal.Signals(signum).name)


_WORKER_READY = re.compile(r"@\S+ ready\.")


def worker_commands() -> dict[str, list[str]]:
    celery = [sys.executable, "-m", "celery", "-A", "workers", "worker", "--loglevel", "INFO"]
    return {
        # Light web-side jobs never wait behind a training run. -B: this worker also runs celery beat (the
        # periodic reconcile of jobs: stale heartbeats, lost messages), a child process that dies with it.
        f"worker-{DEFAULT_QUEUE}": [
            *celery, "-Q", DEFAULT_QUEUE, "--pool", "threads", "--concurrency", "2", "-n", f"{DEFAULT_QUEUE}@%h",
            "-B", "--schedule", str(settings.DATA_DIR / "celerybeat-schedule"),
        ],
        # One model job at a time, in the worker's own process (no fork after CUDA is initialised).
        f"worker-{GPU_QUEUE}": [*celery, "-Q", GPU_QUEUE, "--pool", "solo", "-n", f"{GPU_QUEUE}@%h"],
    }


@dataclass
class Started:
    name: str
    process: subprocess.Popen
    log_path: Path
    ready: threading.Event = field(default_factory=threading.Event)


class Command(BaseCommand):
    help = "Run the web server and the Celery workers (default and gpu queues) until Ctrl-C or SIGTERM."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addrport", default="127.0.0.1:8000")

    def handle(self, *args: object, addrport: str, **options: object) -> None:
        refuse_debug_pages_off_this_machine(addrport, debug=settings.DEBUG)
        log_dir = settings.DATA_DIR / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        commands = {**worker_commands(), "web": [sys.executable, "manage.py", "runserver", addrport, "--noreload"]}
        signal.signal(signal.SIGTERM, _stop_requested)
        started = [self._start(name, command, log_dir) for name, command in commands.items()]
        try:
            waiting = _wait_until_up(started, f"http://{addrport}/healthz")
            self.stdout.write(self._summary(addrport, log_dir, waiting))
            while all(item.process.poll() is None for item in started):
                time.sleep(0.5)
            stopped = next(item for item in started if item.process.poll() is not None)
            self.stderr.write(f"{stopped.name} exited with {stopped.process.returncode} (see {stopped.log_path});"
                              " stopping the others")
        except (KeyboardInterrupt, StopRequested):
            self.stdout.write("stopping…")
        finally:
            _stop(started, lambda line: self.stderr.write(line))

    def _start(self, name: str, command: list[str], log_dir: Path) -> Started:
        # On Linux each child is sent SIGTERM when serve dies, even by SIGKILL: no orphan keeps the port or the GPU
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=die_with_parent,
        )
        item = Started(name, process, log_dir / f"{name}.log")
        item.log_path.write_text("")  # each start begins a fresh log

        def watch(line: str) -> None:
            if _WORKER_READY.search(line):
                item.ready.set()

        relay(process.stdout, item.log_path, lambda line: self.stderr.write(f"[{name}] {line}"), watch)
        return item

    def _summary(self, addrport: str, log_dir: Path, waiting: list[str]) -> str:
        rule = "─" * 72
        lines = [rule, self.style.SUCCESS(f"  Preflab is running at http://{addrport}/   ({how_to_stop()})")]
        accounts = demo_accounts_file()
        if accounts.is_file():
            lines.append("  Demo accounts (as created; change them at /accounts/password/):")
            for row in accounts.read_text().splitlines():
                username, _, password = row.partition("\t")
                lines.append(f"    {username:<12} password {password}")
        lines.append(f"  Full logs: {log_dir}/{{web,worker-{DEFAULT_QUEUE},worker-{GPU_QUEUE}}}.log")
        if waiting:
            lines.append(self.style.WARNING(f"  Not ready after {READY_TIMEOUT_S:.0f} s: {', '.join(waiting)}"
                                            " (see its log)"))
        lines += ["  Only warnings and errors are shown below.", rule]
        return "\n".join(lines)


def how_to_stop() -> str:
    """What stops this process: Ctrl-C, unless it was started in the background of a script, where SIGINT is ignored
    (POSIX, inherited through exec) and only SIGTERM is heard."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        return f"started with Ctrl-C ignored, as a background job: `kill {os.getpid()}` stops it"
    return "Ctrl-C stops it"


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def refuse_debug_pages_off_this_machine(addrport: str, *, debug: bool) -> None:
    """With DEBUG on, Django's error pages show settings and code to whoever asks: serve them to this machine only."""
    host = addrport.rpartition(":")[0] if ":" in addrport else "127.0.0.1"
    if debug and host not in LOOPBACK_HOSTS:
        raise CommandError(
            f"--addrport {addrport}: DEBUG is on, and its error pages would be open to other machines. Serve on "
            "127.0.0.1 (the default), or set DEBUG=false (and SECRET_KEY, ALLOWED_HOSTS) for a shared address."
        )


def _wait_until_up(started: list[Started], health_url: str) -> list[str]:
    """Wait for the web server to answer and the workers to say they are ready; the names still not up."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    web_up = False
    while time.monotonic() < deadline:
        if any(item.process.poll() is not None for item in started):
            break
        web_up = web_up or _answers(health_url)
        if web_up and all(item.ready.is_set() for item in started if item.name != "web"):
            return []
        time.sleep(0.3)
    return [item.name for item in started if (item.name == "web" and not web_up)
            or (item.name != "web" and not item.ready.is_set())]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


STOP_GRACE_S = 15.0


def _stop(started: list[Started], say: Callable[[str], None]) -> None:
    """SIGTERM to every process, then SIGKILL to those still running after STOP_GRACE_S (a worker finishing a
    task), saying which, so that a slow Ctrl-C is explained rather than silent."""
    began = time.monotonic()
    for item in started:
        if item.process.poll() is None:
            item.process.send_signal(signal.SIGTERM)
    deadline = began + STOP_GRACE_S
    for item in started:
        try:
            item.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            item.process.kill()
            say(f"{item.name} had not stopped {STOP_GRACE_S:.0f} s after SIGTERM: killed (see {item.log_path})")
    took = time.monotonic() - began
    if took > 5:
        say(f"stopped in {took:.1f} s")
