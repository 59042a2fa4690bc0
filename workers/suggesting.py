"""A suggestion job's execution on a GPU worker: a reward model's scores or a judge's verdicts for each item's
responses, turned into suggested answers (trainer/suggestions.py) and stored batch by batch through the annotation
services. A cancel stops it between batches, keeping what it stored; a resumed job skips the items it stored.

- Reward model: each (prompt, response) is scored as workers/scoring.py scores a round (the TRL prompt through
  trainer.algorithms.rollout.RewardModelScorer). Rankings: tiers by score. Thumbs and ratings need the spread of
  the scores: every response of the job's items is scored first (resumed or not), then a thumb is up above the
  cut that best separates the humans' thumbs on those responses (else above the median score), and a rating is
  the score's quantile among them on the project's scale; the same rating for each aspect, as a reward model
  gives one score.
- Judge: each two responses of an item are compared in both orders (trainer.judging); a preference stands only
  when both orders agree, and the job counts the comparisons the order decided. Thumbs: "acceptable? yes/no".
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from trainer.algorithms.rollout import RewardModelScorer
from trainer.formats.chat import display_text
from trainer.judging import Comparison, Judge
from trainer.suggestions import (
    confidence_of_probability,
    pair_verdict,
    rating_suggestion,
    thumb_suggestion,
    thumb_threshold,
    tiers_by_score,
    tiers_by_verdicts,
)
from webapp.annotation import selectors
from webapp.annotation.models import Prompt, Response, ResponseLabel, SuggestionJob
from webapp.annotation.services import suggesting as services
from webapp.annotation.services.suggesting import RANKING_QUESTION, THUMB_QUESTION, ComputedSuggestion
from workers.jobs import JobWork, error_text, job_run

ITEMS_PER_BATCH = 8


def suggestion_job_execute(*, job_id: int) -> None:
    """Run a queued suggestion job; one that is not queued any more (a second message for it) is left alone."""
    job_run(SUGGESTING_WORK, job_id)


def _responses_by_item(items: Sequence[Prompt]) -> dict[int, list[Response]]:
    by_item: dict[int, list[Response]] = {item.pk: [] for item in items}
    for response in Response.objects.filter(prompt__in=[item.pk for item in items]).select_related("prompt").order_by("id"):
        by_item[response.prompt_id].append(response)
    return by_item


def _suggest(job: SuggestionJob) -> bool:
    """Suggest for every item of the job without its suggestions yet; False if it stopped on a cancel."""
    all_items = services.suggestion_items(job.project, job.round)
    stored = set(job.suggestions.values_list("prompt_id", flat=True))
    items = [item for item in all_items if item.pk not in stored]
    services.suggestion_job_progress(job_id=job.pk, done=len(stored), total=len(stored) + len(items))
    if not items:
        return True
    if job.source == SuggestionJob.Source.JUDGE:
        return _by_judge(job, items, done=len(stored))
    if job.project.mode in services.LABEL_MODES:
        return _labels_by_reward_model(job, list(all_items), items, done=len(stored))
    return _ranking_by_reward_model(job, items, done=len(stored))


def _batches(job: SuggestionJob, items: Sequence[Prompt]):
    """The items in batches, while the job is to go on (None last when a cancel stopped it)."""
    for start in range(0, len(items), ITEMS_PER_BATCH):
        if services.suggestion_job_should_stop(job_id=job.pk):
            yield None
            return
        yield items[start : start + ITEMS_PER_BATCH]


def _store(job: SuggestionJob, batch: Sequence[Prompt], suggestions: list[ComputedSuggestion], done: int, *,
           comparisons: int = 0, order_decided: int = 0) -> int:
    services.suggestions_store(job_id=job.pk, suggestions=suggestions, comparisons=comparisons,
                               order_decided=order_decided)
    done += len(batch)
    services.suggestion_job_progress(job_id=job.pk, done=done)
    return done


def _reward_scores(job: SuggestionJob, scorer: RewardModelScorer, responses: Sequence[Response]) -> dict[int, float]:
    chat_sampled = selectors.chat_sampled_prompt_ids(project_id=job.project_id)
    prompts = [selectors.trl_prompt(r.prompt.text, r.prompt.messages, chat_sampled=r.prompt_id in chat_sampled)
               for r in responses]
    scores = scorer(prompts, [r.text for r in responses])
    return {r.pk: score for r, score in zip(responses, scores, strict=True)}


def _ranking_by_reward_model(job: SuggestionJob, items: Sequence[Prompt], *, done: int) -> bool:
    scorer = RewardModelScorer(job.model_path)
    for batch in _batches(job, items):
        if batch is None:
            return False
        by_item = _responses_by_item(batch)
        scores = _reward_scores(job, scorer, [r for responses in by_item.values() for r in responses])
        suggestions = []
        for item in batch:
            suggested = tiers_by_score({r.pk: scores[r.pk] for r in by_item[item.pk]})
            suggestions.append(ComputedSuggestion(item.pk, RANKING_QUESTION, suggested.tiers, suggested.confidence))
        done = _store(job, batch, suggestions, done)
    return True


def _labels_by_reward_model(job: SuggestionJob, all_items: Sequence[Prompt], items: Sequence[Prompt], *,
                            done: int) -> bool:
    scorer = RewardModelScorer(job.model_path)
    scores: dict[int, float] = {}
    for batch in _batches(job, all_items):
        if batch is None:
            return False
        scores.update(_reward_scores(job, scorer, [r for rs in _responses_by_item(batch).values() for r in rs]))
    project = job.project
    spread = list(scores.values())
    threshold = thumb_threshold(_human_thumbs(scores), spread) if project.mode == "thumbs" else 0.0
    for batch in _batches(job, items):
        if batch is None:
            return False
        suggestions = []
        for item, responses in _responses_by_item(batch).items():
            for response in responses:
                score = scores[response.pk]
                if project.mode == "thumbs":
                    value, confidence = thumb_suggestion(score, threshold)
                    suggestions.append(ComputedSuggestion(item, THUMB_QUESTION, value, confidence, response.pk))
                    continue
                value, confidence = rating_suggestion(score, spread, least=project.rating_min, most=project.rating_max)
                suggestions.extend(ComputedSuggestion(item, aspect, value, confidence, response.pk)
                                   for aspect in services.suggestion_questions(project))
        done = _store(job, batch, suggestions, done)
    return True


def _human_thumbs(scores: dict[int, float]) -> list[tuple[float, bool]]:
    """(score, up) for each scored response the humans thumbed, by the mean of their thumbs (held-back answers
    left out)."""
    thumbs: dict[int, list[float]] = {}
    labels = (ResponseLabel.objects.filter(response__in=list(scores), aspect=ResponseLabel.THUMB)
              .exclude(ranking__held_back=True).values_list("response_id", "value"))
    for response_id, value in labels:
        thumbs.setdefault(response_id, []).append(value)
    return [(scores[response], sum(values) / len(values) >= 0.5) for response, values in thumbs.items()]


def _prompt_text(item: Prompt) -> str:
    return display_text(item.messages) if item.messages else item.text


def _by_judge(job: SuggestionJob, items: Sequence[Prompt], *, done: int) -> bool:
    judge = Judge(job.model_path)
    guidelines = job.project.guidelines
    for batch in _batches(job, items):
        if batch is None:
            return False
        by_item = _responses_by_item(batch)
        if job.project.mode == "thumbs":
            done = _store(job, batch, _judge_thumbs(judge, guidelines, batch, by_item), done)
            continue
        suggestions, comparisons, order_decided = _judge_rankings(judge, guidelines, batch, by_item)
        done = _store(job, batch, suggestions, done, comparisons=comparisons, order_decided=order_decided)
    return True


def _judge_thumbs(judge: Judge, guidelines: str, batch: Sequence[Prompt],
                  by_item: dict[int, list[Response]]) -> list[ComputedSuggestion]:
    shown = [(item, response) for item in batch for response in by_item[item.pk]]
    accepted = judge.acceptable(guidelines, [_prompt_text(item) for item, _ in shown], [r.text for _, r in shown])
    return [ComputedSuggestion(item.pk, THUMB_QUESTION, int(p > 0.5), confidence_of_probability(p), response.pk)
            for (item, response), p in zip(shown, accepted, strict=True)]


def _judge_rankings(judge: Judge, guidelines: str, batch: Sequence[Prompt],
                    by_item: dict[int, list[Response]]) -> tuple[list[ComputedSuggestion], int, int]:
    """Each item's tiers from every two of its responses judged in both orders, and how many comparisons were made
    and decided by the order."""
    pairs = [(item, x, y) for item in batch for x, y in combinations(by_item[item.pk], 2)]
    # one batched call for both orders: every pair as (x, y), then every pair as (y, x)
    comparisons = [Comparison(_prompt_text(item), x.text, y.text) for item, x, y in pairs]
    comparisons += [Comparison(c.prompt, c.second, c.first) for c in comparisons]
    shown_first = judge.prefer_first(guidelines, comparisons)
    verdicts: dict[int, dict] = {item.pk: {} for item in batch}
    for index, (item, x, y) in enumerate(pairs):
        verdicts[item.pk][(x.pk, y.pk)] = pair_verdict(shown_first[index], shown_first[len(pairs) + index])
    suggestions = []
    for item in batch:
        suggested = tiers_by_verdicts([r.pk for r in by_item[item.pk]], verdicts[item.pk])
        suggestions.append(ComputedSuggestion(item.pk, RANKING_QUESTION, suggested.tiers, suggested.confidence))
    order_decided = sum(v.order_decided for item_verdicts in verdicts.values() for v in item_verdicts.values())
    return suggestions, len(pairs), order_decided


def _end(job_id: int, finished: bool) -> None:
    if finished:
        services.suggestion_job_succeed(job_id=job_id)
    else:
        services.suggestion_job_stopped(job_id=job_id)


SUGGESTING_WORK = JobWork(
    noun="suggestion job", name="suggesting",
    claim=lambda job_id: services.suggestion_job_start(job_id=job_id),
    heartbeat=lambda job_id: services.suggestion_job_heartbeat(job_id=job_id),
    load=lambda job_id: SuggestionJob.objects.select_related("project", "round").get(pk=job_id),
    body=_suggest,
    succeed=_end,
    fail=lambda job_id, error: services.suggestion_job_fail(job_id=job_id, error=error_text(error)),
)
