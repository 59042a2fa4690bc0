"""Projects: create, update, and the bound of their guidelines."""

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from webapp.annotation.models import Project
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
    members: Sequence[AbstractBaseUser] = (),
    owner: AbstractBaseUser | None = None,
) -> Project:
    """`owner`: who creates it (reaches it without being a member; selectors.projects_visible_to)."""
    guidelines_check(guidelines)
    project = Project.objects.create(
        name=name,
        owner=owner,
        mode=mode,
        guidelines=guidelines,
        responses_per_item=responses_per_item,
        annotators_per_item=annotators_per_item,
        lease_minutes=lease_minutes,
    )
    project.members.set(members)
    return project


@transaction.atomic
def project_update(*, project: Project, members: Sequence[AbstractBaseUser], **fields: object) -> Project:
    if isinstance(fields.get("guidelines"), str):
        guidelines_check(fields["guidelines"])
    for name, value in fields.items():
        setattr(project, name, value)
    project.full_clean()
    project.save()
    project.members.set(members)
    return project


def guidelines_check(guidelines: str) -> None:
    """ValidationError naming the field when the guidelines are over their bound (they are on every annotate page)."""
    problem = length_problem(guidelines, GUIDELINES_MAX_CHARS)
    if problem:
        raise ValidationError({"guidelines": f"The guidelines {problem}: they are shown on every annotate page. "
                                             "Shorten them, or link to a longer document."})
