"""The project page's Data and Progress cards follow the page's jobs: when an import or a sampling job ends, on a
real worker, the counts change without a reload (the job's line answers with an HX-Trigger "job-finished", on which
the cards fetch themselves again). The database rows are checked against what the cards say (issue 29)."""

import json

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import register_tiny_model, tiny_model_roots
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import ImportJob, Prompt, Response, SamplingJob

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# set once the page has loaded: still there at the end, the page was never reloaded
MARK_THE_PAGE = "window.notReloaded = true"


def test_an_import_updates_the_data_and_progress_cards_without_a_reload(
    page, live_server, researcher, celery_worker_factory, tmp_path
):
    celery_worker_factory(queues=("default",))
    project = services.project_create(name="Counted import", responses_per_item=2, owner=researcher)
    upload = tmp_path / "three.jsonl"
    upload.write_text("\n".join(json.dumps({"id": f"q{index}", "prompt": f"Question {index}?",
                                            "responses": [f"A{index}", f"B{index}"]}) for index in range(3)))
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    assert page.inner_text("#items-link") == "0 items" and page.inner_text("#items-total") == "0"

    # the form posts and comes back to the page at once, the job queued; the worker imports while the page waits
    page.set_input_files("#import-form input[type=file]", str(upload))
    page.click("#import-form button[type=submit]")
    page.wait_for_selector(".import-job")
    page.evaluate(MARK_THE_PAGE)
    page.wait_for_selector(".import-job[data-status=succeeded]", timeout=60_000)
    page.wait_for_function("document.getElementById('items-link')?.textContent === '3 items'", timeout=10_000)
    page.wait_for_function("document.getElementById('items-total')?.textContent === '3'", timeout=10_000)

    assert page.evaluate("window.notReloaded") is True
    assert ImportJob.objects.get(project=project).status == ImportJob.Status.SUCCEEDED
    assert Prompt.objects.filter(project=project, annotatable=True).count() == 3
    assert Response.objects.filter(prompt__project=project).count() == 6
    assert page.js_errors == []


def test_a_sampling_job_clears_the_items_awaiting_responses_without_a_reload(
    page, live_server, researcher, settings, tiny_model_dir, celery_worker_factory
):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    model = register_tiny_model(tiny_model_dir)
    project = services.project_create(name="Counted sampling", responses_per_item=2, owner=researcher)
    services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"p{index}", text=f"Calculate {index} + 3\n") for index in range(5)])
    celery_worker_factory(queues=("gpu",), PREFLAB_MODEL_ROOTS=str(tiny_model_dir.parent), OMP_NUM_THREADS="1")

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.evaluate(MARK_THE_PAGE)
    assert page.inner_text("#awaiting-responses") == "(5 still need responses: sample them below)"
    page.fill("input[name=model_path]", model.path)
    page.fill("input[name=responses_per_prompt]", "2")
    page.fill("input[name=max_new_tokens]", "4")
    page.locator("#sampling form button[type=submit]").first.click()
    page.wait_for_selector("#sampling .job .badge.succeeded", timeout=180_000)
    page.wait_for_selector("#awaiting-responses", state="detached", timeout=10_000)

    assert page.evaluate("window.notReloaded") is True
    assert page.inner_text("#items-link") == "5 items"
    assert SamplingJob.objects.get(project=project).status == SamplingJob.Status.SUCCEEDED
    assert set(Prompt.objects.filter(project=project).values_list("response_count", flat=True)) == {2}
    assert Response.objects.filter(prompt__project=project).count() == 10
    assert page.js_errors == []
