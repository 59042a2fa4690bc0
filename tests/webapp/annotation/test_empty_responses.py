"""Empty (whitespace-only) responses carry no preference: no pair holds one, export never shows one, the project
page counts them, and imports refuse empty chosen/rejected naming the line and the field."""

import json

import pytest

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.importing import ImportFileError, parse_import
from webapp.annotation.models import PreferencePair, Response
from webapp.annotation.selectors import preference_pairs_for_training, responses_shown

pytestmark = pytest.mark.django_db


@pytest.fixture
def ranked_over_an_empty_response(researcher):
    """One item with 'good', 'bad' and a sampled response of only whitespace, ranked good > empty > bad; the
    researcher's project."""
    (annotator,) = make_annotators(1)
    project = make_project(items=1, responses=3, texts=[["good", "bad"]], members=[annotator], owner=researcher)
    prompt = project.prompts.get()
    services.responses_add(prompt_id=prompt.pk, texts=[" \n\t"], source=Response.Source.MODEL, source_detail={})
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    by_text = {response.text: response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator)}
    tiers = [[by_text["good"]], [by_text[" \n\t"]], [by_text["bad"]]]
    services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=tiers)
    return project, by_text


def _pair_texts(project) -> set[tuple[str, str]]:
    return set(PreferencePair.objects.filter(project=project).values_list("chosen__text", "rejected__text"))


def test_a_ranking_over_an_empty_response_gives_no_pair_with_it(ranked_over_an_empty_response):
    project, _ = ranked_over_an_empty_response
    assert _pair_texts(project) == {("good", "bad")}
    # the one pair left is the whole ranking: weight 1/C(2,2)
    assert PreferencePair.objects.get(project=project).weight == pytest.approx(1.0)
    services.preference_pairs_rebuild(project=project)
    assert _pair_texts(project) == {("good", "bad")}


@pytest.mark.parametrize("strategy", ["all", "best_vs_rest", "adjacent"])
def test_export_has_no_empty_pair_even_one_stored_before_the_fix(researcher_client, ranked_over_an_empty_response,
                                                                 strategy):
    project, by_text = ranked_over_an_empty_response
    prompt = project.prompts.get()
    # a pair written by the old code, which paired the empty response
    PreferencePair.objects.create(project=project, prompt=prompt, ranking=prompt.rankings.get(),
                                  chosen_id=by_text["good"], rejected_id=by_text[" \n\t"], weight=1 / 3, margin=1)
    response = researcher_client.get(f"/projects/{project.pk}/export/pairs.jsonl/", {"strategy": strategy})
    rows = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [(row["chosen"], row["rejected"]) for row in rows] == [("good", "bad")]
    training = preference_pairs_for_training(project_id=project.pk, strategy=strategy)
    assert [(row["chosen"], row["rejected"]) for row in training] == [("good", "bad")]


def test_the_project_page_counts_empty_responses(researcher_client, ranked_over_an_empty_response):
    project, _ = ranked_over_an_empty_response
    prompt = project.prompts.get()
    page = researcher_client.get(f"/projects/{project.pk}/").content.decode()
    assert "1 empty response <" in page
    services.responses_add(prompt_id=prompt.pk, texts=[""], source=Response.Source.MODEL, source_detail={})
    assert "2 empty responses" in researcher_client.get(f"/projects/{project.pk}/").content.decode()


@pytest.mark.parametrize("row, field", [
    ({"prompt": "p", "chosen": "  ", "rejected": "no"}, "chosen"),
    ({"prompt": "p", "chosen": "yes", "rejected": [{"role": "assistant", "content": "\n"}]}, "rejected"),
    ({"messages": [{"role": "user", "content": "p"}, {"role": "assistant", "content": " "}]}, "messages[1].content"),
])
def test_imports_refuse_empty_answers_naming_line_and_field(row, field):
    lines = json.dumps({"prompt": "fine", "chosen": "a", "rejected": "b"}) + "\n" + json.dumps(row) + "\n"
    with pytest.raises(ImportFileError) as refused:
        parse_import(lines.encode(), file_format="jsonl")
    assert (refused.value.line, refused.value.field) == (2, field)
    assert "is empty" in str(refused.value)
