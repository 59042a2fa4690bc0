"""PREFLAB_UPLOAD_MAX_BYTES: an upload over it is refused with a 413 naming the limit, on the import form and the run
form alike, whether the Content-Length says so up front or the count of the streamed file finds it; no view
runs, so nothing is written, and the partial file is gone. (tests/webapp/test_large_upload_server.py streams
1 GB to a real server process.)"""

import io
import json
from pathlib import Path

import pytest
from django.urls import reverse

from webapp.annotation import services as annotation_services
from webapp.annotation.models import ImportJob
from webapp.experiments.models import Run
from webapp.uploads import FORM_FIELDS_ALLOWANCE, size_text

pytestmark = pytest.mark.django_db

LIMIT = 64 * 1024
ROW = json.dumps({"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"}) + "\n"


@pytest.fixture
def small_limit(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.PREFLAB_UPLOAD_MAX_BYTES = LIMIT
    # every file streams to disk, so the partial file of a refused upload is there to be looked for
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 0
    settings.FILE_UPLOAD_TEMP_DIR = tmp_path / "incoming"
    settings.FILE_UPLOAD_TEMP_DIR.mkdir()
    return settings


def _file(size: int, name: str = "rows.jsonl") -> io.BytesIO:
    upload = io.BytesIO((ROW * (size // len(ROW) + 1)).encode()[:size])
    upload.name = name
    return upload


def _stored_files(settings) -> list[Path]:
    places = [Path(settings.DATA_DIR), Path(settings.FILE_UPLOAD_TEMP_DIR)]
    return [path for place in places for path in place.rglob("*") if path.is_file()]


@pytest.mark.parametrize(
    "size",
    [LIMIT + 1, LIMIT + FORM_FIELDS_ALLOWANCE + 1],
    ids=["counted while streaming", "Content-Length over the limit"],
)
def test_an_import_upload_over_the_limit_gets_a_413_naming_it_and_nothing_is_stored(
    researcher_client, small_limit, size, researcher
):
    project = annotation_services.project_create(name="Limit", responses_per_item=2, owner=researcher)
    response = researcher_client.post(reverse("annotation:project_import", args=[project.pk]),
                                      {"file": _file(size), "file_format": "auto"})
    assert response.status_code == 413
    assert "at most 64 KiB (PREFLAB_UPLOAD_MAX_BYTES)" in response.content.decode()
    assert not ImportJob.objects.exists()
    assert _stored_files(small_limit) == []


def test_a_run_upload_over_the_limit_gets_a_413_and_no_run(researcher_client, small_limit, tiny_model):
    response = researcher_client.post("/runs/new?kind=reward_model", {
        "data_source": "upload", "upload": _file(LIMIT + 1), "model": tiny_model.path, "lr_scheduler": "linear",
        "lora_target_modules": "all-linear"})
    assert response.status_code == 413
    assert "at most 64 KiB" in response.content.decode()
    assert not Run.objects.exists()
    assert _stored_files(small_limit) == []


def test_an_upload_at_the_limit_is_accepted(researcher_client, small_limit, researcher):
    project = annotation_services.project_create(name="Limit", responses_per_item=2, owner=researcher)
    response = researcher_client.post(reverse("annotation:project_import", args=[project.pk]),
                                      {"file": _file(LIMIT), "file_format": "auto"})
    assert response.status_code == 302
    job = ImportJob.objects.get()
    assert job.bytes_total == LIMIT and Path(job.upload_path).stat().st_size == LIMIT
    assert [path.name for path in _stored_files(small_limit)] == [Path(job.upload_path).name]


def test_the_forms_name_the_limit(researcher_client, small_limit, researcher):
    project = annotation_services.project_create(name="Limit", responses_per_item=2, owner=researcher)
    assert "At most 64 KiB." in researcher_client.get(f"/projects/{project.pk}/").content.decode()
    assert "At most 64 KiB." in researcher_client.get("/runs/new?kind=sft").content.decode()


def test_sizes_read_as_people_say_them():
    assert [size_text(size) for size in (900, 2048, 1536 * 1024, 2**30, 3 * 2**30 // 2)] == [
        "900 bytes", "2 KiB", "1.5 MiB", "1 GiB", "1.5 GiB"]
