"""Two researchers importing the same file at once: one imports it, the other is told it is already present."""

import threading

import pytest
from django.db import connection, connections

from webapp.annotation import services
from webapp.annotation.importing import parse_import
from webapp.annotation.models import Prompt, Response

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = "\n".join(f'{{"id": "q{i}", "prompt": "Question {i}?", "responses": ["a{i}", "b{i}"]}}' for i in range(300))


def test_the_same_file_imported_twice_at_once_gives_no_duplicate_and_no_error():
    if connection.vendor != "postgresql":
        pytest.skip("the guarantee is tested on Postgres (row locks)")
    project = services.project_create(name="Twice", responses_per_item=2)
    records = parse_import(ROWS.encode(), file_format="jsonl")
    start = threading.Barrier(2)
    summaries, errors = [], []

    def import_it() -> None:
        try:
            start.wait()
            summaries.append(services.prompts_import(project=project, records=records))
        except Exception as error:  # reported by the main thread
            errors.append(f"{type(error).__name__}: {error}")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=import_it) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted((s.created, s.already_present) for s in summaries) == [(0, 300), (300, 0)]
    assert Prompt.objects.filter(project=project).count() == 300
    assert Response.objects.filter(prompt__project=project).count() == 600
