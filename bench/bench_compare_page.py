"""The compare page with 5 runs of 100k steps x 20 metrics, loaded in headless Chromium, against Postgres.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python bench/bench_compare_page.py

Runs on a throw-away test database (created and dropped here) served by `manage.py runserver`. Prints the time
from navigation until all 20 charts are drawn with every run's (downsampled) series, and the points per chart.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_metrics_endpoint import METRIC_NAMES, create_run, temporary_database
from django.db import connection

from webapp.accounts.services import user_create

REPO_ROOT = Path(__file__).resolve().parent.parent
ADDRESS = "127.0.0.1:8765"
PASSWORD = "bench-password-1"


def serve(database_name: str) -> subprocess.Popen:
    settings = connection.settings_dict
    url = f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{database_name}"
    env = {**os.environ, "DATABASE_URL": url, "DEBUG": "false", "SECRET_KEY": "bench-only-secret-key-0123456789",
           "ALLOWED_HOSTS": "127.0.0.1"}
    server = subprocess.Popen([sys.executable, "manage.py", "runserver", ADDRESS, "--noreload", "--insecure"],
                              cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://{ADDRESS}/healthz", timeout=1)
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start")


def load_compare_page(run_ids: list[int], username: str, repeats: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    query = "&".join(f"runs={run_id}" for run_id in run_ids)
    timings = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        # Playwright's wait_for_function evals its expression in the page, which our Content-Security-Policy
        # refuses: the policy is lifted for the measurement (it changes no request and no drawing)
        page = browser.new_page(viewport={"width": 1400, "height": 900}, bypass_csp=True)
        page.goto(f"http://{ADDRESS}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"http://{ADDRESS}/")
        for _ in range(repeats):
            started = time.perf_counter()
            page.goto(f"http://{ADDRESS}/runs/compare?{query}")
            page.wait_for_function(
                f"window.preflabCharts && window.preflabCharts.drawn()"
                f" && window.preflabCharts.metrics().length === {len(METRIC_NAMES)}"
                f" && window.preflabCharts.metrics().every(m => [...Array({len(run_ids)}).keys()]"
                ".every(run => window.preflabCharts.drawnPoints(m, run) > 0))",
                timeout=300_000,
            )
            timings.append(time.perf_counter() - started)
        points = page.evaluate("window.preflabCharts.points('loss')")
        print(f"points on the loss chart (5 runs): {points}")
        browser.close()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with temporary_database():
        started = time.perf_counter()
        runs = [create_run(steps=args.steps, name=f"bench {index}", phase=index / 10) for index in range(args.runs)]
        print(f"wrote {args.runs} runs x {args.steps} rows x {len(METRIC_NAMES)} metrics "
              f"in {time.perf_counter() - started:.0f} s")
        user, _ = user_create(username="bench-researcher", role="researcher", password=PASSWORD)
        server = serve(connection.settings_dict["NAME"])
        try:
            timings = load_compare_page([run.pk for run in runs], user.username, args.repeats)
        finally:
            server.terminate()
            server.wait(timeout=20)
        # The server caches a finished run's series: the first load computes them, the later ones are served.
        print(f"compare page, all charts drawn: first load {timings[0]:.1f} s; later loads "
              + ", ".join(f"{seconds:.1f} s" for seconds in timings[1:]))


if __name__ == "__main__":
    main()
