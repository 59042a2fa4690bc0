"""Suggestion jobs (issue 32, point 1): a reward-model run's scores or a judge model's verdicts in both orders become
Suggestion rows, computed by the gpu worker. A judge that always answers A leaves no suggestion standing and its
position bias is 100 %; a judge that reads the content leaves them all standing, bias 0 %."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tests.judges import GOOD_MARK, always_first, marked_response, train_judge
from tests.webapp.annotation.factories import add_round, make_annotators, make_project
from tests.webapp.annotation.test_round_scoring import _run, reward_checkpoint  # noqa: F401
from tests.webapp.experiments.helpers import tiny_model_roots, wait_for
from trainer.judging import Comparison
from trainer.suggestions import rating_suggestion, tiers_by_score
from webapp.annotation.models import Assignment, Project, Prompt, Ranking, Response, Suggestion, SuggestionJob
from webapp.annotation.services.suggesting import (
    ComputedSuggestion,
    suggestion_job_cancel,
    suggestion_job_create,
    suggestion_jobs_fail_stale,
    suggestions_store,
)
from workers.suggesting import suggestion_job_execute

# which response of each item is the better one: the first shown in two items, the second in the other two
MARKED_TEXTS = [[f"4 {GOOD_MARK}", "5"], ["7", f"3 {GOOD_MARK}"], [f"2 {GOOD_MARK}", "9"], ["0", f"6 {GOOD_MARK}"]]


def _judged_project(owner) -> Project:
    return make_project(items=4, responses=2, mode=Project.Mode.PAIRWISE, texts=MARKED_TEXTS, owner=owner,
                        name="Judged")


def _comparisons(project: Project) -> list[Comparison]:
    """What the job asks the judge, item by item: its two responses in id order (the job adds the other order)."""
    comparisons = []
    for item in Prompt.objects.filter(project=project).order_by("id"):
        first, second = item.responses.order_by("id")
        comparisons.append(Comparison(item.text, first.text, second.text))
    return comparisons


def _judge(settings, tiny_model_dir: Path, directory: Path, project: Project, rule) -> Path:
    judge = train_judge(tiny_model_dir, directory, guidelines=project.guidelines,
                        comparisons=_comparisons(project), rule=rule)
    settings.MODEL_ROOTS = tiny_model_roots(judge)
    return judge


def _finished(job: SuggestionJob) -> SuggestionJob:
    wait_for(lambda: not SuggestionJob.objects.get(pk=job.pk).is_active, timeout_s=120, what="the suggestion job")
    job.refresh_from_db()
    assert job.status == SuggestionJob.Status.SUCCEEDED, job.error
    return job


@pytest.mark.django_db(transaction=True)
def test_a_judge_that_always_prefers_position_a_leaves_no_suggestion_standing_and_shows_a_100_percent_bias(
    celery_worker_factory, settings, tiny_model_dir, researcher, researcher_client, tmp_path,
):
    project = _judged_project(researcher)
    judge = _judge(settings, tiny_model_dir, tmp_path / "always-a", project, always_first)
    celery_worker_factory(queues=("gpu",), OMP_NUM_THREADS="1")

    page = researcher_client.post(f"/projects/{project.pk}/suggestions/",
                                  {"round": "", "source": "judge", "judge_model": str(judge)}, HTTP_HX_REQUEST="true")
    assert page.status_code == 200, page.content.decode()
    job = _finished(SuggestionJob.objects.get(project=project))
    assert (job.source, job.round, job.agent, job.model_path) == ("judge", None, "judge always-a", str(judge.resolve()))
    assert (job.judge_comparisons, job.judge_order_decided, job.position_bias) == (4, 4, 1.0)
    assert (job.progress_done, job.progress_total) == (4, 4)
    rows = list(Suggestion.objects.filter(project=project))
    assert len(rows) == 4
    for row in rows:
        both = set(row.prompt.responses.values_list("pk", flat=True))
        # one tier holding both responses: a tie, with no confidence
        assert row.job == job and row.question == "ranking" and row.response is None and row.agent == "judge always-a"
        assert len(row.value) == 1 and set(row.value[0]) == both and row.score == 0.0
    card = researcher_client.get(f"/projects/{project.pk}/rounds/").content.decode()
    assert "the order decided 4 of 4 comparisons (100 %)" in card


@pytest.mark.django_db(transaction=True)
def test_a_judge_that_reads_the_content_leaves_every_suggestion_standing_with_no_position_bias(
    celery_worker_factory, settings, tiny_model_dir, researcher, researcher_client, tmp_path,
):
    project = _judged_project(researcher)
    judge = _judge(settings, tiny_model_dir, tmp_path / "content", project, marked_response)
    celery_worker_factory(queues=("gpu",), OMP_NUM_THREADS="1")

    job = _finished(suggestion_job_create(project=project, round_=None, source="judge", judge_model=str(judge),
                                          created_by=researcher))
    assert (job.judge_comparisons, job.judge_order_decided, job.position_bias) == (4, 0, 0.0)
    for row in Suggestion.objects.filter(job=job):
        marked = row.prompt.responses.get(text__contains=GOOD_MARK)
        other = row.prompt.responses.exclude(pk=marked.pk).get()
        assert row.value == [[marked.pk], [other.pk]] and 0.5 < row.score <= 1.0
    card = researcher_client.get(f"/projects/{project.pk}/rounds/").content.decode()
    assert "the order decided 0 of 4 comparisons (0 %)" in card


def _scores(checkpoint: Path, responses: list[Response]) -> dict[int, float]:
    from trainer.algorithms.rollout import RewardModelScorer

    scores = RewardModelScorer(str(checkpoint))([r.prompt.text for r in responses], [r.text for r in responses])
    return {r.pk: s for r, s in zip(responses, scores, strict=True)}


@pytest.mark.django_db(transaction=True)
def test_a_reward_model_suggests_tiers_by_score_for_a_round_and_a_newer_job_replaces_the_older_suggestions(
    reward_checkpoint, researcher,  # noqa: F811
):
    project = make_project(items=2, responses=3, owner=researcher, name="Scored")
    round_ = add_round(project, "dpo", {"item-0": ["x0", "a longer x1"], "item-1": ["y0 y0 y0", "y1"]})
    run = _run(researcher, checkpoint=reward_checkpoint)
    job = suggestion_job_create(project=project, round_=round_, source="reward_model", reward_run=run,
                                created_by=researcher)
    suggestion_job_execute(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == SuggestionJob.Status.SUCCEEDED and job.agent == f"reward model run #{run.pk}", job.error
    items = list(Prompt.objects.filter(round=round_).order_by("id"))
    assert len(items) == 2 and job.judge_comparisons == 0 and job.position_bias is None
    scores = _scores(reward_checkpoint, list(Response.objects.filter(prompt__in=items).select_related("prompt")))
    for item in items:
        expected = tiers_by_score({r.pk: scores[r.pk] for r in item.responses.order_by("id")})
        row = Suggestion.objects.get(prompt=item)
        assert row.value == expected.tiers and row.score == pytest.approx(expected.confidence, abs=1e-4)
        assert len(row.value) == item.responses.count()
    # an annotator took the first item's suggestion as their answer
    (annotator,) = make_annotators(1)
    accepted = Suggestion.objects.get(prompt=items[0])
    assignment = Assignment.objects.create(prompt=items[0], annotator=annotator, leased_at=timezone.now(),
                                           expires_at=timezone.now(), status=Assignment.Status.SUBMITTED)
    Ranking.objects.create(assignment=assignment, prompt=items[0], annotator=annotator, tiers=accepted.value,
                           suggestion=accepted)
    # a second job by the same run: one suggestion per item, the newer one's, and the accepted one kept for its answer
    second = suggestion_job_create(project=project, round_=round_, source="reward_model", reward_run=run,
                                   created_by=researcher)
    suggestion_job_execute(job_id=second.pk)
    assert sorted(Suggestion.objects.filter(job=second).values_list("prompt_id", flat=True)) == [i.pk for i in items]
    assert set(Suggestion.objects.exclude(job=second)) == {accepted}
    assert Ranking.objects.get(assignment=assignment).suggestion == accepted


@pytest.mark.django_db(transaction=True)
def test_a_resumed_job_skips_the_items_it_stored_suggestions_for(reward_checkpoint, researcher):  # noqa: F811
    project = make_project(items=3, responses=2, owner=researcher, name="Resumed")
    run = _run(researcher, checkpoint=reward_checkpoint)
    job = suggestion_job_create(project=project, round_=None, source="reward_model", reward_run=run,
                                created_by=researcher)
    first, *rest = Prompt.objects.filter(project=project).order_by("id")
    kept = first.responses.order_by("id").values_list("pk", flat=True)
    suggestions_store(job_id=job.pk, suggestions=[ComputedSuggestion(first.pk, "ranking", [list(kept)], 0.123)])
    suggestion_job_execute(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == SuggestionJob.Status.SUCCEEDED and (job.progress_done, job.progress_total) == (3, 3)
    assert Suggestion.objects.get(prompt=first).score == 0.123
    assert {row.prompt_id for row in Suggestion.objects.filter(job=job)} == {first.pk, *(p.pk for p in rest)}


@pytest.mark.django_db(transaction=True)
def test_a_reward_model_suggests_thumbs_above_the_median_and_ratings_by_quantile(reward_checkpoint, researcher):  # noqa: F811
    run = _run(researcher, checkpoint=reward_checkpoint)
    texts = [["one", "two two", "three three three"], ["four", "five five", "six six six six"]]
    for mode in (Project.Mode.THUMBS, Project.Mode.RATINGS):
        project = make_project(items=2, responses=3, mode=mode, texts=texts, owner=researcher, name=f"By {mode}")
        job = suggestion_job_create(project=project, round_=None, source="reward_model", reward_run=run,
                                    created_by=researcher)
        suggestion_job_execute(job_id=job.pk)
        responses = list(Response.objects.filter(prompt__project=project).select_related("prompt"))
        scores = _scores(reward_checkpoint, responses)
        rows = {row.response_id: row for row in Suggestion.objects.filter(job=job)}
        assert set(rows) == set(scores) and len(rows) == 6
        if mode == Project.Mode.THUMBS:
            # no human thumbs yet: up above the median of the six scores, three up and three down
            ups = {pk for pk, row in rows.items() if row.value == 1}
            assert all(row.question == "thumb" and row.value in (0, 1) for row in rows.values()) and len(ups) == 3
            assert min(scores[pk] for pk in ups) > max(s for pk, s in scores.items() if pk not in ups)
        else:
            for pk, row in rows.items():
                value, confidence = rating_suggestion(scores[pk], list(scores.values()), least=1, most=5)
                assert (row.question, row.value) == ("overall", value)
                assert row.score == pytest.approx(confidence, abs=1e-6)


@pytest.mark.django_db
def test_refusals_name_the_field_and_one_job_per_scope_runs_at_a_time(
    reward_checkpoint, settings, tiny_model_dir, researcher, researcher_client,  # noqa: F811
):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    project = make_project(items=2, responses=2, owner=researcher, name="Refused")
    ratings = make_project(items=1, responses=2, mode=Project.Mode.RATINGS, owner=researcher, name="Rated")
    sft = _run(researcher, kind="sft", checkpoint=reward_checkpoint)
    refusals = [
        (dict(project=project, source="oracle"), "source", "choose reward_model or judge"),
        (dict(project=project, source="reward_model", reward_run=sft), "reward_run", "not a reward model"),
        (dict(project=project, source="judge", judge_model=" "), "judge_model", "give the judge model"),
        (dict(project=project, source="judge", judge_model="/nowhere/judge"), "judge_model", "/nowhere/judge"),
        (dict(project=ratings, source="judge", judge_model=str(tiny_model_dir)), "source", "not ratings"),
    ]
    for arguments, field, text in refusals:
        with pytest.raises(ValidationError) as refused:
            suggestion_job_create(round_=None, created_by=researcher, **arguments)
        assert list(refused.value.message_dict) == [field] and text in refused.value.message_dict[field][0]
    page = researcher_client.post(f"/projects/{project.pk}/suggestions/", {"source": "judge", "judge_model": ""},
                                  HTTP_HX_REQUEST="true")
    assert page.status_code == 422 and "judge_model: give the judge model" in page.content.decode()
    assert not SuggestionJob.objects.exists()
    queued = suggestion_job_create(project=project, round_=None, source="judge", judge_model=str(tiny_model_dir),
                                   created_by=researcher)
    with pytest.raises(ValidationError, match="queued or running") as refused:
        suggestion_job_create(project=project, round_=None, source="judge", judge_model=str(tiny_model_dir),
                              created_by=researcher)
    assert list(refused.value.message_dict) == ["round"]
    # a queued job is canceled at once from its Cancel button, and can be resumed
    page = researcher_client.post(f"/suggestions/{queued.pk}/cancel/", HTTP_HX_REQUEST="true")
    queued.refresh_from_db()
    assert page.status_code == 200 and queued.status == SuggestionJob.Status.CANCELED
    assert "suggestion-resume" in page.content.decode()


@pytest.mark.django_db
def test_a_suggestion_job_whose_worker_went_silent_is_failed_by_the_reconcile_and_a_cancel_asks_a_running_one(
    reward_checkpoint, researcher,  # noqa: F811
):
    project = make_project(items=1, responses=2, owner=researcher, name="Silent")
    old = timezone.now() - timedelta(hours=1)
    job = SuggestionJob.objects.create(project=project, source="reward_model", model_path=str(reward_checkpoint),
                                       agent="reward model run #1", status=SuggestionJob.Status.RUNNING,
                                       started_at=old, heartbeat_at=old, progress_total=1)
    assert suggestion_jobs_fail_stale() == [job.pk]
    job.refresh_from_db()
    assert job.status == SuggestionJob.Status.FAILED and "resume the job" in job.error
    running = SuggestionJob.objects.create(project=project, source="reward_model", model_path="x", agent="x",
                                           status=SuggestionJob.Status.RUNNING, started_at=timezone.now(),
                                           heartbeat_at=timezone.now())
    suggestion_job_cancel(job_id=running.pk)
    running.refresh_from_db()
    assert running.status == SuggestionJob.Status.RUNNING and running.cancel_requested
