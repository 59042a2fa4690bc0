"""A sampling job's controls in the browser, on a real worker: the form starts it, Cancel stops it after its batch
(what it stored stays), Resume fills only the prompts still short of responses; the database rows are checked after
each click."""

import time

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import register_tiny_model, tiny_model_roots, wait_for
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Response, SamplingJob

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROMPTS = 600


def _response_counts(project) -> list[int]:
    return list(project.prompts.values_list("response_count", flat=True))


def test_cancel_stops_a_sampling_job_and_resume_fills_the_rest_once(
    page, live_server, researcher, settings, tiny_model_dir, celery_worker_factory
):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    model = register_tiny_model(tiny_model_dir)
    project = services.project_create(name="Cancel and resume", responses_per_item=2, owner=researcher)
    services.prompts_import(project=project, records=[
        ImportRecord(line=i + 1, external_id=f"p{i}", text=f"Calculate {i} + 3\n") for i in range(PROMPTS)])
    celery_worker_factory(queues=("gpu",), PREFLAB_MODEL_ROOTS=str(tiny_model_dir.parent), OMP_NUM_THREADS="1")

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.fill("input[name=model_path]", model.path)
    page.fill("input[name=responses_per_prompt]", "2")
    page.fill("input[name=max_new_tokens]", "8")
    page.locator("#sampling form button[type=submit]").first.click()
    wait_for(lambda: SamplingJob.objects.filter(project=project, progress_done__gte=8).exists(), timeout_s=60,
             what="the job started from the form to sample its first batch")
    job = SamplingJob.objects.get(project=project)
    line = page.locator(f"#job-{job.pk}")

    line.locator("button.job-cancel").click()
    wait_for(lambda: SamplingJob.objects.get(pk=job.pk).status == SamplingJob.Status.CANCELED, timeout_s=30,
             what="the cancel to stop the job after its batch")
    stored = Response.objects.filter(prompt__project=project).count()
    time.sleep(1.5)
    assert Response.objects.filter(prompt__project=project).count() == stored  # nothing sampled after the stop
    counts = _response_counts(project)
    assert set(counts) <= {0, 2} and 0 < counts.count(2) < PROMPTS
    page.wait_for_selector(f"#job-{job.pk} .badge.canceled")

    line.locator("button.job-resume").click()
    page.wait_for_selector(f"#job-{job.pk} .badge.succeeded", timeout=180_000)
    job.refresh_from_db()
    assert job.status == SamplingJob.Status.SUCCEEDED and SamplingJob.objects.filter(project=project).count() == 1
    assert set(_response_counts(project)) == {2}
    assert Response.objects.filter(prompt__project=project).count() == 2 * PROMPTS  # none sampled twice
    assert f"{PROMPTS} / {PROMPTS} prompts" in line.inner_text()
    assert page.js_errors == []
