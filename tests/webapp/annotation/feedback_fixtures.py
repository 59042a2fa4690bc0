"""Projects holding thumbs and ratings, written as the thumbs and ratings modes write an answer (a Ranking envelope
with no tiers, and one ResponseLabel per thumb or rating), or as an import writes them (no envelope, no annotator).
The README's examples (readme «From feedback to training data») are these projects."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation.models import Assignment, Project, Prompt, Ranking, ResponseLabel

# item text -> annotator -> response text -> {aspect: rating}
RATINGS: dict[str, dict[str, dict[str, dict[str, float]]]] = {
    # means: a 4.5, b 4.5 (tied at the top: a is chosen, the first added), c 3.0, d 1.25
    "Question 0?": {
        "ann0": {"a": {"helpfulness": 5, "honesty": 4}, "b": {"helpfulness": 5, "honesty": 5},
                 "c": {"helpfulness": 3, "honesty": 3}, "d": {"helpfulness": 1, "honesty": 2}},
        "ann1": {"a": {"helpfulness": 4, "honesty": 5}, "b": {"helpfulness": 4, "honesty": 4},
                 "c": {"helpfulness": 3, "honesty": 3}, "d": {"helpfulness": 1, "honesty": 1}},
    },
    # every response tied: no pair
    "Question 1?": {"ann0": {"e": {"helpfulness": 3, "honesty": 3}, "f": {"helpfulness": 3, "honesty": 3}}},
    # the empty response (" ") is left out: h (4) over g (2), margin 2, under both binarizations
    "Question 2?": {"ann1": {"g": {"helpfulness": 2, "honesty": 2}, "h": {"helpfulness": 4, "honesty": 4},
                             " ": {"helpfulness": 1, "honesty": 1}}},
}
RATING_TEXTS = [["a", "b", "c", "d"], ["e", "f"], ["g", "h", " "]]
# (prompt, chosen, rejected, margin) per seed under "random"; "worst" is seed-free
RATING_PAIRS_WORST = [("Question 0?", "a", "d", 3.25), ("Question 2?", "h", "g", 2.0)]
RATING_PAIRS_RANDOM = {
    0: [("Question 0?", "a", "d", 3.25), ("Question 2?", "h", "g", 2.0)],
    2: [("Question 0?", "a", "c", 1.5), ("Question 2?", "h", "g", 2.0)],
}

# item text -> annotator -> response text -> thumb (1 up, 0 down)
THUMBS: dict[str, dict[str, dict[str, float]]] = {
    "Question 0?": {"ann0": {"a": 1, "b": 0}, "ann1": {"a": 1, "b": 1, "c": 0}, "ann2": {"b": 0}},
}
THUMB_TEXTS = [["a", "b", "c"]]


def _answer(prompt: Prompt, annotator: User, labels: dict[str, dict[str, float]]) -> Ranking:
    now = timezone.now()
    assignment = Assignment.objects.create(prompt=prompt, annotator=annotator, status=Assignment.Status.SUBMITTED,
                                           leased_at=now, expires_at=now + timedelta(minutes=30))
    ranking = Ranking.objects.create(assignment=assignment, prompt=prompt, annotator=annotator, tiers=[])
    responses = {response.text: response for response in prompt.responses.all()}
    ResponseLabel.objects.bulk_create([
        ResponseLabel(project=prompt.project, prompt=prompt, response=responses[text], ranking=ranking,
                      annotator=annotator, aspect=aspect, value=value)
        for text, by_aspect in labels.items() for aspect, value in by_aspect.items()])
    Prompt.objects.filter(pk=prompt.pk).update(ranking_count=prompt.ranking_count + 1)
    prompt.refresh_from_db()
    return ranking


def make_ratings_project(*, owner: User | None = None, name: str = "Ratings") -> Project:
    annotators = {user.username: user for user in make_annotators(2)}
    project = make_project(items=3, texts=RATING_TEXTS, mode="ratings", overlap=2, owner=owner, name=name,
                           members=list(annotators.values()))
    Project.objects.filter(pk=project.pk).update(rating_aspects=[
        {"name": "helpfulness", "description": "Does it help?"}, {"name": "honesty", "description": "Is it true?"}])
    project.refresh_from_db()
    for prompt in project.prompts.order_by("id"):
        for username, labels in RATINGS[prompt.text].items():
            _answer(prompt, annotators[username], labels)
    return project


def make_thumbs_project(*, owner: User | None = None, name: str = "Thumbs") -> Project:
    annotators = {user.username: user for user in make_annotators(3)}
    project = make_project(items=1, texts=THUMB_TEXTS, mode="thumbs", overlap=3, owner=owner, name=name,
                           members=list(annotators.values()))
    for prompt in project.prompts.order_by("id"):
        for username, thumbs in THUMBS[prompt.text].items():
            _answer(prompt, annotators[username], {text: {ResponseLabel.THUMB: value} for text, value in thumbs.items()})
    return project
