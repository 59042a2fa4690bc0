"""A researcher imports a file (a job on a real worker), watches progress arrive live, and downloads a TRL export
checked line by line."""

import json

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.annotation.factories import make_annotators
from webapp.annotation import services
from webapp.annotation.models import Project
from webapp.annotation.selectors import responses_shown

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROWS = [
    {"id": "q1", "prompt": "What is 2 + 2?", "responses": ["4", "5", "22"]},
    {"id": "q2", "prompt": "Capital of Italy?", "responses": ["Rome", "Milan", "=cmd|' /C calc'!A0"]},
]


def test_import_watch_progress_and_export(page, live_server, researcher, tmp_path, celery_worker_factory):
    celery_worker_factory(queues=("default",))  # the import is a job on the default queue
    (annotator,) = make_annotators(1)
    project = services.project_create(name="Quiz", responses_per_item=3, members=[annotator], owner=researcher)
    upload = tmp_path / "quiz.jsonl"
    upload.write_text("\n".join(json.dumps(row) for row in ROWS))

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.set_input_files("#import-form input[type=file]", str(upload))
    page.click("#import-form button[type=submit]")
    page.wait_for_selector("text=Imported 2 prompts (6 responses")
    # the progress card polls every 2 s
    page.wait_for_function("document.getElementById('items-total')?.textContent === '2'")
    assert page.inner_text("#items-remaining") == "2"

    # rankings arrive while the researcher watches: best = the listed first answer, then the others in order
    for _ in ROWS:
        lease = services.assignment_lease_next(project=project, annotator=annotator)
        by_text = {r.text: r.pk for r in responses_shown(prompt=lease.prompt, annotator=annotator)}
        order = [text for row in ROWS for text in row["responses"] if text in by_text]
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=[[by_text[t]] for t in order])
    page.wait_for_function("document.getElementById('items-done')?.textContent === '2'", timeout=10_000)
    assert page.inner_text("#items-remaining") == "0"

    with page.expect_download() as download_info:
        page.click("#export-jsonl")
    path = download_info.value.path()
    lines = path.read_text().splitlines()
    expected = {
        (row["prompt"], row["responses"][i], row["responses"][j], float(j - i))
        for row in ROWS for i in range(3) for j in range(i + 1, 3)
    }
    assert len(lines) == len(expected) == 6
    for line in lines:
        record = json.loads(line)
        assert set(record) == {"prompt", "chosen", "rejected", "weight", "margin", "ranking_id", "annotator",
                               "chosen_round", "rejected_round", "chosen_model", "rejected_model", "label_source"}
        assert record["label_source"] == "unanimous"  # one annotator's answer: nobody contradicts it
        assert (record["prompt"], record["chosen"], record["rejected"], record["margin"]) in expected
        assert record["weight"] == pytest.approx(1 / 3) and record["annotator"] == "ann0"
    assert Project.objects.get(pk=project.pk).pairs.count() == 6
    assert page.js_errors == []
