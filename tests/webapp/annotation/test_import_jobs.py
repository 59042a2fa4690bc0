"""An import through the page is a job: the upload is kept under the data directory, a job on the default queue
checks every row (with progress) and then writes them all in one transaction, and the page follows it. Here the
job's execution is run directly (tests/e2e/test_import_job_in_browser.py runs it on a real worker)."""

import io
import json
from pathlib import Path

import pytest
from django.urls import reverse

from webapp.annotation import services
from webapp.annotation.models import ImportJob, PreferencePair, Prompt, Response
from webapp.annotation.services import imports as import_services
from workers.app import app
from workers.importing import import_job_execute

pytestmark = pytest.mark.django_db


def _jsonl(*rows) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


MIXED = _jsonl(
    {"id": "r1", "prompt": "2+2?", "responses": ["4", "5", "**four**"], "answer": 4},
    {"id": "p1", "prompt": "Say hi"},
    {"prompt": "Capital of France?", "chosen": "Paris", "rejected": "Lyon"},
    {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"}]},
)


@pytest.fixture
def project(settings, tmp_path, researcher):
    settings.DATA_DIR = tmp_path
    return services.project_create(name="Jobs", responses_per_item=3, owner=researcher)


def _upload(client, project, data: bytes, name: str = "prompts.jsonl", file_format: str = "auto"):
    upload = io.BytesIO(data)
    upload.name = name
    return client.post(reverse("annotation:project_import", args=[project.pk]),
                       {"file": upload, "file_format": file_format})


def _kept_files(settings) -> list[Path]:
    return sorted(path for path in (Path(settings.DATA_DIR) / "uploads").rglob("*") if path.is_file())


def test_the_upload_is_kept_and_queued_then_the_job_imports_it_and_removes_it(project, researcher_client, settings):
    response = _upload(researcher_client, project, MIXED)
    assert response.status_code == 302
    job = ImportJob.objects.get()
    assert (job.status, job.file_name, job.file_format, job.bytes_total) == ("queued", "prompts.jsonl", "jsonl",
                                                                             len(MIXED))
    assert Path(job.upload_path).read_bytes() == MIXED
    assert _kept_files(settings) == [Path(job.upload_path)]
    assert not Prompt.objects.exists()  # nothing is read in the request
    page = researcher_client.get(reverse("annotation:project_detail", args=[project.pk])).content.decode()
    assert f'id="import-job-{job.pk}"' in page and "waiting for a worker" in page and "hx-trigger" in page

    import_job_execute(job_id=job.pk)

    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    assert (job.created_count, job.already_present, job.responses_count, job.pairs_count) == (4, 0, 6, 1)
    assert (job.rows_checked, job.bytes_done) == (4, len(MIXED))
    assert Prompt.objects.count() == 4 and Response.objects.count() == 6 and PreferencePair.objects.count() == 1
    assert _kept_files(settings) == []
    fragment = researcher_client.get(reverse("annotation:import_job_status", args=[job.pk]),
                                     HTTP_HX_REQUEST="true").content.decode()
    assert "Imported 4 prompts (6 responses, 1 preference pair) from prompts.jsonl; 0 were already" in fragment
    assert "hx-trigger" not in fragment  # finished: polling stops


def test_the_same_file_again_is_already_present(project, researcher_client):
    for _ in range(2):
        _upload(researcher_client, project, MIXED)
        import_job_execute(job_id=ImportJob.objects.order_by("-pk").first().pk)
    second = ImportJob.objects.order_by("-pk").first()
    assert (second.status, second.created_count, second.already_present) == ("succeeded", 0, 4)
    assert Prompt.objects.count() == 4 and Response.objects.count() == 6


def test_a_bad_last_line_fails_the_job_naming_line_and_field_and_writes_nothing(project, researcher_client, settings):
    _upload(researcher_client, project, MIXED + _jsonl({"id": "x", "prompt": "ok", "responses": ["fine", 7]}))
    job = ImportJob.objects.get()
    import_job_execute(job_id=job.pk)
    job.refresh_from_db()
    assert (job.status, job.error_line, job.error_field) == ("failed", 5, "responses[1]")
    assert job.error == "line 5, field 'responses[1]': must be a string, got int"
    assert not Prompt.objects.exists() and not Response.objects.exists()
    assert _kept_files(settings) == []
    page = researcher_client.get(reverse("annotation:project_detail", args=[project.pk])).content.decode()
    assert "Nothing was imported from prompts.jsonl: line 5, field &#x27;responses[1]&#x27;" in page


def test_an_id_repeated_far_apart_is_refused_naming_both_lines_after_writing_began(
    project, researcher_client, monkeypatch
):
    # batches of 2: the repeat is met only in the database, after the first batch was written, and rolled back
    monkeypatch.setattr(import_services, "IMPORT_CHUNK", 2)
    rows = [{"id": f"q{index}", "prompt": f"Question {index}?"} for index in range(5)] + [{"id": "q1", "prompt": "?"}]
    _upload(researcher_client, project, _jsonl(*rows))
    job = ImportJob.objects.get()
    import_job_execute(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.error == "line 6, field 'id': 'q1' already appears on line 2"
    assert not Prompt.objects.exists()


def test_a_csv_file_is_imported_by_the_job(project, researcher_client):
    _upload(researcher_client, project, b"id,prompt,response_1,response_2\nq1,What is 3*3?,9,6\n", name="rows.csv")
    job = ImportJob.objects.get()
    import_job_execute(job_id=job.pk)
    job.refresh_from_db()
    assert (job.status, job.file_format, job.created_count) == ("succeeded", "csv", 1)
    assert list(Response.objects.values_list("text", flat=True)) == ["9", "6"]


def test_a_file_of_no_known_format_is_refused_at_once_and_nothing_is_kept(project, researcher_client, settings):
    response = _upload(researcher_client, project, MIXED, name="prompts.txt")
    page = researcher_client.get(response["Location"]).content.decode()
    assert "cannot tell the format of &#x27;prompts.txt&#x27;" in page
    assert not ImportJob.objects.exists() and _kept_files(settings) == []


def test_a_json_array_is_refused_saying_what_to_do(project, researcher_client):
    _upload(researcher_client, project, json.dumps([{"prompt": "a"}, {"prompt": "b"}], indent=1).encode(),
            name="rows.json")
    job = ImportJob.objects.get()
    import_job_execute(job_id=job.pk)
    job.refresh_from_db()
    assert (job.status, job.error_line, job.error_field) == ("failed", 1, "json")
    assert "this is a JSON array" in job.error and "one object on each line" in job.error


def test_a_job_that_is_not_queued_is_left_alone(project, researcher_client):
    _upload(researcher_client, project, MIXED)
    job = ImportJob.objects.get()
    import_job_execute(job_id=job.pk)
    import_job_execute(job_id=job.pk)  # a second delivery of its message
    assert ImportJob.objects.get().created_count == 4 and Prompt.objects.count() == 4


def test_the_import_task_goes_to_the_default_queue():
    import workers.tasks  # noqa: F401 (registers the tasks)

    route = app.amqp.router.route({}, "workers.tasks.import_prompts", args=(), kwargs={})
    assert route["queue"].name == "default"
    assert "workers.tasks.import_prompts" in app.tasks
