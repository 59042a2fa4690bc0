"""Projects: create, update, the bound of their guidelines, and a ratings project's aspects and scale."""

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from webapp.annotation.models import Project, Ranking
from webapp.annotation.modes import annotation_mode
from webapp.text_bounds import GUIDELINES_MAX_CHARS, length_problem


@transaction.atomic
def project_create(
    *,
    name: str,
    mode: str = Project.Mode.RANKING,
    guidelines: str = "",
    responses_per_item: int = 4,
    annotators_per_item: int = 1,
    lease_minutes: int = 30,
    rating_aspects: Sequence[dict[str, str]] = (),
    rating_min: int = 1,
    rating_max: int = 5,
    suggestions_display: str = Project.SuggestionDisplay.SHOWN,
    queue_order: str = Project.QueueOrder.LEAST_ANNOTATED,
    adjudication_min_answers: int = 2,
    adjudication_threshold: float = 0.6,
    members: Sequence[AbstractBaseUser] = (),
    owner: AbstractBaseUser | None = None,
    # gold items and annotators' quality (services/quality.py)
    gold_rate: float = 0.0,
    gold_onboarding: int = 0,
    gold_min_answers: int = 5,
    gold_min_accuracy: float = 0.0,
    fast_answer_seconds: float = 3.0,
) -> Project:
    """`owner`: who creates it (reaches it without being a member; selectors.projects_visible_to).
    `rating_aspects` ({name, description} each) and the scale are what the ratings mode rates."""
    guidelines_check(guidelines)
    rating_aspects = rating_aspects_check(rating_aspects)
    rating_scale_check(rating_min, rating_max)
    choices_check(suggestions_display=suggestions_display, queue_order=queue_order)
    project = Project.objects.create(
        name=name,
        owner=owner,
        mode=mode,
        guidelines=guidelines,
        responses_per_item=responses_per_item,
        annotators_per_item=annotators_per_item,
        lease_minutes=lease_minutes,
        rating_aspects=rating_aspects,
        rating_min=rating_min,
        rating_max=rating_max,
        gold_rate=gold_rate,
        gold_onboarding=gold_onboarding,
        gold_min_answers=gold_min_answers,
        gold_min_accuracy=gold_min_accuracy,
        fast_answer_seconds=fast_answer_seconds,
        suggestions_display=suggestions_display,
        queue_order=queue_order,
        adjudication_min_answers=adjudication_min_answers,
        adjudication_threshold=adjudication_threshold,
    )
    project.members.set(members)
    return project


@transaction.atomic
def project_update(*, project: Project, members: Sequence[AbstractBaseUser], **fields: object) -> Project:
    if isinstance(fields.get("guidelines"), str):
        guidelines_check(fields["guidelines"])
    if "mode" in fields:
        mode_change_check(project, str(fields["mode"]))
    if "rating_aspects" in fields:
        fields["rating_aspects"] = rating_aspects_check(fields["rating_aspects"])
    rating_scale_check(fields.get("rating_min", project.rating_min), fields.get("rating_max", project.rating_max))
    choices_check(**{name: str(fields[name]) for name in _SETTING_CHOICES if name in fields})
    for name, value in fields.items():
        setattr(project, name, value)
    project.full_clean()
    project.save()
    project.members.set(members)
    return project


_SETTING_CHOICES = {"suggestions_display": Project.SuggestionDisplay, "queue_order": Project.QueueOrder}


def choices_check(**settings: str) -> None:
    """ValidationError naming the field when a setting with choices (suggestions_display, queue_order) is not one."""
    for name, value in settings.items():
        allowed = _SETTING_CHOICES[name].values
        if value not in allowed:
            raise ValidationError({name: f"{value!r} is not one of {', '.join(allowed)}"})


def guidelines_check(guidelines: str) -> None:
    """ValidationError naming the field when the guidelines are over their bound (they are on every annotate page)."""
    problem = length_problem(guidelines, GUIDELINES_MAX_CHARS)
    if problem:
        raise ValidationError({"guidelines": f"The guidelines {problem}: they are shown on every annotate page. "
                                             "Shorten them, or link to a longer document."})


RATING_ASPECTS_MAX = 10
ASPECT_NAME_MAX_CHARS = 100  # ResponseLabel.aspect's length
ASPECT_DESCRIPTION_MAX_CHARS = 1000
# Ratings are typed with one digit key each (0 giving 10), so a scale stays within 0..10 and ten values.
RATING_SCALE_LOWEST, RATING_SCALE_HIGHEST, RATING_SCALE_VALUES_MAX = 0, 10, 10


def rating_aspects_check(aspects: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The aspects cleaned ({name, description}, spaces trimmed), or a ValidationError naming the field and the
    aspect at fault: names given, unique, short enough; at most RATING_ASPECTS_MAX of them."""
    cleaned: list[dict[str, str]] = []
    if len(aspects) > RATING_ASPECTS_MAX:
        raise ValidationError({"rating_aspects": f"{len(aspects)} aspects; at most {RATING_ASPECTS_MAX} are rated "
                                                 "per response"})
    for number, aspect in enumerate(aspects, start=1):
        name, description = str(aspect.get("name", "")).strip(), str(aspect.get("description", "")).strip()
        if not name:
            raise ValidationError({"rating_aspects": f"aspect {number}: it needs a name"})
        if len(name) > ASPECT_NAME_MAX_CHARS or len(description) > ASPECT_DESCRIPTION_MAX_CHARS:
            raise ValidationError({"rating_aspects": f"aspect {number} ({name[:40]!r}): a name has at most "
                                                     f"{ASPECT_NAME_MAX_CHARS} characters, a description at most "
                                                     f"{ASPECT_DESCRIPTION_MAX_CHARS:,}"})
        if any(other["name"] == name for other in cleaned):
            raise ValidationError({"rating_aspects": f"aspect {number}: {name!r} is named twice; each aspect once"})
        cleaned.append({"name": name, "description": description})
    return cleaned


def rating_scale_check(rating_min: int, rating_max: int) -> None:
    """ValidationError naming the field when the scale cannot be rated with one digit key per rating."""
    if rating_max <= rating_min:
        raise ValidationError({"rating_max": f"the highest rating ({rating_max}) must be above the lowest "
                                             f"({rating_min})"})
    if rating_min < RATING_SCALE_LOWEST or rating_max > RATING_SCALE_HIGHEST:
        raise ValidationError({"rating_min" if rating_min < RATING_SCALE_LOWEST else "rating_max":
                               f"a scale lies within {RATING_SCALE_LOWEST}..{RATING_SCALE_HIGHEST} (one digit key per "
                               f"rating, 0 giving 10); {rating_min}..{rating_max} was given"})
    if rating_max - rating_min + 1 > RATING_SCALE_VALUES_MAX:
        raise ValidationError({"rating_max": f"{rating_min}..{rating_max} has {rating_max - rating_min + 1} values; "
                                             f"at most {RATING_SCALE_VALUES_MAX}, one digit key each"})


def mode_change_check(project: Project, mode: str) -> None:
    """ValidationError naming the field when `project` holds answers and `mode` would read them as another kind of
    answer: tiers (ranking, pairwise) and labels (thumbs a thumb, ratings a rating per aspect) do not convert."""
    if project.pk is None or mode == project.mode:
        return
    before, after = annotation_mode(project.mode), annotation_mode(mode)
    same_kind = not before.gives_labels and not after.gives_labels
    answers = Ranking.objects.filter(prompt__project=project, skipped=False).count()
    if answers and not same_kind:
        raise ValidationError({"mode": f"the project holds {answers} answer{'s' if answers != 1 else ''} in the "
                                       f"{before.name} mode, which the {after.name} mode cannot read; make a new "
                                       "project for it"})
