"""The run page says what a run trains on in words, with a link to its project (issue 13)."""

import pytest

from webapp.annotation.services import project_create
from webapp.experiments.models import Run
from webapp.experiments.selectors import data_source_text

pytestmark = pytest.mark.django_db


def _run(researcher, source: dict) -> Run:
    return Run.objects.create(name="described", kind="grpo", config={}, data_source=source, created_by=researcher)


def test_each_kind_of_source_reads_as_words():
    project = project_create(name="Demo «ranks»")
    assert data_source_text({"type": "arithmetic", "level": 1, "size": 64}).text == "Arithmetic, level 1, 64 problems"
    assert data_source_text({"type": "arithmetic", "level": 2, "size": 1}).text == "Arithmetic, level 2, 1 problem"
    pairs = data_source_text({"type": "project_pairs", "project_id": project.pk})
    assert (pairs.text, pairs.project_id) == ("Project «Demo «ranks»»: preference pairs", project.pk)
    kto = data_source_text({"type": "project_pairs", "project_id": project.pk, "aggregation": "majority"}, kind="kto")
    assert kto.text == "Project «Demo «ranks»»: unpaired (KTO) rows, aggregation: majority"
    prompts = data_source_text({"type": "project_prompts", "project_id": project.pk})
    assert prompts.text == "Project «Demo «ranks»»: prompts"
    gone = data_source_text({"type": "project_prompts", "project_id": 999_999})
    assert (gone.text, gone.project_id) == ("Project #999999 (deleted): prompts", None)
    upload = {"type": "upload", "path": "/data/uploads/3f2a.jsonl", "name": "pairs.jsonl", "rows": 200}
    assert data_source_text(upload).text == "Upload: pairs.jsonl, 200 rows"


def test_the_run_page_shows_the_words_and_links_the_project(researcher_client, researcher):
    project = project_create(name="Closed loop")
    run = _run(researcher, {"type": "project_prompts", "project_id": project.pk})
    page = researcher_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'<a href="/projects/{project.pk}/">Project «Closed loop»: prompts</a>' in page
    assert "{&#x27;type&#x27;" not in page and "project_id" not in page
    arithmetic = _run(researcher, {"type": "arithmetic", "level": 3, "size": 16})
    status = researcher_client.get(f"/runs/{arithmetic.pk}/status").content.decode()
    assert "Arithmetic, level 3, 16 problems" in status
