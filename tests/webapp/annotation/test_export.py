"""Export: TRL JSONL with weight/margin/ranking/annotator, escaped CSV, a datasets directory, raw rankings."""

import csv
import io
import json

import pytest
from django.core.management import call_command

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.exporting import csv_cell
from webapp.annotation.selectors import preference_pairs_for_training, prompts_for_training, responses_shown

pytestmark = pytest.mark.django_db


@pytest.fixture
def ranked_project(researcher):
    (annotator,) = make_annotators(1)
    project = make_project(items=1, texts=[["=HYPERLINK(1)", "plain", "@SUM(A1)"]], members=[annotator],
                           owner=researcher)
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    by_text = {r.text: r.pk for r in responses_shown(prompt=lease.prompt, annotator=annotator)}
    tiers = [[by_text["plain"]], [by_text["=HYPERLINK(1)"]], [by_text["@SUM(A1)"]]]
    ranking = services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=tiers)
    return project, ranking


def _body(response) -> str:
    return b"".join(response.streaming_content).decode()


def test_jsonl_export_is_trl_rows_checked_line_by_line(researcher_client, ranked_project):
    project, ranking = ranked_project
    response = researcher_client.get(f"/projects/{project.pk}/export/pairs.jsonl/")
    assert response.streaming and response["Content-Disposition"].endswith('-all-pairs.jsonl"')
    rows = [json.loads(line) for line in _body(response).splitlines()]
    expected = {("plain", "=HYPERLINK(1)", 1.0), ("plain", "@SUM(A1)", 2.0), ("=HYPERLINK(1)", "@SUM(A1)", 1.0)}
    assert {(r["chosen"], r["rejected"], r["margin"]) for r in rows} == expected
    for row in rows:
        assert row["prompt"] == "Question 0?" and row["weight"] == pytest.approx(1 / 3)
        assert (row["ranking_id"], row["annotator"]) == (ranking.pk, "ann0")


def test_other_strategies_and_the_training_selectors(ranked_project):
    project, _ = ranked_project
    best = preference_pairs_for_training(project_id=project.pk, strategy="best_vs_rest")
    assert sorted((p["chosen"], p["rejected"]) for p in best) == [("plain", "=HYPERLINK(1)"), ("plain", "@SUM(A1)")]
    assert set(best[0]) == {"prompt", "chosen", "rejected", "weight", "margin", "chosen_round", "rejected_round",
                            "chosen_model", "rejected_model"}
    assert prompts_for_training(project_id=project.pk) == [{"prompt": "Question 0?", "answer": None, "metadata": {}}]


def test_csv_cells_that_start_a_formula_are_escaped(researcher_client, ranked_project):
    project, _ = ranked_project
    rows = list(csv.DictReader(io.StringIO(_body(researcher_client.get(f"/projects/{project.pk}/export/pairs.csv/")))))
    assert len(rows) == 3
    assert {row["chosen"] for row in rows} == {"plain", "'=HYPERLINK(1)"}
    assert {row["rejected"] for row in rows} == {"'=HYPERLINK(1)", "'@SUM(A1)"}
    assert [csv_cell(v) for v in ("+1", "-1", "\tx", "ok", 3)] == ["'+1", "'-1", "'\tx", "ok", 3]


def test_raw_rankings_and_a_datasets_directory(researcher_client, ranked_project, tmp_path):
    from datasets import load_from_disk

    project, ranking = ranked_project
    raw = [json.loads(line) for line in _body(researcher_client.get(f"/projects/{project.pk}/export/rankings.jsonl/")).splitlines()]
    assert raw[0]["ranking_id"] == ranking.pk
    assert [[entry["text"] for entry in tier] for tier in raw[0]["tiers"]] == [["plain"], ["=HYPERLINK(1)"], ["@SUM(A1)"]]
    zipped = researcher_client.get(f"/projects/{project.pk}/export/dataset.zip/")
    assert zipped["Content-Type"] == "application/zip"
    call_command("export_preferences", "--project", project.name, "--format", "dataset", "--output",
                 str(tmp_path / "ds"), stdout=io.StringIO())
    dataset = load_from_disk(str(tmp_path / "ds"))
    assert len(dataset) == 3 and set(dataset.column_names) >= {"prompt", "chosen", "rejected", "weight", "margin"}


@pytest.mark.django_db(False)
def test_a_datasets_directory_is_written_chunk_by_chunk_with_a_fixed_schema(tmp_path):
    from datasets import load_from_disk

    from webapp.annotation.exporting import pair_features, save_dataset

    # the first chunk has no margin, ranking or annotator at all: inferred per chunk, its columns would be null
    rows = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}", "weight": 1.0 / (i + 1),
             "margin": None if i < 2 else float(i), "ranking_id": None if i < 2 else i,
             "annotator": None if i < 2 else "ann", "chosen_round": None if i < 2 else 2,
             "rejected_round": None if i < 2 else 1, "chosen_model": "", "rejected_model": "",
             "label_source": "imported" if i < 2 else "unanimous"} for i in range(5)]
    assert save_dataset(iter(rows), tmp_path / "ds", chunk_rows=2) == 5
    dataset = load_from_disk(str(tmp_path / "ds"))
    assert dataset.features == pair_features()
    assert dataset.to_list() == rows
    assert [path.name for path in tmp_path.iterdir()] == ["ds"]  # the chunk parts are gone
    # imported pairs only: no margins, rankings or annotators anywhere, and still the same column types
    unranked = [{**row, "margin": None, "ranking_id": None, "annotator": None} for row in rows]
    save_dataset(iter(unranked), tmp_path / "unranked", chunk_rows=2)
    assert load_from_disk(str(tmp_path / "unranked")).features == pair_features()
    with pytest.raises(ValueError, match="no preference pairs"):
        save_dataset(iter([]), tmp_path / "empty")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ds", "unranked"]
