"""The project page says what the data holds: empty responses counted (and left out of pairs), imported pairs as
training data rather than items, counts in proper plurals; the new-project form refuses 0 responses in words."""

import json

import pytest

from tests.e2e.conftest import log_in
from webapp.annotation import services
from webapp.annotation.models import PreferencePair, Project, Response

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_new_project_with_zero_responses_is_refused_in_words(page, live_server, researcher):
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/new/")
    page.fill("input[name=name]", "Zero")
    page.fill("input[name=responses_per_item]", "0")
    page.evaluate("document.querySelector('form.card').noValidate = true")  # what the server says, not the browser
    page.click("form.card button[type=submit]")
    page.wait_for_selector("text=An item needs at least 2 responses to compare; 0 was given.")
    assert "Constraint" not in page.content()
    assert not Project.objects.exists()
    page.fill("input[name=responses_per_item]", "2")
    page.click("form.card button[type=submit]")
    page.wait_for_selector("#project-data")
    assert Project.objects.get().responses_per_item == 2


def test_the_project_page_counts_empty_responses_and_explains_imported_pairs(
    page, live_server, researcher, tmp_path, celery_worker_factory
):
    celery_worker_factory(queues=("default",))  # the import is a job on the default queue
    project = services.project_create(name="Mixed", responses_per_item=2, owner=researcher)
    upload = tmp_path / "mixed.jsonl"
    upload.write_text("\n".join(json.dumps(row) for row in [
        {"id": "pair", "prompt": "2 + 2?", "chosen": "4", "rejected": "5"},
        {"id": "item", "prompt": "Say hi"},
    ]))
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.set_input_files("#import-form input[type=file]", str(upload))
    page.click("#import-form button[type=submit]")
    page.wait_for_selector("text=Imported 2 prompts (2 responses, 1 preference pair) from mixed.jsonl")
    page.reload()  # the job's line updates itself; the data card is drawn with the page
    assert page.inner_text("#imported-pairs") == "1"
    note = page.inner_text("#imported-pairs-note")
    assert "1 imported preference pair" in note and "is training data" in note and "not items for annotators" in note
    assert page.inner_text("#items-link") == "1 item" and page.inner_text("#empty-responses") == "0 empty responses"

    # a model sampled one real and one empty response for the item
    item = project.prompts.get(external_id="item")
    services.responses_add(prompt_id=item.pk, texts=["Hi!", "   "], source=Response.Source.MODEL, source_detail={})
    page.reload()
    assert page.inner_text("#empty-responses").startswith("1 empty response (only whitespace; left out of every pair)")
    page.click("#items-link")
    assert "1 empty" in page.inner_text(f"#items tr[data-item='{item.pk}']")
    assert PreferencePair.objects.filter(project=project).count() == 1  # the imported one only
    assert page.js_errors == []
