"""A researcher uploads a file through the project page's import form; a real worker on the default queue imports
it while the page follows the job (status and progress polled with htmx, no reload), then says what was
imported. The rows are in the database and the kept upload is gone. A bad file is shown failed, naming line and
field, with nothing written."""

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import log_in
from webapp.annotation import services
from webapp.annotation.models import ImportJob, Prompt, Response

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROWS = 6_000
# Every 50 ms, what the import's line on the page says: a job that changes more slowly than htmx polls is seen
# in each state it passes through.
RECORD_JOB_LINES = """() => {
  window.seenJobLines = [];
  setInterval(() => {
    const line = document.querySelector('.import-job');
    const text = line && `${line.dataset.status}: ${line.innerText.replace(/\\s+/g, ' ').trim()}`;
    if (text && window.seenJobLines.at(-1) !== text) window.seenJobLines.push(text);
  }, 50);
}"""


def _rows_file(path: Path) -> Path:
    filler = "lorem ipsum dolor sit amet " * 40
    with path.open("w") as out:
        for index in range(ROWS):
            row = {"id": f"q{index}", "prompt": f"Question {index}? {filler}",
                   "responses": [f"A{index} {filler}", f"B{index} {filler}"]}
            out.write(json.dumps(row) + "\n")
    return path


def test_an_upload_is_imported_by_a_worker_while_the_page_follows_it(
    page, live_server, researcher, celery_worker_factory, tmp_path
):
    celery_worker_factory(queues=("default",))
    project = services.project_create(name="Big import", responses_per_item=2, owner=researcher)
    upload = _rows_file(tmp_path / "questions.jsonl")

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.set_input_files("#import-form input[type=file]", str(upload))
    page.click("#import-form button[type=submit]")
    page.wait_for_selector(".import-job")
    page.evaluate(RECORD_JOB_LINES)
    page.wait_for_selector(".import-job[data-status=succeeded]", timeout=120_000)

    seen = page.evaluate("window.seenJobLines")
    assert seen[-1].startswith(f"succeeded: succeeded questions.jsonl Imported {ROWS} prompts ({2 * ROWS} responses")
    assert any(line.startswith(("queued:", "running:")) for line in seen[:-1]), seen
    job = ImportJob.objects.get()
    assert (job.status, job.rows_checked, job.bytes_done) == ("succeeded", ROWS, upload.stat().st_size)
    assert Prompt.objects.filter(project=project).count() == ROWS
    assert Response.objects.filter(prompt__project=project).count() == 2 * ROWS
    assert not Path(job.upload_path).exists()
    # the progress card, polled as before, counts the new items without a reload
    page.wait_for_function(f"document.getElementById('items-total')?.textContent === '{ROWS}'")
    assert page.js_errors == []


def test_a_bad_file_is_shown_failed_naming_line_and_field(
    page, live_server, researcher, celery_worker_factory, tmp_path
):
    celery_worker_factory(queues=("default",))
    project = services.project_create(name="Bad import", responses_per_item=2, owner=researcher)
    upload = tmp_path / "bad.jsonl"
    upload.write_text('{"prompt": "fine"}\n{"prompt": "also fine", "responses": ["a", 7]}\n')

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.set_input_files("#import-form input[type=file]", str(upload))
    page.click("#import-form button[type=submit]")
    page.wait_for_selector(".import-job[data-status=failed]", timeout=60_000)

    assert page.inner_text(".import-job .import-outcome") == (
        "Nothing was imported from bad.jsonl: line 2, field 'responses[1]': must be a string, got int")
    assert not Prompt.objects.filter(project=project).exists()
    assert not Path(ImportJob.objects.get().upload_path).exists()
    assert page.js_errors == []
