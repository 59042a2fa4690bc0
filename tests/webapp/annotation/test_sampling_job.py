"""A sampling job runs in a real Celery worker on the gpu queue and fills each prompt with K model responses."""

import time

import pytest
from django.core.exceptions import ValidationError

from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Response, SamplingJob

SETTINGS = {"responses_per_prompt": 2, "max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0, "seed": 0}


@pytest.mark.django_db(transaction=True)
def test_sampling_fills_prompts_and_reports_progress(celery_worker_factory, tiny_model_dir, settings, client, researcher):
    root = str(tiny_model_dir.parent)
    settings.MODEL_ROOTS = [tiny_model_dir.parent]
    project = services.project_create(name="Sampled", responses_per_item=2, owner=researcher)
    records = [ImportRecord(line=i, external_id=f"p{i}", text=f"Calculate {i} + 2\n") for i in range(3)]
    services.prompts_import(project=project, records=records)
    celery_worker_factory(queues=("gpu",), PREFLAB_MODEL_ROOTS=root, OMP_NUM_THREADS="1")

    job = services.sampling_job_create(project=project, model_path=str(tiny_model_dir),
                                       generation_settings=SETTINGS, created_by=researcher)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if not job.is_active:
            break
        time.sleep(0.5)

    assert job.status == SamplingJob.Status.SUCCEEDED, job.error
    assert (job.progress_done, job.progress_total) == (3, 3)
    assert sorted(project.prompts.values_list("response_count", flat=True)) == [2, 2, 2]
    sampled = Response.objects.filter(prompt__project=project)
    assert sampled.count() == 6 and {r.source for r in sampled} == {Response.Source.MODEL}
    assert sampled.first().source_detail["model"] == str(tiny_model_dir)
    client.force_login(researcher)
    fragment = client.get(f"/sampling/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert "3 / 3 prompts" in fragment and "hx-trigger" not in fragment  # finished: polling stops


@pytest.mark.django_db
def test_a_model_outside_the_roots_is_refused_before_queueing(settings, tmp_path, researcher):
    settings.MODEL_ROOTS = [tmp_path / "allowed"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    project = services.project_create(name="Refused", responses_per_item=2)
    with pytest.raises(ValidationError, match="outside the allowed model roots"):
        services.sampling_job_create(project=project, model_path=str(outside), generation_settings=SETTINGS,
                                     created_by=researcher)
    assert not SamplingJob.objects.exists()
