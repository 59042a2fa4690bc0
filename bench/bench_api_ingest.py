"""Ingest through the API: 100,000 metric rows x 20 metrics appended to one external run over HTTP, then its page.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python bench/bench_api_ingest.py

Runs on a throw-away test database (created and dropped here) served by gunicorn with one sync worker, DEBUG off
(as bench_upload_memory.py; docker-compose.yml runs 4 such workers). The client is one process sending what a
training loop's client sends: POST /api/v1/runs/{id}/log with 500 rows a request (JSON, a bearer token), one
request after the other. Then, with the run still running (a live dashboard: its chart series are never cached),
and again once it is finished (cached after the first load): the run page in headless Chromium (each load a fresh
browser context, as bench_page_load.py measures it) and the page's chart endpoint /runs/{id}/metrics; last, the
whole history read back through GET /api/v1/runs/{id}/metrics, 1,000 rows a page. Prints the command to
reproduce the run and the README's figures for the run page to compare with.
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django

django.setup()

from bench_annotation_queue import percentile, temporary_database  # noqa: E402
from bench_metrics_endpoint import METRIC_NAMES, metrics_at  # noqa: E402
from bench_page_load import TIMINGS_JS  # noqa: E402
from django.db import connection  # noqa: E402

from tests.webapp.upload_server import server_environment, session_cookie_for, start_web_server  # noqa: E402
from webapp.accounts.services import api_token_create, user_create  # noqa: E402
from webapp.experiments.models import MetricRow  # noqa: E402

# The README's figures for the run page (bench_page_load.py: a finished GRPO run of 300 steps x 20 metrics,
# runserver) and for the chart endpoint of a run of 100,000 steps x 20 metrics (bench_metrics_endpoint.py).
README_RUN_PAGE = "load event 0.69–0.71 s, every chart drawn 1.87–1.99 s (300 steps x 20 metrics)"
README_METRICS_ENDPOINT = "1.19 s median uncached, 41 ms cached (100,000 steps x 20 metrics)"


class Http:
    """One client connection to the server (reopened when gunicorn's sync worker closes it after an answer)."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.headers = headers

    def request(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        headers = {**self.headers, **({"Content-Type": "application/json"} if data is not None else {})}
        self.connection.request(method, path, body=data, headers=headers)
        response = self.connection.getresponse()
        return response.status, response.read()

    def ok(self, method: str, path: str, body: object = None) -> dict:
        status, answer = self.request(method, path, body)
        if status >= 300:
            raise SystemExit(f"{method} {path}: HTTP {status} {answer[:300]!r}")
        return json.loads(answer) if answer else {}


def ingest(api: Http, run_id: int, *, rows: int, batch: int) -> list[float]:
    """Seconds each request took."""
    timings = []
    for start in range(1, rows + 1, batch):
        body = {"rows": [{"step": step, "wall_time": 1.7e9 + step * 0.5, "tokens_seen": step * 512,
                          "metrics": metrics_at(step, 0.0)} for step in range(start, min(start + batch, rows + 1))]}
        started = time.perf_counter()
        answer = api.ok("POST", f"/api/v1/runs/{run_id}/log", body)
        timings.append(time.perf_counter() - started)
        if answer["written"] != len(body["rows"]):
            raise SystemExit(f"rows from step {start}: {answer} written, {len(body['rows'])} sent")
    return timings


def load_run_page(base_url: str, run_id: int, session: str, repeats: int) -> list[dict]:
    """As bench_page_load.py: a fresh browser context a load; the load event and the moment every chart is drawn."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    results = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        for _ in range(repeats):
            # the policy is lifted for the measurement, as bench_page_load.py does (wait_for_function evals)
            context = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
            context.add_cookies([{"name": "sessionid", "value": session, "url": base_url}])
            page = context.new_page()
            page.goto(f"{base_url}/runs/{run_id}/", wait_until="load")
            page.wait_for_function("performance.timing.loadEventEnd > 0")
            page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()", timeout=120_000)
            drawn_at = page.evaluate("performance.now()")
            metrics = page.evaluate("window.preflabCharts.metrics().length")
            if metrics != len(METRIC_NAMES):
                raise SystemExit(f"the page drew {metrics} charts, not {len(METRIC_NAMES)}")
            results.append({**page.evaluate(TIMINGS_JS), "drawn": drawn_at})
            context.close()
        browser.close()
    return results


def timed(call, repeats: int) -> list[float]:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return seconds


def read_history(api: Http, run_id: int) -> int:
    rows, after = 0, None
    while True:
        query = "limit=1000" + (f"&after_step={after}" if after is not None else "")
        answer = api.ok("GET", f"/api/v1/runs/{run_id}/metrics?{query}")
        rows += len(answer["rows"])
        after = answer["next_after_step"]
        if after is None:
            return rows


def page_figures(label: str, results: list[dict]) -> str:
    def median(key: str) -> float:
        return statistics.median(result[key] for result in results)

    return (f"run page, {label}, median of {len(results)} first visits: server answer {median('answer'):.0f} ms, "
            f"load event {median('load'):.0f} ms, all {len(METRIC_NAMES)} charts drawn {median('drawn'):.0f} ms "
            f"(each: " + ", ".join(f"{result['drawn']:.0f}" for result in results) + ")")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500, help="rows a request")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="preflab-bench-ingest-"))
    with temporary_database():
        researcher, _ = user_create(username="bench-researcher", role="researcher", password="bench-password-1")
        _, token = api_token_create(user=researcher, name="bench")
        session = session_cookie_for(researcher)
        db = connection.settings_dict
        env = server_environment({
            **os.environ, "PREFLAB_DATA_DIR": str(data_dir),
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        })
        server = start_web_server("gunicorn", env, data_dir / "gunicorn.log")
        base_url = f"http://127.0.0.1:{server.port}"
        api = Http(server.port, {"Authorization": f"Bearer {token}"})
        pages = Http(server.port, {"Cookie": f"sessionid={session}"})
        try:
            run = api.ok("POST", "/api/v1/runs/external", {"name": "bench ingest", "config": {"lr": 2e-5},
                                                           "total_steps": args.rows})
            started = time.perf_counter()
            requests = ingest(api, run["id"], rows=args.rows, batch=args.batch)
            total = time.perf_counter() - started
            stored = MetricRow.objects.filter(run_id=run["id"]).count()
            nan_rows = MetricRow.objects.filter(run_id=run["id"], metrics__loss="NaN").count()
            if stored != args.rows:
                raise SystemExit(f"{stored} rows stored, {args.rows} sent")
            print(f"ingest: {args.rows:,} rows x {len(METRIC_NAMES)} metrics in {len(requests)} requests of "
                  f"{args.batch} rows: {total:.1f} s, {args.rows / total:,.0f} rows/s "
                  f"({args.rows * len(METRIC_NAMES) / total:,.0f} values/s); a request: median "
                  f"{statistics.median(requests) * 1000:.0f} ms, p95 {percentile(requests, 0.95) * 1000:.0f} ms, "
                  f"max {max(requests) * 1000:.0f} ms; rows stored {stored:,}, NaN losses kept {nan_rows}")
            chart = f"/runs/{run['id']}/metrics"
            print(page_figures("running (never cached)", load_run_page(base_url, run["id"], session, args.repeats)))
            live = timed(lambda: pages.ok("GET", chart), args.repeats)
            print(f"chart endpoint {chart}, running: median {statistics.median(live) * 1000:.0f} ms, "
                  f"max {max(live) * 1000:.0f} ms")
            api.ok("POST", f"/api/v1/runs/{run['id']}/finish", {"status": "succeeded"})
            first = timed(lambda: pages.ok("GET", chart), 1)[0]
            cached = timed(lambda: pages.ok("GET", chart), args.repeats)
            print(f"chart endpoint, finished: first {first * 1000:.0f} ms, then cached median "
                  f"{statistics.median(cached) * 1000:.0f} ms")
            print(page_figures("finished (series cached)", load_run_page(base_url, run["id"], session, args.repeats)))
            started = time.perf_counter()
            read = read_history(api, run["id"])
            seconds = time.perf_counter() - started
            print(f"whole history through GET /api/v1/runs/{{id}}/metrics: {read:,} rows in {seconds:.1f} s "
                  f"({read / seconds:,.0f} rows/s, 1,000 a page)")
        finally:
            server.stop()
    shutil.rmtree(data_dir, ignore_errors=True)
    print(f"README, run page: {README_RUN_PAGE}; chart endpoint: {README_METRICS_ENDPOINT}")
    print("reproduce: DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python "
          f"bench/bench_api_ingest.py --rows {args.rows} --batch {args.batch} --repeats {args.repeats}")


if __name__ == "__main__":
    main()
