"""A round scored by a reward model: a real Celery gpu worker scores every response of the round's items with a
reward-model run's checkpoint, and the Rounds card shows the win rate by those scores beside the annotators'."""

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tests.webapp.annotation.factories import add_round, make_annotators
from tests.webapp.annotation.test_rounds import _new_one, _pairwise_project, _rank_all
from tests.webapp.experiments.helpers import wait_for
from webapp.annotation import selectors, services, winrates
from webapp.annotation.models import PreferencePair, Prompt, Response, RewardScore, Round, RoundScoring
from webapp.annotation.services.scoring import round_scoring_create, round_scorings_fail_stale
from webapp.experiments.models import Run


@pytest.fixture(scope="module")
def reward_checkpoint(tmp_path_factory, tiny_model_dir) -> Path:
    """The tiny Llama as a one-output sequence classifier, saved as a reward-model run saves its checkpoint."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    directory = tmp_path_factory.mktemp("reward") / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1,
                                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _run(owner, *, kind: str = "reward_model", checkpoint: Path | str = "", status: str = Run.Status.SUCCEEDED) -> Run:
    return Run.objects.create(name=f"{kind} run", kind=kind, config={}, data_source={}, status=status,
                              checkpoint_path=str(checkpoint), created_by=owner)


def _ranked_rounds(owner):
    """Round 1 ranked, then round 2 (compared with it) ranked: the new response preferred but on d3's item."""
    project = _pairwise_project(owner=owner)
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    add_round(project, "base", {"p0": ["b0", "b1"], "p1": ["b2", "b3"]})
    _rank_all(project, annotator, lambda shown: shown[0])
    second = add_round(project, "dpo", {"p0": ["d0 is longer", "d1"], "p1": ["d2", "d3 is the longest one"]})
    _rank_all(project, annotator, lambda shown: (
        next(r for r in shown if r.copy_of_id) if any(r.text.startswith("d3") for r in shown) else _new_one(shown)))
    return project, second


@pytest.mark.django_db(transaction=True)
def test_a_worker_scores_every_response_of_the_round_and_the_card_shows_the_reward_models_win_rate(
    celery_worker_factory, reward_checkpoint, researcher, researcher_client, tmp_path,
):
    from trainer.algorithms.rollout import RewardModelScorer

    project, second = _ranked_rounds(researcher)
    run = _run(researcher, checkpoint=reward_checkpoint)
    celery_worker_factory(queues=("gpu",), OMP_NUM_THREADS="1")

    response = researcher_client.post(f"/projects/{project.pk}/rounds/score/",
                                      {"round": second.number, "reward_run": run.pk}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    scoring = RoundScoring.objects.get(round=second)
    assert scoring.reward_run == run and scoring.checkpoint_path == str(reward_checkpoint)
    wait_for(lambda: not RoundScoring.objects.get(pk=scoring.pk).is_active, timeout_s=120, what="the scoring")
    scoring.refresh_from_db()
    assert scoring.status == RoundScoring.Status.SUCCEEDED, scoring.error

    responses = Response.objects.filter(prompt__round=second)
    scores = dict(RewardScore.objects.filter(scoring=scoring).values_list("response_id", "score"))
    assert set(scores) == set(responses.values_list("pk", flat=True)) and len(scores) == 8
    assert (scoring.progress_done, scoring.progress_total) == (8, 8)
    # the scores are the trainer's scorer's on the same text prompt and response
    ordered = list(responses.select_related("prompt").order_by("id"))
    expected = RewardModelScorer(str(reward_checkpoint))([r.prompt.text for r in ordered], [r.text for r in ordered])
    assert [scores[r.pk] for r in ordered] == pytest.approx(expected, abs=1e-4)

    # by hand: each new response against the compared copy on its item, and each human pair's order
    outcomes, agreed, pairs = [], 0, 0
    for item in Prompt.objects.filter(round=second, origin__isnull=False):
        copy = item.responses.get(copy_of__isnull=False)
        for new in item.responses.filter(copy_of__isnull=True):
            difference = scores[new.pk] - scores[copy.pk]
            outcomes.append(0.5 if difference == 0 else float(difference > 0))
    for chosen, rejected in PreferencePair.objects.filter(prompt__round=second).values_list("chosen", "rejected"):
        pairs += 1
        agreed += scores[chosen] > scores[rejected]
    row = {row.round.number: row for row in selectors.round_rows(project)}[2]
    won = outcomes.count(1.0)
    assert (row.rm_win_rate.won, row.rm_win_rate.tied, row.rm_win_rate.lost) == (
        won, outcomes.count(0.5), len(outcomes) - won - outcomes.count(0.5))
    low, high = winrates.wilson_interval(sum(outcomes), len(outcomes))
    assert row.rm_win_rate.rate == sum(outcomes) / 4 and (row.rm_win_rate.low, row.rm_win_rate.high) == (low, high)
    assert (row.rm_agreement.agreed, row.rm_agreement.pairs) == (agreed, pairs) and pairs == 4

    card = researcher_client.get(f"/projects/{project.pk}/rounds/").content.decode()
    assert row.rm_win_rate.text in card and row.win_rate.text in card
    assert f"({agreed} of {pairs})" in card and f"run #{run.pk}" in card

    # a checkpoint the worker cannot load: the scoring fails with the reason, and the card says it
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(reward_checkpoint / "config.json", broken / "config.json")
    failing = round_scoring_create(round_=second, run=_run(researcher, checkpoint=broken), created_by=researcher)
    wait_for(lambda: not RoundScoring.objects.get(pk=failing.pk).is_active, timeout_s=120, what="the broken scoring")
    failing.refresh_from_db()
    assert failing.status == RoundScoring.Status.FAILED and failing.error and not failing.scores.exists()
    card = researcher_client.get(f"/projects/{project.pk}/rounds/").content.decode()
    assert "scoring failed:" in card


@pytest.mark.django_db
def test_a_scoring_whose_worker_went_silent_is_failed_by_the_reconcile(researcher, reward_checkpoint):
    project = _pairwise_project(owner=researcher)
    round_ = add_round(project, "base", {"p0": ["b0", "b1"]})
    old = timezone.now() - timedelta(hours=1)
    scoring = RoundScoring.objects.create(round=round_, reward_run=_run(researcher, checkpoint=reward_checkpoint),
                                          checkpoint_path=str(reward_checkpoint), status=RoundScoring.Status.RUNNING,
                                          started_at=old, heartbeat_at=old, progress_total=2)
    assert round_scorings_fail_stale() == [scoring.pk]
    scoring.refresh_from_db()
    assert scoring.status == RoundScoring.Status.FAILED and "stopped sending heartbeats" in scoring.error


@pytest.mark.django_db
def test_a_run_that_is_not_a_succeeded_reward_model_with_a_checkpoint_is_refused_naming_the_field(
    reward_checkpoint, researcher, researcher_client, tmp_path,
):
    project = _pairwise_project(owner=researcher)
    round_ = add_round(project, "base", {"p0": ["b0", "b1"]})
    refusals = {
        "is a SFT run, not a reward model": _run(researcher, kind="sft", checkpoint=reward_checkpoint),
        "is failed; only a succeeded run can score": _run(researcher, checkpoint=reward_checkpoint,
                                                           status=Run.Status.FAILED),
        "has no checkpoint to score with": _run(researcher, checkpoint=tmp_path / "gone"),
    }
    for reason, run in refusals.items():
        with pytest.raises(ValidationError) as refused:
            round_scoring_create(round_=round_, run=run, created_by=researcher)
        assert list(refused.value.message_dict) == ["reward_run"]
        assert reason.lower() in refused.value.message_dict["reward_run"][0].lower()
    sft = refusals["is a SFT run, not a reward model"]
    page = researcher_client.post(f"/projects/{project.pk}/rounds/score/", {"round": 1, "reward_run": sft.pk},
                                  HTTP_HX_REQUEST="true")
    assert page.status_code == 422
    assert f"reward_run: run #{sft.pk} is a" in page.content.decode()
    assert not RoundScoring.objects.exists()
    # one scoring of a round at a time
    RoundScoring.objects.create(round=round_, checkpoint_path=str(reward_checkpoint))
    with pytest.raises(ValidationError, match="being scored already") as refused:
        round_scoring_create(round_=round_, run=_run(researcher, checkpoint=reward_checkpoint), created_by=researcher)
    assert list(refused.value.message_dict) == ["round"] and RoundScoring.objects.count() == 1


# ChatML's shape with the tiny tokenizer's own special tokens (as tests/trainer/test_chat_training.py writes it)
CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


@pytest.mark.django_db(transaction=True)
def test_responses_sampled_through_a_chat_template_are_scored_as_the_reward_model_trained_on_them(
    celery_worker_factory, reward_checkpoint, researcher, tmp_path,
):
    from transformers import AutoTokenizer

    from trainer.algorithms.rollout import RewardModelScorer

    checkpoint = tmp_path / "chat-reward"
    shutil.copytree(reward_checkpoint, checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(checkpoint)
    project = _pairwise_project(owner=researcher)
    round_ = services.round_create(project=project, source=Round.Source.SAMPLED, model="chat", responses_per_prompt=2)
    for prompt in Prompt.objects.filter(project=project):
        services.round_responses_add(round_id=round_.pk, prompt_id=prompt.pk, texts=["Four.", "It is 4"],
                                     source=Response.Source.MODEL, source_detail={"chat_template": True})
    celery_worker_factory(queues=("gpu",), OMP_NUM_THREADS="1")

    scoring = round_scoring_create(round_=round_, run=_run(researcher, checkpoint=checkpoint), created_by=researcher)
    wait_for(lambda: not RoundScoring.objects.get(pk=scoring.pk).is_active, timeout_s=120, what="the scoring")
    scoring.refresh_from_db()
    assert scoring.status == RoundScoring.Status.SUCCEEDED, scoring.error
    ordered = list(Response.objects.filter(prompt__project=project).select_related("prompt").order_by("id"))
    stored = [RewardScore.objects.get(scoring=scoring, response=r).score for r in ordered]
    # a text prompt sampled through the template is one user turn, its response the assistant's
    scorer = RewardModelScorer(str(checkpoint))
    as_chat = scorer([[{"role": "user", "content": r.prompt.text}] for r in ordered], [r.text for r in ordered])
    as_text = scorer([r.prompt.text for r in ordered], [r.text for r in ordered])
    assert stored == pytest.approx(as_chat, abs=1e-4) and stored != pytest.approx(as_text, abs=1e-4)
    # a first round compares nothing: scored, with no win rate
    row = selectors.round_rows(project)[0]
    assert row.scoring == scoring and row.rm_win_rate is None
