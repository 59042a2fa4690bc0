"""The API against its own OpenAPI schema, fuzzed by schemathesis: every operation, its examples, the coverage of
its schema's boundaries and random requests, valid and not, sent with a researcher's real token to a small seeded
database (tests/webapp/api/schema_fuzz_data.py). No answer is a 5xx; every status code and content type is one the
operation declares, and every body the one it declares; a request the schema allows is not refused; a request the
schema forbids is. PREFLAB_SCHEMA_EXAMPLES bounds the random examples of each operation (default 8: the whole
test takes under a minute on 2 cores); `PREFLAB_SCHEMA_EXAMPLES=500` searches longer.

The requests go through Django's WSGI handler in this test's thread and database transaction (schemathesis calls a
WSGI app in process), so nothing the fuzzer writes outlives the test. The stateful phase (chains of requests along
the schema's links) runs only from the command line: `schemathesis run .../api/v1/openapi.json` against a server.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from tests.webapp.api.schema_fuzz_data import Seeded, seed_api_data
from tests.webapp.experiments.helpers import tiny_model_roots
from webapp.api.schemas import PYTHON_WHITESPACE

# schemathesis's parametrized test runs none of its operations in a pytest-xdist worker (and passes): `make test`
# runs this module in its serial pass
pytestmark = pytest.mark.serial

NDJSON = "application/x-ndjson"
EXAMPLES = int(os.environ.get("PREFLAB_SCHEMA_EXAMPLES", "8"))

# Operations that check more than a schema can say, where a 422 for a request the schema allows is the answer
# the schema declares (and describes): a launch's or a fork's config is the trainer's (its fields depend on the
# kind, its bounds on each other and on the data), a model path must exist under the model roots, a record is
# checked as a row of the page's import, a checkpoint must be one of the run's, an external run's project_id must
# name a project, a ranking must name the item's responses, an artifact's name is a file name, a project's rating
# scale is ordered and its aspects named once. Every other operation refuses only what its schema forbids.
CHECKED_BEYOND_THE_SCHEMA = (r"^/api/v1/(projects|runs|runs/external|runs/\{run_id\}/(fork|resume|update)|models"
                             r"|projects/\{project_id\}/records|items/\{item_id\}/ranking"
                             r"|runs/\{run_id\}/artifacts/\{name\})$")
# schemathesis's positive_data_acceptance statuses (less 429 and 5xx, which never answer here), with that 422
ACCEPTED_OR_CHECKED_FURTHER = ["2xx", "401", "403", "404", "409", "422"]
# Operations whose path names a run of its own: the external run's program logs into it.
EXTERNAL_RUN_OPERATIONS = ("/log", "/samples", "/heartbeat", "/finish", "/reattach", "/update")


class WsgiInTheTestTransaction:
    """Django's WSGI handler, without closing the database connection at the end of each request (as Django's
    test client does): the connection holds the test's transaction."""

    def __init__(self) -> None:
        self.handler = WSGIHandler()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        signals.request_started.disconnect(close_old_connections)
        signals.request_finished.disconnect(close_old_connections)
        try:
            response = self.handler(environ, start_response)
            try:
                return [b"".join(response)]
            finally:
                response.close()
        finally:
            signals.request_started.connect(close_old_connections)
            signals.request_finished.connect(close_old_connections)


@schemathesis.serializer(NDJSON)
def _ndjson(context, value: Any) -> bytes:
    """The records endpoint's NDJSON body, which its schema describes as a string (one JSON object a line)."""
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


CONFIG = SchemathesisConfig.from_dict({
    # No NUL in generated text: a NUL is refused anywhere, and the schema says so of every string field, but not
    # of the text inside its free-form objects (a config, a detail); tests/webapp/api/test_never_a_500.py and
    # tests/webapp/api/test_external_runs.py send NULs there.
    # The token is the seeded researcher's, sent with every request; tests/webapp/api/test_auth.py walks every
    # operation without one and with bad ones.
    "generation": {"max-examples": EXAMPLES, "allow-x00": False, "with-security-parameters": False},
    # A body both invalid and too large (1,000 responses of up to 200,000 characters each) may be refused for its
    # size first: 413 is a refusal too.
    "checks": {"negative_data_rejection": {"expected-statuses": [
        "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]}},
    "operations": [{"include-path-regex": CHECKED_BEYOND_THE_SCHEMA,
                    "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED_OR_CHECKED_FURTHER}}}],
})
# The schema the app serves, read at import (its view touches no database).
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", WsgiInTheTestTransaction(), config=CONFIG)


@pytest.fixture
def seeded(researcher, settings, tiny_model_dir) -> Seeded:
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    return seed_api_data(researcher=researcher, model_dir=tiny_model_dir)


@pytest.mark.django_db
@schema.parametrize()
# the seeded rows are the same for every example of an operation: what the fuzzer writes stays, as it would on a
# server (a project created, a member removed, the external run finished), which is what it should cope with
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_every_operation_answers_as_its_schema_says(case, seeded):
    _aim_at_the_seeded_rows(case, seeded)
    case.call_and_validate(headers={"Authorization": f"Bearer {seeded.token}"})


def _aim_at_the_seeded_rows(case, seeded: Seeded) -> None:
    """A generated id (any whole number fits the schema) is replaced by the seeded row's, so that the requests reach
    the endpoints' code and not only their 404s; an id the fuzzer made invalid on purpose (a string) is kept."""
    external = case.operation.path.endswith(EXTERNAL_RUN_OPERATIONS) and case.method == "POST"
    ids = {"project_id": seeded.project_id, "prompt_id": seeded.prompt_id, "item_id": seeded.prompt_id,
           "run_id": seeded.external_run_id if external else seeded.run_id}
    for name, row_id in ids.items():
        if isinstance((case.path_parameters or {}).get(name), int):
            case.path_parameters[name] = row_id


def test_blank_in_the_schema_is_what_the_server_strips():
    """The schema's "not blank" pattern names Python's whitespace (str.strip(), with which the server decides)
    character by character: a regex engine's \\s is another set in each."""
    whitespace = re.compile(f"[{PYTHON_WHITESPACE}]")
    every_character = (chr(code) for code in range(sys.maxunicode + 1))
    assert {char for char in every_character if whitespace.fullmatch(char)} == {
        chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace()}
