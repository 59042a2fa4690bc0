"""Gold items and annotators' quality: marking an item gold with its answer, pausing an annotator whose accuracy on
gold falls below the project's threshold (their answers held back from training), and a researcher's decision on
the pause.

Answers to gold items are answers like any other: they give pairs or labels and count as training data (held back
only with the rest of a paused annotator's answers). Accuracy is judged on the gold answers given since the
annotator's last release, so a released annotator starts afresh and is paused again only after
`gold_min_answers` new gold answers.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from webapp.annotation import gold
from webapp.annotation.models import AnnotatorPause, GoldAnswer, Project, Prompt, Ranking
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Labels, Tiers
from webapp.annotation.selectors import answer_labels, gold_accuracies, gold_responses
from webapp.text import counted

EXPLANATION_MAX_CHARS = 5000


def gold_answer_set(
    *, prompt: Prompt, user: AbstractBaseUser, tiers: Tiers | None = None, labels: Labels | None = None,
    explanation: str = "",
) -> GoldAnswer:
    """Mark the item gold with its right answer (tiers in the ranking and pairwise modes, labels {response id:
    {aspect: value}} in the thumbs and ratings modes, checked as an annotator's answer is), or change it."""
    project = prompt.project
    mode = annotation_mode(project.mode)
    if not prompt.annotatable:
        raise ValidationError("item: an imported preference pair is not offered to annotators; it cannot be gold")
    responses = gold_responses(prompt)
    if len(responses) < 2:
        raise ValidationError(f"item: has {len(responses)} response(s); a gold item needs two or more")
    if len(explanation) > EXPLANATION_MAX_CHARS:
        raise ValidationError(f"explanation: {len(explanation):,} characters; at most {EXPLANATION_MAX_CHARS:,}")
    if mode.gives_labels:
        if tiers:
            raise ValidationError(f"answer: this project's mode is {mode.name}; its gold answer is labels, not tiers")
        answer = {"tiers": [], "labels": {str(response): given for response, given in
                                          mode.labels_check(labels or {}, project, responses).items()}}
    else:
        if labels:
            raise ValidationError(f"answer: this project's mode is {mode.name}; its gold answer is an order, "
                                  "not labels")
        answer = {"tiers": gold.tiers_check(list(tiers or []), responses), "labels": {}}
    gold_answer, _ = GoldAnswer.objects.update_or_create(
        prompt=prompt, defaults={**answer, "explanation": explanation.strip(), "created_by": user})
    return gold_answer


def gold_answer_from_ranking(*, ranking: Ranking, user: AbstractBaseUser) -> GoldAnswer:
    """Use an annotator's answer to the item as its gold answer."""
    if ranking.skipped:
        raise ValidationError("answer: a skip answers nothing; it cannot be the gold answer")
    if annotation_mode(ranking.prompt.project.mode).gives_labels:
        return gold_answer_set(prompt=ranking.prompt, user=user, labels=answer_labels(ranking_id=ranking.pk))
    return gold_answer_set(prompt=ranking.prompt, user=user, tiers=ranking.tiers)


def gold_answer_remove(*, prompt: Prompt) -> None:
    """The item is no longer gold: it goes back to the normal queue; answers to it stay, judged no more."""
    GoldAnswer.objects.filter(prompt=prompt).delete()


def annotator_quality_check(*, project: Project, annotator: AbstractBaseUser) -> AnnotatorPause | None:
    """After a gold answer: pause the annotator when they have `gold_min_answers` judged gold answers or more and
    their accuracy is below `gold_min_accuracy` (0 never pauses). Their answers in the project are held back from
    training until a researcher decides. Called inside `ranking_submit`'s transaction."""
    if project.gold_min_accuracy <= 0:
        return None
    accuracy = gold_accuracies(project, annotator_id=annotator.pk).get(annotator.pk)
    if accuracy is None or accuracy.answers < project.gold_min_answers or accuracy.share is None:
        return None
    if accuracy.share >= project.gold_min_accuracy:
        return None
    reason = (f"accuracy on gold {accuracy.share:.0%} ({accuracy.matched} of {counted(accuracy.decisions, 'decision')} "
              f"on {counted(accuracy.answers, 'gold item')}) is below the project's {project.gold_min_accuracy:.0%}")
    try:
        with transaction.atomic():
            pause = AnnotatorPause.objects.create(project=project, annotator=annotator, reason=reason)
    except IntegrityError:  # two gold answers of theirs submitted at once: the other one paused them already
        return AnnotatorPause.objects.get(project=project, annotator=annotator, decision=AnnotatorPause.Decision.PENDING)
    Ranking.objects.filter(prompt__project=project, annotator=annotator).update(held_back=True)
    return pause


DECISIONS = (AnnotatorPause.Decision.RELEASED, AnnotatorPause.Decision.DROPPED)


def annotator_pause_decide(*, pause_id: int, project: Project, decision: str, user: AbstractBaseUser) -> AnnotatorPause:
    """A researcher's decision on a pause waiting for one: released (the annotator's answers count again and they
    get items again) or dropped (their answers stay out of training and they get no more items here)."""
    if decision not in DECISIONS:
        raise ValidationError(f"decision: {', '.join(DECISIONS)}, not {decision[:20]!r}")
    with transaction.atomic():
        pause = AnnotatorPause.objects.select_for_update().filter(pk=pause_id, project=project).first()
        if pause is None:
            raise ValidationError(f"pause {pause_id} is not one of this project's")
        if pause.decision != AnnotatorPause.Decision.PENDING:
            raise ValidationError(f"this pause was decided already: {pause.get_decision_display().lower()}")
        pause.decision, pause.decided_by, pause.decided_at = decision, user, timezone.now()
        pause.save(update_fields=["decision", "decided_by", "decided_at"])
        if decision == AnnotatorPause.Decision.RELEASED:
            Ranking.objects.filter(prompt__project=project, annotator_id=pause.annotator_id).update(held_back=False)
    return pause

