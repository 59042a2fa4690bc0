"""Steps the annotation page's browser tests share: open a project's item as abel, wait for the ranked count."""

from tests.e2e.conftest import log_in


def open_annotation(page, live_server, project) -> None:
    """Log in as abel (the `annotator` fixture) and wait until the first item has its first response focused."""
    log_in(page, live_server, "abel", "abel-password-1")
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    page.wait_for_selector(".response:focus")


def wait_ranked(page, count: int) -> None:
    """Wait for the ranked count and for the item shown next to be set up: a key pressed in the few
    milliseconds between htmx swapping an item in and the page binding it is ignored on purpose."""
    page.wait_for_function(
        f"document.getElementById('ranked-count')?.textContent === '{count}'"
        " && (document.getElementById('annotate-item')?.dataset.ready ?? '1') === '1'"
    )
