"""Rounds: a first round fills a project's prompts; a later round never changes an answered item but makes new
items, each holding a copy of the compared round's best-ranked response beside new ones; the win rate of a round
over the one it is compared with, and pairs and exports that name both rounds."""

import csv
import io
import time

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.annotation.factories import add_round, make_annotators
from webapp.annotation import selectors, services, winrates
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Project, Prompt, Response, Round, SamplingJob

pytestmark = pytest.mark.django_db


def _pairwise_project(owner=None, *, prompts: int = 2) -> Project:
    project = services.project_create(name="Rounds", mode=Project.Mode.PAIRWISE, responses_per_item=2,
                                      annotators_per_item=1, owner=owner)
    services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"p{index}", text=f"Question {index}?") for index in range(prompts)])
    return project


def _rank_all(project: Project, annotator, prefer) -> int:
    """Rank every item the queue gives: `prefer(responses)` picks the best one, or None for a tie."""
    ranked = 0
    while (lease := services.assignment_lease_next(project=project, annotator=annotator)) is not None:
        shown = selectors.responses_shown(prompt=lease.prompt, annotator=annotator)
        best = prefer(shown)
        tiers = [[r.pk for r in shown]] if best is None else [[best.pk], [r.pk for r in shown if r != best]]
        services.ranking_submit(assignment_id=lease.pk, annotator=annotator, tiers=tiers)
        ranked += 1
    return ranked


def _new_one(shown: list[Response]) -> Response:
    return next(response for response in shown if response.copy_of_id is None)


def test_a_first_round_fills_the_prompts_and_a_second_makes_new_items_beside_the_best_ranked():
    project = _pairwise_project()
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    first = add_round(project, "base", {"p0": ["b0", "b1"], "p1": ["b2", "b3"]})
    assert first.number == 1 and first.compared_with is None
    assert set(Prompt.objects.filter(project=project).values_list("round", flat=True)) == {first.pk}
    # round 1 ranked: "b1" and "b2" preferred
    assert _rank_all(project, annotator, lambda shown: next(r for r in shown if r.text in ("b1", "b2"))) == 2
    ranked_before = {p.pk: list(p.responses.values_list("pk", "text")) for p in Prompt.objects.filter(project=project)}

    second = add_round(project, "dpo step 2", {"p0": ["d0", "d1"], "p1": ["d2", "d3"]})
    assert second.number == 2 and second.compared_with == first

    # the answered items are as they were; each new item: a copy of the best-ranked, then one new response
    for pk, responses in ranked_before.items():
        assert list(Prompt.objects.get(pk=pk).responses.values_list("pk", "text")) == responses
    items = Prompt.objects.filter(project=project, round=second).order_by("id")
    assert [item.external_id for item in items] == ["p0 · round 2", "p0 · round 2 · 2", "p1 · round 2",
                                                     "p1 · round 2 · 2"]
    assert [[r.text for r in item.responses.order_by("id")] for item in items] == [
        ["b1", "d0"], ["b1", "d1"], ["b2", "d2"], ["b2", "d3"]]
    copy = items[0].responses.order_by("id").first()
    assert copy.round == first and copy.copy_of.text == "b1" and copy.copy_of.prompt.external_id == "p0"
    assert all(item.origin.external_id == item.external_id[:2] and item.response_count == 2 for item in items)

    # the annotator is shown round 2's responses, each beside round 1's best
    lease = services.assignment_lease_next(project=project, annotator=annotator)
    assert lease.prompt.round == second
    assert sorted(r.text for r in selectors.responses_shown(prompt=lease.prompt, annotator=annotator)) == ["b1", "d0"]


def test_the_win_rate_of_a_round_over_the_one_it_is_compared_with(researcher_client, researcher):
    project = _pairwise_project(owner=researcher)
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    first = add_round(project, "base", {"p0": ["b0", "b1"], "p1": ["b2", "b3"]})
    _rank_all(project, annotator, lambda shown: shown[0])
    second = add_round(project, "dpo", {"p0": ["d0", "d1"], "p1": ["d2", "d3"]})
    # new wins on three items, loses on one (d3); a tie would count half
    assert _rank_all(project, annotator, lambda shown: (
        next(r for r in shown if r.copy_of_id) if any(r.text == "d3" for r in shown) else _new_one(shown))) == 4
    rows = {row.round.number: row for row in selectors.round_rows(project)}
    assert rows[1].win_rate is None and rows[1].items == 2 and rows[1].responses == 4
    rate = rows[2].win_rate
    assert (rate.won, rate.tied, rate.lost, rate.text) == (3, 0, 1, "75 % (30–95 %)")
    assert rows[2].round.compared_with == first and rows[2].items == 4 and rows[2].ranked_items == 4

    page = researcher_client.get(f"/projects/{project.pk}/rounds/").content.decode()
    assert 'id="round-2"' in page and "75 % (30–95 %)" in page and "3 won · 0 tied · 1 lost of 4" in page
    detail = researcher_client.get(f"/projects/{project.pk}/").content.decode()
    assert 'id="rounds"' in detail and "75 % (30–95 %)" in detail
    item = Prompt.objects.get(project=project, external_id="p0 · round 2")
    item_page = researcher_client.get(f"/projects/{project.pk}/items/{item.pk}/").content.decode()
    assert "round 1 · <code>base</code>" in item_page and "round 2 · <code>dpo</code>" in item_page
    items_page = researcher_client.get(f"/projects/{project.pk}/items/").content.decode()
    assert 'class="item-round">2<' in items_page
    assert second.number == 2


def test_wilson_interval_and_ties_count_half():
    assert winrates.win_rate([]) is None
    tied = winrates.win_rate([1.0, 0.5, 0.5, 0.0])
    assert (tied.won, tied.tied, tied.lost, tied.rate) == (1, 2, 1, 0.5)
    low, high = winrates.wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    assert winrates.wilson_interval(0, 3)[0] == pytest.approx(0.0) and winrates.wilson_interval(3, 3)[1] == pytest.approx(1.0)
    assert [winrates.outcome(1, 2), winrates.outcome(2, 2), winrates.outcome(2, 1)] == [1.0, 0.5, 0.0]


def test_pairs_and_exports_name_both_rounds_and_models(researcher_client, researcher):
    project = _pairwise_project(owner=researcher, prompts=1)
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    add_round(project, "base", {"p0": ["b0", "b1"]})
    _rank_all(project, annotator, lambda shown: shown[0])
    add_round(project, "dpo", {"p0": ["d0", "d1"]})
    _rank_all(project, annotator, _new_one)
    rows = list(selectors.pair_rows(project_id=project.pk))
    assert [(row["chosen_round"], row["rejected_round"]) for row in rows] == [(1, 1), (2, 1), (2, 1)]
    assert {(row["chosen_model"], row["rejected_model"]) for row in rows[1:]} == {("dpo", "base")}
    derived = list(selectors.pair_rows(project_id=project.pk, strategy="adjacent"))
    assert [(row["chosen_round"], row["rejected_round"]) for row in derived] == [(1, 1), (2, 1), (2, 1)]
    training = selectors.preference_pairs_for_training(project_id=project.pk)
    assert training[1]["chosen_model"] == "dpo" and training[1]["rejected_round"] == 1
    exported = researcher_client.get(f"/projects/{project.pk}/export/pairs.csv/")
    table = list(csv.DictReader(io.StringIO(b"".join(exported.streaming_content).decode())))
    assert [(row["chosen_round"], row["rejected_round"], row["chosen_model"]) for row in table][1:] == [
        ("2", "1", "dpo"), ("2", "1", "dpo")]
    # training prompts are the project's prompts, not the items rounds made from them
    assert len(selectors.prompts_for_training(project_id=project.pk)) == 1
    assert selectors.training_prompt_count(project_id=project.pk) == 1


def test_a_round_compared_with_none_sets_new_responses_beside_the_prompts_own_best():
    project = _pairwise_project(prompts=1)
    first = add_round(project, "base", {"p0": ["b0", "b1"]})
    # nobody was given the item yet: more of the same round join it
    more = services.round_responses_add(round_id=first.pk, prompt_id=project.prompts.get().pk, texts=["b2"],
                                        source=Response.Source.MODEL, source_detail={})
    assert more[0].prompt.external_id == "p0" and project.prompts.get().response_count == 3
    other = add_round(project, "other", {"p0": ["o0"]}, compared_with=None)
    item = Prompt.objects.get(round=other)
    assert [r.text for r in item.responses.order_by("id")] == ["b0", "o0"]
    elsewhere = services.project_create(name="Other", responses_per_item=2)
    with pytest.raises(ValidationError, match="not a round of this project"):
        services.round_create(project=elsewhere, source=Round.Source.SAMPLED, model="m", responses_per_prompt=2,
                              compared_with=first)


def test_sampling_asks_a_project_without_prompts_to_import_them_first(researcher, tiny_model_dir, settings):
    settings.MODEL_ROOTS = [tiny_model_dir.parent]
    project = services.project_create(name="Empty", responses_per_item=2, owner=researcher)
    with pytest.raises(ValidationError, match="no prompts to sample responses for"):
        services.sampling_job_create(project=project, model_path=str(tiny_model_dir), created_by=researcher,
                                     generation_settings={"responses_per_prompt": 2, "max_new_tokens": 4,
                                                          "temperature": 1.0, "top_p": 1.0, "seed": 0})
    assert not Round.objects.exists() and not SamplingJob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_sampling_k_on_a_project_holding_k_adds_a_round_on_a_real_worker(
    celery_worker_factory, tiny_model_dir, settings, researcher
):
    """Issue 29: asking for 2 responses on a project that has 2 gave "succeeded, 0 / 0 prompts"."""
    settings.MODEL_ROOTS = [tiny_model_dir.parent]
    project = _pairwise_project(owner=researcher, prompts=2)
    first = add_round(project, "imported", {"p0": ["a", "b"], "p1": ["c", "d"]})
    celery_worker_factory(queues=("gpu",), PREFLAB_MODEL_ROOTS=str(tiny_model_dir.parent), OMP_NUM_THREADS="1")
    job = services.sampling_job_create(
        project=project, model_path=str(tiny_model_dir), created_by=researcher,
        generation_settings={"responses_per_prompt": 2, "max_new_tokens": 4, "temperature": 1.0, "top_p": 1.0,
                             "seed": 0})
    deadline = time.monotonic() + 120
    while job.is_active and time.monotonic() < deadline:
        time.sleep(0.5)
        job.refresh_from_db()
    assert job.status == SamplingJob.Status.SUCCEEDED, job.error
    assert (job.progress_done, job.progress_total) == (2, 2)
    assert job.round.number == 2 and job.round.compared_with == first and job.round.model == str(tiny_model_dir)
    sampled = Response.objects.filter(round=job.round, copy_of__isnull=True)
    assert sampled.count() == 4 and Prompt.objects.filter(round=job.round).count() == 4
    assert list(Prompt.objects.get(external_id="p0").responses.values_list("text", flat=True)) == ["a", "b"]
