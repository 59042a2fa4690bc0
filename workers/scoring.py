"""A round scoring's execution on a GPU worker: the reward model of a run scores every response of the round's
items, batch by batch, with no gradients. Every write goes through the annotation services.

Each (prompt, response) is built as the reward model was trained on the project's pairs: the prompt as the TRL
export gives it (selectors.trl_prompt: a conversation, or a text prompt sampled through a chat template as one
user turn, goes through the chat template with the response as the assistant's turn; text otherwise), encoded by
trainer.algorithms.rollout.RewardModelScorer, the scorer GRPO uses.
"""

from __future__ import annotations

from trainer.algorithms.rollout import RewardModelScorer
from webapp.annotation import selectors
from webapp.annotation.models import Response, RoundScoring
from webapp.annotation.services import scoring as services
from workers.jobs import JobWork, error_text, job_run

BATCH_SIZE = 16


def round_scoring_execute(*, scoring_id: int) -> None:
    """Run a queued round scoring; one that is not queued any more (a second message for it) is left alone."""
    job_run(SCORING_WORK, scoring_id)


def _score_round(scoring: RoundScoring) -> None:
    project_id = scoring.round.project_id
    chat_sampled = selectors.chat_sampled_prompt_ids(project_id=project_id)
    responses = list(Response.objects.filter(prompt__in=services.round_items(scoring.round))
                     .exclude(reward_scores__scoring=scoring).select_related("prompt").order_by("id"))
    done = scoring.progress_done if scoring.progress_total else 0
    services.round_scoring_progress(scoring_id=scoring.pk, done=done, total=done + len(responses))
    if not responses:
        return
    scorer = RewardModelScorer(scoring.checkpoint_path, batch_size=BATCH_SIZE)
    for start in range(0, len(responses), BATCH_SIZE):
        batch = responses[start : start + BATCH_SIZE]
        prompts = [selectors.trl_prompt(r.prompt.text, r.prompt.messages, chat_sampled=r.prompt_id in chat_sampled)
                   for r in batch]
        scores = scorer(prompts, [r.text for r in batch])
        services.round_scores_store(scoring_id=scoring.pk,
                                    scores={r.pk: score for r, score in zip(batch, scores, strict=True)})
        done += len(batch)
        services.round_scoring_progress(scoring_id=scoring.pk, done=done)


SCORING_WORK = JobWork(
    noun="round scoring", name="scoring",
    claim=lambda scoring_id: services.round_scoring_start(scoring_id=scoring_id),
    heartbeat=lambda scoring_id: services.round_scoring_heartbeat(scoring_id=scoring_id),
    load=lambda scoring_id: RoundScoring.objects.select_related("round").get(pk=scoring_id),
    body=_score_round,
    succeed=lambda scoring_id, _outcome: services.round_scoring_succeed(scoring_id=scoring_id),
    fail=lambda scoring_id, error: services.round_scoring_fail(scoring_id=scoring_id, error=error_text(error)),
)
