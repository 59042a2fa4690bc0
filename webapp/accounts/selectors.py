"""Reads for accounts: a project's members with what they did, the users who could join, a user's API tokens."""

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, User
from django.db.models import Count, Q, QuerySet

from webapp.accounts.models import ApiToken
from webapp.accounts.roles import ANNOTATOR, RESEARCHER
from webapp.annotation.models import Project


@dataclass(frozen=True)
class MemberRow:
    user_id: int
    username: str
    role: str
    rankings: int
    last_login: datetime | None
    password_resettable: bool


def _role_of(user: User, group_names: set[str]) -> str:
    if user.is_superuser:
        return "admin"
    if RESEARCHER in group_names:
        return RESEARCHER
    return ANNOTATOR if ANNOTATOR in group_names else "no role"


def project_members(project: Project) -> list[MemberRow]:
    members = (
        project.members.order_by("username")
        .prefetch_related("groups")
        .annotate(ranked=Count("rankings", filter=Q(rankings__prompt__project=project, rankings__skipped=False)))
    )
    rows = []
    for user in members:
        role = _role_of(user, {group.name for group in user.groups.all()})
        rows.append(MemberRow(
            user_id=user.pk, username=user.username, role=role, rankings=user.ranked, last_login=user.last_login,
            password_resettable=role == ANNOTATOR and not user.is_staff,
        ))
    return rows


def users_who_could_join(project: Project) -> QuerySet[User]:
    return User.objects.filter(is_active=True).exclude(pk__in=project.members.values("pk")).order_by("username")


def api_tokens_of(*, user: AbstractBaseUser) -> QuerySet[ApiToken]:
    """Every token of `user`, revoked ones included, newest first."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")
