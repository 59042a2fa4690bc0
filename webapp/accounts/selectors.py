"""Reads for accounts: a project's members with what they did, the users who could join, a user's API tokens."""

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, User
from django.db.models import Count, Q, QuerySet

from webapp.accounts.models import ApiToken
from webapp.accounts.roles import ANNOTATOR, RESEARCHER
from webapp.accounts.services import api_token_digest
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


def api_token_refusal(*, raw: str) -> str:
    """Why `raw` does not authenticate, in words for whoever sent it: unknown, revoked (and when), or its user's
    account deactivated. Only the digest is looked up, as api_token_authenticate does."""
    token = ApiToken.objects.select_related("user").filter(digest=api_token_digest(raw)).first()
    if token is None:
        return "the token is unknown to this server (mistyped, or made on another server)"
    if token.revoked_at is not None:
        return f"the token {token} was revoked on {token.revoked_at:%Y-%m-%d %H:%M} UTC"
    if not token.user.is_active:
        return f"the token's user {token.user.get_username()} is deactivated"
    return "the token was refused"
