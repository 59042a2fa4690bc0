"""Steps the annotation page's browser tests share: open a project's item as abel, wait for the ranked count."""

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.e2e.conftest import log_in


def open_annotation(page, live_server, project) -> None:
    """Log in as abel (the `annotator` fixture) and wait until the first item has its first response focused."""
    log_in(page, live_server, "abel", "abel-password-1")
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    page.wait_for_selector(".response:focus")


def wait_ranked(page, count: int) -> None:
    """Wait for the ranked count and for the item shown next to be set up: a key pressed in the few
    milliseconds between htmx swapping an item in and the page binding it is ignored on purpose."""
    try:
        page.wait_for_function(
            f"document.getElementById('ranked-count')?.textContent === '{count}'"
            # no item left (the "nothing left" page), or the item shown is set up
            " && (item => !item || item.dataset.ready === '1')(document.getElementById('annotate-item'))"
        )
    except PlaywrightTimeout as timeout:
        raise AssertionError(f"the ranked count never became {count}:\n{_page_state(page)}") from timeout


def _page_state(page) -> str:
    """What the page showed when a wait gave up: its address, the item's status, error box and focus, JS errors."""
    state = page.evaluate("""() => {
        const item = document.getElementById('annotate-item');
        return {
            count: document.getElementById('ranked-count')?.textContent,
            ready: item?.dataset.ready, assignment: document.getElementById('item-form')?.dataset.assignment,
            sent: document.getElementById('item-form')?.dataset.sent, error: document.getElementById('item-error')?.textContent,
            focus: document.activeElement?.outerHTML.slice(0, 200), requests: document.querySelectorAll('.htmx-request').length,
            chosen: document.querySelector('.choice.selected')?.dataset.choice, choice: document.querySelector('[name=choice]')?.value,
        };
    }""")
    return f"url {page.url}\n{state}\njs errors {page.js_errors}\nHTTP errors {page.http_errors}"
