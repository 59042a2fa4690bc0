"""A researcher imports TRL's unpaired rows as a Parquet file through the page (a job on a real worker), then
downloads the project as Argilla records (Parquet) and finds the thumbs there."""

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.e2e.conftest import log_in
from webapp.annotation import services
from webapp.annotation.models import Prompt, ResponseLabel

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_import_unpaired_parquet_then_download_argilla_records(page, live_server, researcher, tmp_path,
                                                              celery_worker_factory):
    celery_worker_factory(queues=("default",))
    project = services.project_create(name="Thumbs in", responses_per_item=2, owner=researcher)
    upload = tmp_path / "kto.parquet"
    pq.write_table(pa.table({"prompt": ["2+2?", "2+2?", "Hi"], "completion": ["4", "5", "Hello"],
                             "label": [True, False, True]}), upload)

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.set_input_files("#import-form input[type=file]", str(upload))
    page.click("#import-form button[type=submit]")
    page.wait_for_selector("text=Imported 2 prompts (3 responses, 0 preference pairs, 3 labels)")
    assert sorted(ResponseLabel.objects.filter(project=project).values_list("response__text", "value")) == [
        ("4", 1.0), ("5", 0.0), ("Hello", 1.0)]
    assert Prompt.objects.get(project=project, text="2+2?").response_count == 2

    with page.expect_download() as download_info:
        page.click("#export-argilla")
    rows = pq.read_table(io.BytesIO(download_info.value.path().read_bytes())).to_pylist()
    assert [(row["prompt"], row["response_1"], row["thumb_1.responses"], row["response_2"],
             row["thumb_2.responses"]) for row in rows] == [("2+2?", "4", ["good"], "5", ["bad"]),
                                                          ("Hi", "Hello", ["good"], None, None)]
    assert page.js_errors == []
