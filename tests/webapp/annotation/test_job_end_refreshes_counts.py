"""A job's line answers htmx with an HX-Trigger "job-finished" once the job has ended (and not before), and the
project page's Data and Progress cards are fragments fetched again on that event (issue 29)."""

import pytest

from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import ImportJob

pytestmark = pytest.mark.django_db


def test_an_import_jobs_line_says_job_finished_once_the_job_ended(researcher_client, researcher):
    project = services.project_create(name="Jobs", owner=researcher)
    job = ImportJob.objects.create(project=project, file_name="a.jsonl", file_format="jsonl", upload_path="/none")
    running = researcher_client.get(f"/imports/{job.pk}/", headers={"HX-Request": "true"})
    assert running.status_code == 200 and "HX-Trigger" not in running.headers
    ImportJob.objects.filter(pk=job.pk).update(status=ImportJob.Status.SUCCEEDED)
    ended = researcher_client.get(f"/imports/{job.pk}/", headers={"HX-Request": "true"})
    assert ended.headers["HX-Trigger"] == "job-finished"


def test_the_data_and_progress_cards_are_fetched_again_on_job_finished(researcher_client, researcher):
    project = services.project_create(name="Cards", owner=researcher, responses_per_item=2)
    page = researcher_client.get(f"/projects/{project.pk}/").content.decode()
    assert f'hx-get="/projects/{project.pk}/data/" hx-trigger="job-finished from:body"' in page
    assert 'hx-trigger="every 2s, job-finished from:body"' in page
    services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"p{index}", text=f"Q{index}") for index in range(5)])
    data = researcher_client.get(f"/projects/{project.pk}/data/").content.decode()
    assert data.lstrip().startswith('<section class="card" id="project-data"')
    assert ">5 items</a>" in data and "5 still need responses" in data
    progress = researcher_client.get(f"/projects/{project.pk}/progress/").content.decode()
    assert progress.lstrip().startswith('<section class="card" id="progress"')
