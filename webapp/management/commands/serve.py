"""Start the web server and the Celery workers together; Ctrl-C stops them all."""

import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from workers.app import DEFAULT_QUEUE, GPU_QUEUE


def worker_commands() -> list[list[str]]:
    celery = [sys.executable, "-m", "celery", "-A", "workers", "worker", "--loglevel", "INFO"]
    return [
        # Light web-side jobs never wait behind a training run. -B: this worker also runs celery beat (the
        # periodic stale-heartbeat check of runs).
        [*celery, "-Q", DEFAULT_QUEUE, "--pool", "threads", "--concurrency", "2", "-n", f"{DEFAULT_QUEUE}@%h",
         "-B", "--schedule", str(settings.DATA_DIR / "celerybeat-schedule")],
        # One model job at a time, in the worker's own process (no fork after CUDA is initialised).
        [*celery, "-Q", GPU_QUEUE, "--pool", "solo", "-n", f"{GPU_QUEUE}@%h"],
    ]


class Command(BaseCommand):
    help = "Run the web server and the Celery workers (default and gpu queues) until Ctrl-C."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addrport", default="127.0.0.1:8000")

    def handle(self, *args: object, addrport: str, **options: object) -> None:
        web = [sys.executable, "manage.py", "runserver", addrport, "--noreload"]
        processes = [subprocess.Popen(command) for command in [*worker_commands(), web]]
        self.stdout.write(self.style.SUCCESS(f"Preflab is running at http://{addrport}/  (Ctrl-C stops it)"))
        try:
            while all(process.poll() is None for process in processes):
                time.sleep(0.5)
            self.stderr.write("a process exited; stopping the others")
        except KeyboardInterrupt:
            self.stdout.write("stopping…")
        finally:
            _stop(processes)


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
