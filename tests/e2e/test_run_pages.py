"""The launch form after a refusal, and the run page's controls, in a real browser (issue 13)."""

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import register_tiny_model, tiny_model_roots
from webapp.experiments.models import Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tiny_model(settings, tiny_model_dir):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    return register_tiny_model(tiny_model_dir)


def _choose_model(page, name: str) -> None:
    options = page.locator("[name=model] option").evaluate_all(
        "options => options.map(option => [option.value, option.textContent])")
    (value,) = [value for value, text in options if text.startswith(name)]
    page.select_option("[name=model]", value)


def test_a_refused_launch_sums_up_its_errors_at_the_top_and_opens_their_section(page, live_server, researcher,
                                                                               tiny_model):
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/runs/new?kind=grpo")
    _choose_model(page, tiny_model.name)
    page.click("details:has([name=max_length]) > summary")  # the collapsed "Sequences and sampling"
    page.fill("[name=max_length]", "64")
    page.fill("[name=max_new_tokens]", "28")
    page.fill("[name=max_prompt_length]", "60")
    page.click("button[type=submit].primary")
    page.wait_for_selector("#launch-errors")
    assert not Run.objects.exists()

    summary = page.locator("#launch-errors")
    assert summary.is_visible()
    box = summary.bounding_box()
    assert 0 <= box["y"] < page.viewport_size["height"], "the summary must be in sight after the refusal"
    items = summary.locator("li").all_inner_texts()
    assert items == ["Max new tokens: max_prompt_length (60) + max_new_tokens (28) exceeds max_length (64)"]
    # the section holding the error is open, the others keep their usual state
    assert page.locator("details:has([name=max_new_tokens])").evaluate("section => section.open")
    assert not page.locator("details:has([name=log_every])").evaluate("section => section.open")
    assert page.locator("[name=max_new_tokens]").is_visible()

    summary.locator("a", has_text="Max new tokens").click()
    assert page.evaluate("document.activeElement.name") == "max_new_tokens"
    assert page.js_errors == []
