"""Large uploads against a real server process, the body generated as it is sent (never held by the test):
- 1 GB over a 256 MiB limit is refused with a 413 naming the limit, and a file just over it is refused too
  (counted as it streams), with the web process's peak memory under WEB_PEAK_MB and nothing stored;
- a 256 MiB file under the limit is accepted, and a real worker imports every row with its peak memory under
  WORKER_PEAK_MB; the kept upload is gone afterwards;
- a 2 GiB body is answered 413 before it is read, on the import form, the run form and the API's import alike (the
  answer came after 7.6 s here, 13-17 s on the compose setup, while gunicorn's sync worker read it all); a body sent
  in chunks, without its length, is refused with a 411 saying so (it was read as empty: "choose a file").
Before uploads were bounded and parsed by a job, the web process peaked at about 4.4 times the file (928 MB for
200 MB) and a 400 MB upload ended in a worker timeout."""

from pathlib import Path

import pytest

from tests.conftest import worker_environment
from tests.webapp.upload_server import (
    jsonl_body,
    peak_rss_mb,
    post_file,
    post_stream,
    row_bytes,
    server_environment,
    session_cookie_for,
    start_web_server,
    zero_bytes,
)
from webapp.accounts.services import api_token_create
from webapp.annotation import services
from webapp.annotation.models import ImportJob, Prompt, Response
from webapp.experiments.models import Run
from webapp.uploads import FORM_FIELDS_ALLOWANCE

pytestmark = pytest.mark.django_db(transaction=True)

MiB = 2**20
LIMIT = 256 * MiB
# The web process holds a 64 KiB chunk at a time over a baseline of about 80 MiB (Django, the app, gunicorn).
WEB_PEAK_MB = 150
# The import job holds one row while checking and one batch (IMPORT_CHUNK rows, at most IMPORT_CHUNK_CHARS of
# text) while writing, over the Celery worker's own baseline of about 90 MiB.
WORKER_PEAK_MB = 200


def _stored_files(settings) -> set[Path]:
    return {path for path in (Path(settings.DATA_DIR) / "uploads").rglob("*") if path.is_file()}


@pytest.fixture
def new_files(settings):
    """The upload files stored since the test began (other tests' run uploads stay in the session's data dir)."""
    before = _stored_files(settings)
    return lambda: _stored_files(settings) - before


@pytest.fixture
def web(tmp_path):
    servers = []

    def start(kind: str = "gunicorn", **env: str):
        server = start_web_server(kind, server_environment(worker_environment(), **env),
                                  tmp_path / f"{kind}-{len(servers)}.log")
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _import_upload(server, project, researcher, size: int):
    return post_file(
        server.port, f"/projects/{project.pk}/import/", fields={"file_format": "auto"}, file_field="file",
        file_name="big.jsonl", file_size=size, file_chunks=jsonl_body(size), session_cookie=session_cookie_for(researcher),
    )


@pytest.mark.parametrize("kind", ["gunicorn", "runserver"])
def test_1_gb_over_the_limit_is_refused_with_a_413_and_the_server_stays_small(web, kind, researcher, new_files):
    server = web(kind, PREFLAB_UPLOAD_MAX_BYTES=str(LIMIT))
    project = services.project_create(name="Refused", responses_per_item=2)

    answer = _import_upload(server, project, researcher, 2**30)

    assert answer.status == 413, (answer.status, answer.body[:300], server.log_tail())
    assert "at most 256 MiB (PREFLAB_UPLOAD_MAX_BYTES). Nothing was stored." in answer.body
    peak = peak_rss_mb(server.request_pid)
    assert peak < WEB_PEAK_MB, f"{kind} peaked at {peak:.0f} MiB"
    assert not ImportJob.objects.exists() and new_files() == set()


def test_a_file_just_over_the_limit_is_refused_as_it_streams(web, researcher, new_files):
    server = web("gunicorn", PREFLAB_UPLOAD_MAX_BYTES=str(LIMIT))
    project = services.project_create(name="Refused", responses_per_item=2)
    # under the limit and its allowance for form fields as a whole, so only the count of the file refuses it
    size = LIMIT + FORM_FIELDS_ALLOWANCE // 2

    answer = _import_upload(server, project, researcher, size)

    assert answer.status == 413, (answer.status, answer.body[:300], server.log_tail())
    assert "at most 256 MiB" in answer.body
    assert peak_rss_mb(server.request_pid) < WEB_PEAK_MB
    assert not ImportJob.objects.exists() and new_files() == set()


def test_a_256_mib_file_is_accepted_and_imported_by_a_worker_with_bounded_memory(
    web, celery_worker_factory, researcher, new_files
):
    server = web("gunicorn", PREFLAB_UPLOAD_MAX_BYTES=str(LIMIT))
    worker = celery_worker_factory(queues=("default",))
    project = services.project_create(name="Large", responses_per_item=2, owner=researcher)
    size = LIMIT

    answer = _import_upload(server, project, researcher, size)

    assert answer.status == 302 and answer.location == f"/projects/{project.pk}/", (answer, server.log_tail())
    web_peak = peak_rss_mb(server.request_pid)
    assert web_peak < WEB_PEAK_MB, f"the web process peaked at {web_peak:.0f} MiB"
    job = ImportJob.objects.get()
    from tests.webapp.experiments.helpers import wait_for

    wait_for(lambda: not ImportJob.objects.get(pk=job.pk).is_active, timeout_s=300, what=worker.log_tail)
    job.refresh_from_db()
    rows = size // 8192
    assert job.status == "succeeded", f"{job.error}\n{worker.log_tail()}"
    assert (job.created_count, job.rows_checked, job.bytes_done) == (rows, rows, size)
    assert Prompt.objects.filter(project=project).count() == rows
    assert Response.objects.filter(prompt__project=project).count() == 2 * rows
    assert new_files() == set()
    worker_peak = peak_rss_mb(worker.process.pid)
    assert worker_peak < WORKER_PEAK_MB, f"the worker peaked at {worker_peak:.0f} MiB"


# An answer that waited for the body would come after seconds: gunicorn reads 2 GiB in 7.6 s on this machine.
EARLY_ANSWER_S = 2.0


def _upload_to_each_endpoint(server, project, researcher, *, size: int, chunks, chunked: bool = False):
    """The import form, the run form (data uploaded with it) and the API's import, each sent `size` bytes from
    `chunks()` with that Content-Length, or with none (Transfer-Encoding: chunked): {endpoint: answer}."""
    cookie = session_cookie_for(researcher)
    _, token = api_token_create(user=researcher, name="uploads")
    return {
        "import form": post_file(
            server.port, f"/projects/{project.pk}/import/", fields={"file_format": "auto"}, file_field="file",
            file_name="rows.jsonl", file_size=size, file_chunks=chunks(), session_cookie=cookie, chunked=chunked),
        "run form": post_file(
            server.port, "/runs/new?kind=reward_model", fields={"data_source": "upload", "name": "uploaded"},
            file_field="upload", file_name="pairs.jsonl", file_size=size, file_chunks=chunks(), session_cookie=cookie,
            chunked=chunked),
        "API import": post_stream(
            server.port, f"/api/v1/projects/{project.pk}/records", chunks(), length=None if chunked else size,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}),
    }


def _nothing_stored(project) -> bool:
    return not (ImportJob.objects.exists() or Run.objects.exists() or Prompt.objects.filter(project=project).exists())


def test_a_2_gib_body_is_answered_413_before_it_is_read(web, researcher, new_files):
    server = web("gunicorn", PREFLAB_UPLOAD_MAX_BYTES=str(LIMIT))
    project = services.project_create(name="Refused", responses_per_item=2)

    answers = _upload_to_each_endpoint(server, project, researcher, size=2 * 2**30,
                                       chunks=lambda: zero_bytes(2 * 2**30))

    for endpoint, answer in answers.items():
        assert answer.status == 413, (endpoint, answer.status, answer.body[:300], server.log_tail())
        assert "at most 256 MiB" in answer.body, (endpoint, answer.body)
        assert answer.seconds < EARLY_ANSWER_S, f"{endpoint}: the 413 came after {answer.seconds:.1f} s"
    assert answers["API import"].body.startswith('{"detail": ')
    assert _nothing_stored(project) and new_files() == set()
    # the only worker is free again at once: it is not reading what the clients had left to send
    assert post_stream(server.port, "/healthz", [], length=0, headers={}).seconds < EARLY_ANSWER_S


@pytest.mark.parametrize("kind", ["gunicorn", "runserver"])
def test_a_body_sent_in_chunks_is_refused_with_a_411_saying_to_send_its_length(web, kind, researcher, new_files):
    server = web(kind)
    project = services.project_create(name="Chunked", responses_per_item=2)
    rows = b"".join(row_bytes(index, 512) for index in range(4))

    answers = _upload_to_each_endpoint(server, project, researcher, size=len(rows), chunks=lambda: iter([rows]),
                                       chunked=True)

    for endpoint, answer in answers.items():
        assert answer.status == 411, (endpoint, answer.status, answer.body[:300], server.log_tail())
        assert "(a Content-Length header); it does not take a body sent in chunks" in answer.body, endpoint
    assert answers["API import"].body.startswith('{"detail": ')
    assert _nothing_stored(project) and new_files() == set()
