"""The machine suggestion shown for an item (reads of Suggestion rows): for the annotate page, the server's check of
an accepted suggestion, the line shown after answering, and the queue's uncertainty order.

One source at a time: an item's suggestion comes from the source (agent and job) of its newest row (by id) that
answers one of the project's mode's questions ("ranking" in the ranking and pairwise modes, "thumb" in thumbs, an
aspect's name in ratings); from that source, each part (the ranking; a response's thumb; a response's rating on an
aspect) is its newest row. Its confidence is the lowest score among its parts (None when none has one).
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import F, Min, OuterRef, Subquery
from django.db.models.expressions import Expression

from webapp.annotation.models import Project, Prompt, Ranking, ResponseLabel, Suggestion
from webapp.annotation.modes import annotation_mode
from webapp.annotation.modes.base import Labels, Tiers, response_letter
from webapp.annotation.selectors import answer_labels, responses_shown

RANKING_QUESTION = "ranking"
THUMB_QUESTION = "thumb"
THUMB_ASPECT = ResponseLabel.THUMB
THUMB_SIGNS = {1.0: "👍", 0.0: "👎"}


def mode_questions(project: Project) -> list[str]:
    """The Suggestion.question values the project's mode shows: what its answer is made of."""
    if project.mode == Project.Mode.RATINGS:
        return [aspect["name"] for aspect in project.aspects]
    if project.mode == Project.Mode.THUMBS:
        return [THUMB_QUESTION]
    return [RANKING_QUESTION]


@dataclass(frozen=True)
class ItemSuggestion:
    """The suggestion for one item as the annotator is shown it: tiers of the shown responses (tiers modes) or labels
    {response: {aspect: value}} (labels modes; a thumb's aspect is ""), with the row each part came from."""

    agent: str
    confidence: float | None
    tiers: Tiers = field(default_factory=list)
    labels: Labels = field(default_factory=dict)
    # (response id, or None for the ranking; aspect, "" for a ranking or a thumb) -> the Suggestion row's id
    parts: dict[tuple[int | None, str], int] = field(default_factory=dict)
    # every shown response (on every aspect) has its part: only then can it be accepted as the answer
    complete: bool = False

    @property
    def newest_id(self) -> int:
        """The id the page posts when the annotator accepts it (any of its rows names its source)."""
        return max(self.parts.values())


def item_suggestion(
    *, project: Project, prompt_id: int, shown: Sequence[int], source_of: Suggestion | None = None,
) -> ItemSuggestion | None:
    """The item's suggestion restricted to the responses `shown` (in the order shown), from the source of its newest
    row, or of `source_of` when given (the row an annotator accepted); None when it has none that applies."""
    rows = Suggestion.objects.filter(prompt_id=prompt_id, question__in=mode_questions(project)).order_by("-id")
    newest = source_of or rows.first()
    if newest is None:
        return None
    source = list(rows.filter(agent=newest.agent, job_id=newest.job_id))
    if annotation_mode(project.mode).gives_labels:
        return _labels_suggestion(project, source, shown)
    return _tiers_suggestion(source[0], shown) if source else None


def _tiers_suggestion(row: Suggestion, shown: Sequence[int]) -> ItemSuggestion | None:
    tiers = _shown_tiers(row.value, set(shown))
    if sum(len(tier) for tier in tiers) < 2:  # a ranking of one response suggests nothing
        return None
    complete = sorted(response for tier in tiers for response in tier) == sorted(shown)
    return ItemSuggestion(agent=row.agent, confidence=row.score, tiers=tiers, parts={(None, ""): row.pk},
                          complete=complete)


def _shown_tiers(value: object, shown: set[int]) -> Tiers:
    """A suggested ranking (tiers of response ids, best first) restricted to the shown responses; [] when the value
    is not tiers."""
    if not isinstance(value, list) or not all(isinstance(tier, list) for tier in value):
        return []
    try:
        tiers = [sorted(int(response) for response in tier if int(response) in shown) for tier in value]
    except (TypeError, ValueError):
        return []
    return [tier for tier in tiers if tier]


def _labels_suggestion(project: Project, rows: list[Suggestion], shown: Sequence[int]) -> ItemSuggestion | None:
    """Rows newest first; the newest row per (response, question) counts."""
    labels: Labels = {}
    parts: dict[tuple[int | None, str], int] = {}
    scores: list[float] = []
    thumbs = project.mode == Project.Mode.THUMBS
    for row in rows:
        aspect = THUMB_ASPECT if thumbs else row.question
        if row.response_id not in shown or (row.response_id, aspect) in parts:
            continue
        value = _thumb(row.value) if thumbs else _rating(row.value, project)
        if value is None:
            continue
        labels.setdefault(row.response_id, {})[aspect] = value
        parts[(row.response_id, aspect)] = row.pk
        if row.score is not None:
            scores.append(row.score)
    if not parts:
        return None
    aspects = [THUMB_ASPECT] if thumbs else mode_questions(project)
    complete = all((response, aspect) in parts for response in shown for aspect in aspects)
    return ItemSuggestion(agent=rows[0].agent, confidence=min(scores) if scores else None, labels=labels,
                          parts=parts, complete=complete)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _thumb(value: object) -> float | None:
    """A suggested thumb, 1.0 (up) or 0.0 (down); a score between counts as up from 0.5."""
    number = _number(value)
    return None if number is None else (1.0 if number >= 0.5 else 0.0)


def _rating(value: object, project: Project) -> float | None:
    """A suggested rating as the project's scale takes it: the nearest whole number within the scale."""
    number = _number(value)
    if number is None:
        return None
    return float(min(project.rating_max, max(project.rating_min, round(number))))


# What the page shows and fills in ------------------------------------------------------------------------------


def suggestion_fill(project: Project, suggestion: ItemSuggestion, shown: Sequence[int]) -> dict[str, str]:
    """The form fields accepting the suggestion sets (the names the mode's controls post), for the page's script."""
    if project.mode == Project.Mode.PAIRWISE:
        return {"choice": _pairwise_choice(suggestion.tiers, shown)}
    if project.mode == Project.Mode.THUMBS:
        return {f"thumb_{response}": "up" if given[THUMB_ASPECT] else "down"
                for response, given in suggestion.labels.items()}
    if project.mode == Project.Mode.RATINGS:
        return {f"rating_{response}_{aspect}": f"{value:g}"
                for response, given in suggestion.labels.items() for aspect, value in given.items()}
    return {f"rank_{response}": str(place) for place, tier in enumerate(suggestion.tiers, start=1) for response in tier}


def suggestion_fill_json(project: Project, suggestion: ItemSuggestion, shown: Sequence[int]) -> str:
    return json.dumps(suggestion_fill(project, suggestion, shown), sort_keys=True)


def _pairwise_choice(tiers: Tiers, shown: Sequence[int]) -> str:
    if len(tiers) == 1:
        return "tie"
    return "a" if tiers[0] == [shown[0]] else "b"


def response_marks(project: Project, suggestion: ItemSuggestion) -> dict[int, str]:
    """Response id -> what the suggestion says of it, for the mark in its header ("rank 2", "👍", "helpfulness 4")."""
    if annotation_mode(project.mode).gives_labels:
        return {response: _labels_text(given, project) for response, given in suggestion.labels.items()}
    if project.mode == Project.Mode.PAIRWISE:
        if len(suggestion.tiers) == 1:
            return {response: "tie" for response in suggestion.tiers[0]}
        return {suggestion.tiers[0][0]: "better", suggestion.tiers[-1][0]: "worse"}
    return {response: f"rank {place}" for place, tier in enumerate(suggestion.tiers, start=1) for response in tier}


def _labels_text(given: dict[str, float], project: Project) -> str:
    if project.mode == Project.Mode.THUMBS:
        return THUMB_SIGNS.get(given.get(THUMB_ASPECT, -1.0), "")
    return ", ".join(f"{aspect} {value:g}" for aspect, value in given.items())


def answer_text(project: Project, shown: Sequence[int], *, tiers: Tiers = (), labels: Labels | None = None,
                all_bad: bool = False) -> str:
    """An answer (or a suggestion) in the letters the annotator sees: "A > C = B", "A is better", "A 👍, B 👎",
    "A: helpfulness 4; B: helpfulness 2"."""
    letters = {response: response_letter(index) for index, response in enumerate(shown)}
    if all_bad:
        return "all bad"
    if labels is not None:
        return "; ".join(f"{letters[response]} {_labels_text(labels[response], project)}" if
                         project.mode == Project.Mode.THUMBS else
                         f"{letters[response]}: {_labels_text(labels[response], project)}"
                         for response in shown if response in labels)
    if project.mode == Project.Mode.PAIRWISE and tiers:
        return "a tie" if len(tiers) == 1 else f"{letters[tiers[0][0]]} is better"
    return " > ".join(" = ".join(letters[response] for response in sorted(tier, key=shown.index)) for tier in tiers)


def suggestion_text(project: Project, suggestion: ItemSuggestion, shown: Sequence[int]) -> str:
    if annotation_mode(project.mode).gives_labels:
        return answer_text(project, shown, labels=suggestion.labels)
    return answer_text(project, shown, tiers=suggestion.tiers)


# After answering -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerBesideSuggestion:
    """The annotator's last answer in a project and what the machine suggested for that item, in the letters they
    saw (shown after they answer when the project shows suggestions only then)."""

    answered: str
    suggested: str
    agent: str
    confidence: float | None


def last_answer_beside_suggestion(*, project: Project, user: AbstractBaseUser) -> AnswerBesideSuggestion | None:
    """None when the annotator has not answered yet (skips do not count) or their last item had no suggestion."""
    last = (Ranking.objects.filter(prompt__project=project, annotator=user, skipped=False)
            .select_related("prompt__project").order_by("-created_at", "-id").first())
    if last is None:
        return None
    shown = [response.pk for response in responses_shown(prompt=last.prompt, annotator=user)]
    suggestion = item_suggestion(project=project, prompt_id=last.prompt_id, shown=shown)
    if suggestion is None:
        return None
    if annotation_mode(project.mode).gives_labels:
        answered = answer_text(project, shown, labels=answer_labels(ranking_id=last.pk))
    else:
        answered = answer_text(project, shown, tiers=last.tiers, all_bad=last.all_bad)
    return AnswerBesideSuggestion(answered=answered, suggested=suggestion_text(project, suggestion, shown),
                                  agent=suggestion.agent, confidence=suggestion.confidence)


# The queue's uncertainty order ---------------------------------------------------------------------------------


def item_confidence(project: Project) -> Expression:
    """An expression on Prompt rows: the lowest score among the item's suggestion rows for the mode's questions
    (null without one). It reads every source's rows, where the page shows the newest source's: they differ only on
    an item given suggestions by two sources."""
    rows = (Suggestion.objects.filter(prompt=OuterRef("pk"), question__in=mode_questions(project))
            .values("prompt").annotate(lowest=Min("score")).values("lowest"))
    return Subquery(rows)


def by_uncertainty(prompts):
    """Order a Prompt queryset annotated with `load` and `confidence`: the least loaded, then the least confident
    suggestion first (items without one after those with one), then by id."""
    return prompts.order_by("load", F("confidence").asc(nulls_last=True), "id")


@dataclass(frozen=True)
class Reordering:
    """How many of the open items the uncertainty order puts at another place than the default order does."""

    moved: int
    open_items: int

    @property
    def percent(self) -> int:
        return round(100 * self.moved / self.open_items) if self.open_items else 0


def uncertainty_reordering(project: Project) -> Reordering:
    """The open items (offered, two responses or more, fewer answers than the overlap) in the default queue order
    (fewest answers, then id) and in the uncertainty order: how many change place. Leases are not counted: this is
    the order of the items, not of one annotator's next lease."""
    open_items = (Prompt.objects.filter(project=project, annotatable=True, response_count__gte=2,
                                        ranking_count__lt=project.annotators_per_item)
                  .annotate(load=F("ranking_count"), confidence=item_confidence(project)))
    default = list(open_items.order_by("load", "id").values_list("pk", flat=True))
    uncertain = list(by_uncertainty(open_items).values_list("pk", flat=True))
    moved = sum(1 for before, after in zip(default, uncertain, strict=True) if before != after)
    return Reordering(moved=moved, open_items=len(default))
