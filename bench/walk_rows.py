"""A browser walk of the product on a fresh `make run`, and the rows it wrote, to compare across commits.

    PYTHONPATH=$PWD:$PWD/clients/python/src .venv/bin/python bench/walk_rows.py --label a237298 [--out PATH]

Starts the app as `make run` does (migrate, seed_demo, serve: web + workers) on a fresh Postgres database
(preflab_walk_<label>, dropped at the end), a fresh PREFLAB_DATA_DIR under /tmp and Redis db 10 as the broker,
on 127.0.0.1:8045. Then, in Debian's Chromium through Playwright, as the demo users:
  - researcher: cancels the demo's SFT run while it is queued (the demo's chat sampling job, SmolLM2, runs);
  - annotator: 6 pairwise items (a, tie, skip, b, Back and a again, the rest a/b), 5 ranking items (full orders,
    a tie, a rationale, a skip);
  - researcher: 3 pairwise items; creates a project through the form, imports a prompt file through the page
    (waits for the import job), samples 2 responses a prompt from the demo's tiny model into it (seed 0, waits),
    launches a 3-step DPO run on the pairwise project's pairs from the launch form (waits), exports pairs.
Writes bench/baselines/walk-<label>.json (see walk_dump.py for what is kept and what is left out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

ADDRPORT = "127.0.0.1:8045"
BASE = f"http://{ADDRPORT}"
BROKER = "redis://127.0.0.1:6379/10"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
IMPORTED_PROMPTS = ("What is 3 + 4?", "What is 12 - 5?", "What is 6 * 7?")
WALK_PROJECT = "Walk: imported and sampled"
PAIRWISE_PROJECT = "Demo: arithmetic pairwise"
RANKING_PROJECT = "Demo: arithmetic ranking"
JOB_TIMEOUT_S = 2400  # a busy 2-core machine samples SmolLM2 for the demo in 15 minutes or more


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True, help="names the database and the output walk-<label>.json")
    parser.add_argument("--out", type=Path, help="write here instead of bench/baselines/walk-<label>.json")
    return parser.parse_args()


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the app, as `make run` starts it ------------------------------------------------------------------------


def app_environment(database: str, data_dir: Path) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{database}",
            "CELERY_BROKER_URL": BROKER, "PREFLAB_DATA_DIR": str(data_dir), "DEBUG": "true",
            "DJANGO_SETTINGS_MODULE": "webapp.settings"}


def fresh_database(database: str) -> None:
    postgres = ["-h", "127.0.0.1", "-U", "postgres"]
    subprocess.run(["dropdb", "--if-exists", *postgres, database], check=True)
    subprocess.run(["createdb", *postgres, database], check=True)
    subprocess.run(["redis-cli", "-n", "10", "flushdb"], check=True, stdout=subprocess.DEVNULL)


def drop_database(database: str) -> None:
    for _ in range(10):  # the stopped server's connections take a moment to close
        dropped = subprocess.run(["dropdb", "--if-exists", "--force", "-h", "127.0.0.1", "-U", "postgres", database], check=False)
        if dropped.returncode == 0:
            return
        time.sleep(2)


def prepare(env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        for command in (["migrate", "--noinput", "-v", "0"], ["seed_demo"]):
            subprocess.run([sys.executable, "manage.py", *command], env=env, check=True, stdout=out, stderr=out)


def serve(env: dict[str, str], log: Path) -> subprocess.Popen:
    """`manage.py serve` in its own process group, so that stopping it stops its web server and workers."""
    with log.open("a") as out:
        return subprocess.Popen([sys.executable, "manage.py", "serve", "--addrport", ADDRPORT], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_until_served(server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"serve exited with {server.returncode}; see {log}")
        if "Preflab is running" in log.read_text():
            return
        time.sleep(1)
    raise RuntimeError(f"serve not up after 180 s; see {log}")


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)  # anything of the group still there


# --- the walk --------------------------------------------------------------------------------------------------


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = JOB_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout_s:.0f} s")
        time.sleep(2)


def jobs_done() -> bool:
    """No run, sampling job or import job is queued or running."""
    from webapp.annotation.models import ImportJob, SamplingJob
    from webapp.experiments.models import Run

    active = ("queued", "running")
    return not any(model.objects.filter(status__in=active).exists() for model in (Run, SamplingJob, ImportJob))


def log_in(page: Page, username: str, password: str) -> None:
    page.context.clear_cookies()
    page.goto(f"{BASE}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{BASE}/")


def project_id(name: str) -> int:
    from webapp.annotation.models import Project

    return Project.objects.get(name=name).pk


def item_shown(page: Page) -> str:
    """Wait for an item set up with a response focused; its assignment."""
    page.wait_for_selector("#annotate-item[data-ready='1'] .response:focus")
    return page.get_attribute("#item-form", "data-assignment") or ""


def next_item(page: Page, previous: str) -> None:
    page.wait_for_function(
        "(previous) => { const item = document.getElementById('annotate-item');"
        " return item && item.dataset.ready === '1' && (document.getElementById('item-form')?.dataset.assignment"
        " ?? 'none') !== previous; }", arg=previous)


def answer_pairwise(page: Page, key: str) -> None:
    shown = item_shown(page)
    page.keyboard.press(key)
    next_item(page, shown)


def annotate_pairwise(page: Page, keys: list[str], *, back_then: str | None = None) -> None:
    """Answer items with `keys`; with back_then, go Back after the last and answer it again so."""
    page.goto(f"{BASE}/annotate/{project_id(PAIRWISE_PROJECT)}/")
    for key in keys:
        answer_pairwise(page, key)
    if back_then:
        item_shown(page)
        page.keyboard.press("Backspace")
        page.wait_for_selector("#reopened-note")
        answer_pairwise(page, back_then)


def rank_item(page: Page, ranks: Callable[[int], list[int]], rationale: str = "") -> None:
    """Rank the item's responses as `ranks` orders that many (the demo's items have 2 to 4)."""
    shown = item_shown(page)
    cards = page.locator(".response")
    for index, rank in enumerate(ranks(cards.count())):
        cards.nth(index).focus()
        page.keyboard.press(str(rank))
    if rationale:
        page.keyboard.press("r")
        page.keyboard.type(rationale)
        page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    next_item(page, shown)


def annotate_ranking(page: Page) -> None:
    page.goto(f"{BASE}/annotate/{project_id(RANKING_PROJECT)}/")
    rank_item(page, lambda count: list(range(1, count + 1)))
    rank_item(page, lambda count: [1, *range(1, count)], rationale="the first two are equally right")  # a tie
    shown = item_shown(page)
    page.keyboard.press("s")  # skip
    next_item(page, shown)
    rank_item(page, lambda count: list(range(count, 0, -1)))
    rank_item(page, lambda count: [2, 1, *range(3, count + 1)])


def create_project(page: Page) -> None:
    page.goto(f"{BASE}/projects/new/")
    page.fill("[name=name]", WALK_PROJECT)
    page.select_option("[name=mode]", "pairwise")
    page.fill("[name=guidelines]", "Prefer the correct answer.")
    page.fill("[name=responses_per_item]", "2")
    page.locator("label", has_text="annotator").locator("input[type=checkbox]").check()
    page.click("form.card button[type=submit]")
    page.wait_for_url(f"{BASE}/projects/*/")


def import_prompts(page: Page, folder: Path) -> None:
    upload = folder / "walk-prompts.jsonl"
    upload.write_text("".join(json.dumps({"id": f"walk-{index}", "prompt": text}) + "\n"
                              for index, text in enumerate(IMPORTED_PROMPTS)))
    page.goto(f"{BASE}/projects/{project_id(WALK_PROJECT)}/")
    page.set_input_files("#import-form input[type=file]", str(upload))
    page.click("#import-form button[type=submit]")
    page.wait_for_selector(".import-job[data-status=succeeded]", timeout=JOB_TIMEOUT_S * 1000)


def sample_responses(page: Page) -> None:
    page.goto(f"{BASE}/projects/{project_id(WALK_PROJECT)}/")
    page.fill("[name=model_path]", "tiny arithmetic (demo)")
    page.fill("[name=responses_per_prompt]", "2")
    page.fill("[name=max_new_tokens]", "8")
    page.fill("[name=seed]", "0")
    page.click("#sampling button[type=submit]")
    page.wait_for_selector("#sampling .job .badge.succeeded", timeout=JOB_TIMEOUT_S * 1000)


def launch_dpo(page: Page) -> None:
    page.goto(f"{BASE}/runs/new?kind=dpo")
    model = page.locator("[name=model] option", has_text="tiny arithmetic (demo)").first.get_attribute("value")
    page.select_option("[name=model]", model)
    page.select_option("[name=data_source]", "project_pairs")
    option = page.locator("[name=project] option", has_text=PAIRWISE_PROJECT).first.get_attribute("value")
    page.select_option("[name=project]", option)
    closed = page.locator("details:not([open]) > summary")
    while closed.count():
        closed.first.click()
    for name, value in {"name": "walk: DPO on the pairwise demo's pairs", "max_steps": "3", "batch_size": "2",
                        "max_length": "64", "max_prompt_length": "32"}.items():
        page.fill(f"[name={name}]", value)
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{BASE}/runs/*/")
    page.wait_for_selector("#run-status-badge:text-matches('succeeded|failed|canceled')", timeout=JOB_TIMEOUT_S * 1000)


def export(page: Page, project: str, button: str) -> str:
    page.goto(f"{BASE}/projects/{project_id(project)}/")
    with page.expect_download() as download:
        page.click(button)
    return Path(download.value.path()).read_text()


def cancel_demo_run(page: Page) -> None:
    """The demo's SFT run (300 steps) waits behind the demo's chat sampling job on the one model worker: cancel
    it while it is queued, which also walks a run's cancel (and keeps the walk short on a busy machine)."""
    from webapp.experiments.demo import DEMO_SFT_RUN_NAME
    from webapp.experiments.models import Run

    page.goto(f"{BASE}/runs/{Run.objects.get(name=DEMO_SFT_RUN_NAME).pk}/")
    page.click("#cancel-run")
    page.wait_for_selector("#run-status-badge:text('canceled')")


def walk(page: Page, passwords: dict[str, str], folder: Path) -> dict[str, str]:
    """The walk; the exported files' contents by name."""
    log_in(page, "researcher", passwords["researcher"])
    say("researcher: cancels the demo's queued SFT run")
    cancel_demo_run(page)
    log_in(page, "annotator", passwords["annotator"])
    say("annotator: pairwise items")
    annotate_pairwise(page, ["a", "t", "s", "b"], back_then="a")
    annotate_pairwise(page, ["b", "a"])
    say("annotator: ranking items")
    annotate_ranking(page)
    log_in(page, "researcher", passwords["researcher"])
    say("researcher: pairwise items")
    annotate_pairwise(page, ["b", "t", "a"])
    say("researcher: a new project, an import")
    create_project(page)
    import_prompts(page, folder)
    say("researcher: sampling into the project")
    sample_responses(page)
    say("researcher: a DPO run on the pairwise project's pairs")
    launch_dpo(page)
    say("researcher: exports")
    return {
        "pairwise-pairs.jsonl": export(page, PAIRWISE_PROJECT, "#export-jsonl"),
        "pairwise-pairs.csv": export(page, PAIRWISE_PROJECT, "button:text('Pairs, CSV')"),
        "ranking-pairs.jsonl": export(page, RANKING_PROJECT, "#export-jsonl"),
    }


def demo_passwords(data_dir: Path) -> dict[str, str]:
    rows = (data_dir / "demo-accounts.txt").read_text().splitlines()
    return dict(row.split("\t", 1) for row in rows)


def main() -> None:
    args = parse_args()
    started = time.monotonic()
    database = f"preflab_walk_{args.label}".lower().replace("-", "_")
    data_dir = Path(tempfile.mkdtemp(prefix=f"preflab-walk-{args.label}-"))
    env = app_environment(database, data_dir)
    os.environ.update({key: env[key] for key in ("DATABASE_URL", "CELERY_BROKER_URL", "PREFLAB_DATA_DIR", "DEBUG",
                                                 "DJANGO_SETTINGS_MODULE")})
    # this process reads the database between Playwright's sync calls, which run an event loop (the app does not)
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    log = data_dir / "walk-server.log"
    say(f"fresh database {database}, data dir {data_dir}")
    fresh_database(database)
    server = None
    try:
        say("migrate and seed_demo")
        prepare(env, log)
        say(f"serve on {ADDRPORT}")
        server = serve(env, log)
        wait_until_served(server, log)
        import django

        django.setup()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_context(accept_downloads=True).new_page()
            page.set_default_timeout(60_000)
            page.on("dialog", lambda dialog: dialog.accept())  # "Cancel run #1 …?": OK, as the user answers
            exports = walk(page, demo_passwords(data_dir), data_dir)
            browser.close()
        say("waiting for every job to end")
        wait_for(jobs_done, "the jobs")
        say("dumping the rows")
        from walk_dump import rows

        result = {"label": args.label, **rows(exports, data_dir)}
    finally:
        if server is not None:
            say("stopping the server")
            stop(server)
        from django.db import connections

        connections.close_all()
        drop_database(database)
    out = args.out or Path("bench/baselines") / f"walk-{args.label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result["timing"] = {"walk_s": round(time.monotonic() - started)}  # information only
    out.write_text(json.dumps(result, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    say(f"wrote {out} in {time.monotonic() - started:.0f} s (server log: {log})")


if __name__ == "__main__":
    main()
