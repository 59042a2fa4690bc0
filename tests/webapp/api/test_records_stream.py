"""A large NDJSON import through a real HTTP server is read as a stream (to a temporary file, then a line at a
time): the server's memory holds a chunk, a line or a batch of records, never the body."""

from __future__ import annotations

import http.client
import json
import tracemalloc
from urllib.parse import urlsplit

import pytest

from tests.webapp.annotation.factories import make_project
from webapp.accounts.services import api_token_create
from webapp.annotation.models import Prompt, Response

pytestmark = pytest.mark.django_db(transaction=True)

RECORDS = 12_000
FILLER = "x" * 2_400
SEND_CHUNK = 64 * 2**10


def test_a_28_mb_ndjson_body_is_imported_without_holding_it(live_server, researcher, tmp_path):
    project = make_project(items=0, name="Streamed", owner=researcher)
    _, token = api_token_create(user=researcher, name="stream")
    body_path = tmp_path / "records.ndjson"
    with body_path.open("w") as body:
        for index in range(RECORDS):
            body.write(json.dumps({"id": f"s{index}", "prompt": f"{index} {FILLER}", "responses": ["a", "b"]}) + "\n")
    size = body_path.stat().st_size
    assert size > 28 * 2**20

    address = urlsplit(live_server.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=120)
    tracemalloc.start()
    try:
        connection.putrequest("POST", f"/api/v1/projects/{project.pk}/records")
        connection.putheader("Authorization", f"Bearer {token}")
        connection.putheader("Content-Type", "application/x-ndjson")
        connection.putheader("Content-Length", str(size))
        connection.endheaders()
        with body_path.open("rb") as body:
            while chunk := body.read(SEND_CHUNK):
                connection.send(chunk)
        response = connection.getresponse()
        answer = json.loads(response.read())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        connection.close()

    assert response.status == 200 and answer == {"created": RECORDS, "skipped": 0}
    assert Prompt.objects.filter(project=project).count() == RECORDS
    assert Response.objects.filter(prompt__project=project).count() == 2 * RECORDS
    # a batch (500 records of about 2.5 kB) and its SQL take some MB; reading the body whole would take 28 more
    assert peak < size / 2, f"peak {peak / 2**20:.1f} MiB for a body of {size / 2**20:.1f} MiB"
