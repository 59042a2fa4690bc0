"""Real-browser fixtures: Debian's Chromium driven by Playwright's sync API against Django's live_server.

Never `playwright install`: the browser is /usr/bin/chromium (installed by `make test`), started without
background networking because this machine's network is closed.
"""

import os
import shutil
import time
from collections.abc import Callable, Iterator

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
DEFAULT_TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """One Chromium per test module. While Playwright's sync API runs its event loop in this thread, Django's
    async-safety check would refuse the ORM calls the tests make, so it is lifted for exactly that time
    (a known trap of Playwright's sync API with live_server) and the loop ends with the module, before any non-browser test runs."""
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser) -> Iterator:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.js_errors = errors
    # what the server refused or failed on, for the messages of tests that time out waiting for a change
    http_errors: list[str] = []
    page.on("response", lambda response: response.status >= 400
            and http_errors.append(f"{response.status} {response.request.method} {response.url}"))
    page.http_errors = http_errors
    page.wait_for_function = _wait_for_function_under_the_policy(page)
    yield page
    context.close()


def _wait_for_function_under_the_policy(page) -> Callable[..., None]:
    """Playwright's own wait_for_function compiles its expression with `new Function` inside the page, which
    the Content-Security-Policy refuses ('unsafe-eval' is not allowed); page.evaluate is not subject to it."""

    from playwright.sync_api import Error, TimeoutError

    def holds(expression: str) -> bool | Error:
        try:
            return bool(page.evaluate(expression))
        except Error as error:  # the page navigated while asked, as Playwright's own waiting tolerates
            return error

    def wait_for_function(expression: str, *, timeout: float = DEFAULT_TIMEOUT_MS, polling: float = 100) -> None:
        deadline = time.monotonic() + timeout / 1000
        while (answer := holds(expression)) is not True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Timeout {timeout} ms exceeded waiting for: {expression} (last answer: {answer})")
            page.wait_for_timeout(polling)

    return wait_for_function


REPORT_VIOLATIONS = """document.addEventListener("securitypolicyviolation", (event) => window.preflabCspViolation(
  `${event.violatedDirective} blocked ${event.blockedURI || "inline"} at ${event.sourceFile}:${event.lineNumber}`
  + ` (${event.disposition}) ${event.sample}`));"""


@pytest.fixture
def watched_page(page):
    """The page, with every violation of the Content-Security-Policy and every console error it meets kept in
    page.problems (see assert_no_problem)."""
    problems: list[str] = []
    page.context.expose_function("preflabCspViolation", lambda text: problems.append(f"violation: {text}"))
    page.context.add_init_script(REPORT_VIOLATIONS)
    # Django's admin pages name no icon, so Chromium asks for /favicon.ico, which is not ours to serve
    page.on("console", lambda message: message.type == "error"
            and not message.location.get("url", "").endswith("/favicon.ico")
            and problems.append(f"console on {page.url}: {message.text} ({message.location})"))
    page.on("pageerror", lambda error: problems.append(f"page error on {page.url}: {error}"))
    page.problems = problems
    return page


def assert_no_problem(page) -> None:
    page.wait_for_timeout(300)  # a violation is reported as an event after the fact
    assert page.problems == [], "\n".join(page.problems + page.http_errors)


def log_in(page, live_server, username: str, password: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
