"""A response holding <script> and <img onerror> is shown as text and runs nothing; markdown still renders."""

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.annotation.factories import make_project

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

HOSTILE = '<script>window.__pwned = "script"</script> and <img src=x onerror="window.__pwned = \'img\'">'


def test_hostile_markup_is_text_and_code_blocks_render(page, live_server, annotator):
    texts = [[HOSTILE, "Use **this**:\n\n```python\nprint(1 < 2)\n```"]]
    project = make_project(items=1, responses=2, members=[annotator], texts=texts)
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page, live_server, "abel", "abel-password-1")
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    page.wait_for_selector(".response")
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None
    assert dialogs == []
    body = page.inner_text("#responses")
    assert '<script>window.__pwned = "script"</script>' in body
    assert "<img src=x onerror=" in body
    assert page.locator("#responses script, #responses img").count() == 0
    assert page.locator("#responses .md strong").inner_text() == "this"
    assert page.locator("#responses pre code.language-python").inner_text().strip() == "print(1 < 2)"
    assert page.js_errors == []
