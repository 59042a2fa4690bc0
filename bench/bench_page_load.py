"""The run page's load in headless Chromium: a finished GRPO run of 300 steps x 20 metrics, against Postgres.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/preflab_bench .venv/bin/python bench/bench_page_load.py

Runs on a throw-away test database (created and dropped here) served by `manage.py runserver --noreload` with
DEBUG=false; whitenoise serves the static files from the finders (WHITENOISE_USE_FINDERS), uncompressed, as it
does in `make run`. Each load is a fresh browser context (an empty HTTP cache: a first visit). Prints the
medians of: the server's answer (responseEnd - requestStart of the page), the load event
(loadEventEnd - navigationStart, performance.timing), and the moment every chart is drawn; and the bytes of the
plotly.js bundle the page loaded.
"""

import argparse
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_compare_page import ADDRESS, PASSWORD, serve
from bench_metrics_endpoint import create_run, temporary_database
from django.db import connection

from webapp.accounts.services import user_create

TIMINGS_JS = """() => {
  const t = performance.timing;
  const plotly = performance.getEntriesByType("resource").find((entry) => entry.initiatorType === "script"
    && entry.name.includes("plotly"));
  return {answer: t.responseEnd - t.requestStart, load: t.loadEventEnd - t.navigationStart,
          plotlyBytes: plotly ? plotly.decodedBodySize : 0};
}"""


def load_run_page(run_id: int, username: str, repeats: int) -> list[dict]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    results = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        login = browser.new_context()
        page = login.new_page()
        page.goto(f"http://{ADDRESS}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"http://{ADDRESS}/")
        session = login.storage_state()
        login.close()
        for _ in range(repeats):
            # Playwright's wait_for_function evals its expression in the page, which our Content-Security-Policy
            # refuses: the policy is lifted for the measurement (it changes no request and no drawing)
            context = browser.new_context(storage_state=session, viewport={"width": 1400, "height": 900},
                                          bypass_csp=True)
            page = context.new_page()
            page.goto(f"http://{ADDRESS}/runs/{run_id}/", wait_until="load")
            page.wait_for_function("performance.timing.loadEventEnd > 0")
            page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()", timeout=60_000)
            drawn_at = page.evaluate("performance.now()")  # a rough upper bound: polled every few ms
            results.append({**page.evaluate(TIMINGS_JS), "drawn": drawn_at})
            context.close()
        browser.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with temporary_database():
        run = create_run(steps=args.steps, name="bench run page")
        user, _ = user_create(username="bench-researcher", role="researcher", password=PASSWORD)
        server = serve(connection.settings_dict["NAME"])
        try:
            load_run_page(run.pk, user.username, 1)  # warm the server (imports, the run's cached series)
            results = load_run_page(run.pk, user.username, args.repeats)
        finally:
            server.terminate()
            server.wait(timeout=20)

    def median(key: str) -> float:
        return statistics.median(result[key] for result in results)

    print(f"run page, median of {args.repeats} first visits: server answer {median('answer'):.0f} ms, "
          f"load event {median('load'):.0f} ms (each: "
          + ", ".join(f"{result['load']:.0f}" for result in results)
          + f"), all charts drawn {median('drawn'):.0f} ms; plotly.js {results[0]['plotlyBytes'] / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
