"""Writes for accounts: users with a role, a project's members, one-time passwords, API tokens.

A one-time password is generated here, shown once to the researcher on the page that answers the request
(never redirected to, never put in a message or a log) and stored only as Django's salted hash. We chose that
over an invite link because this app sends no mail: a link would reach the annotator by the same hand as a
password, and a password works at once on the login page, which the annotator then changes from the header.
An API token is shown once the same way, and stored only as its digest (see models.ApiToken).
"""

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from webapp.accounts.models import ApiToken
from webapp.accounts.roles import ANNOTATOR, RESEARCHER, grant_role, has_role
from webapp.annotation.models import Assignment, Project

# No 0/O, 1/l/I: the password is read off a screen and typed by someone else.
_PASSWORD_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
_PASSWORD_GROUPS = 4


class AccountError(ValueError):
    """A change the rules refuse; the message is shown to the user as is."""


def one_time_password() -> str:
    """Four groups of four characters (about 79 bits), e.g. 'k7qm-2xwe-p9ra-tn4c'."""
    return "-".join(
        "".join(secrets.choice(_PASSWORD_ALPHABET) for _ in range(4)) for _ in range(_PASSWORD_GROUPS)
    )


@transaction.atomic
def user_create(*, username: str, role: str, password: str | None = None, email: str = "") -> tuple[User, str]:
    """Create a user with one role; returns the user and the password (generated when none is given)."""
    password = password or secrets.token_urlsafe(12)
    user = User.objects.create_user(username=username, email=email, password=password)
    grant_role(user, role)
    return user, password


@transaction.atomic
def project_annotator_create(*, project: Project, username: str) -> tuple[User, str]:
    """A new annotator account, member of `project`; returns it with its one-time password (shown once)."""
    username = username.strip()
    if User.objects.filter(username__iexact=username).exists():
        raise AccountError(f"The username “{username}” is taken: add that user as a member instead, or pick another.")
    user, password = user_create(username=username, role=ANNOTATOR, password=one_time_password())
    project.members.add(user)
    return user, password


@transaction.atomic
def project_member_add(*, project: Project, user: AbstractBaseUser) -> None:
    """Make `user` a member; a user with no role yet becomes an annotator, or the project could not be opened."""
    if not user.is_active:
        raise AccountError(f"{user.get_username()} is deactivated; an admin can reactivate the account.")
    if not (has_role(user, ANNOTATOR) or has_role(user, RESEARCHER)):
        grant_role(user, ANNOTATOR)
    project.members.add(user)


@transaction.atomic
def project_member_remove(*, project: Project, user: AbstractBaseUser) -> None:
    """Take `user` out of the project; their rankings stay, their open leases end now so others get the items."""
    project.members.remove(user)
    Assignment.objects.filter(
        prompt__project=project, annotator=user, status=Assignment.Status.LEASED, expires_at__gt=timezone.now()
    ).update(expires_at=timezone.now())


def member_password_reset(*, project: Project, user: AbstractBaseUser) -> str:
    """A new one-time password for an annotator of `project`; the old one stops working at once."""
    if not project.members.filter(pk=user.pk).exists():
        raise AccountError(f"{user.get_username()} is not a member of {project.name}.")
    if user.is_staff or user.is_superuser or has_role(user, RESEARCHER):
        # A researcher must not take over a colleague's or an admin's account through a project they share.
        raise AccountError(
            f"{user.get_username()} is a researcher or an admin: only an admin can reset that password."
        )
    password = one_time_password()
    user.set_password(password)
    user.save(update_fields=["password"])
    return password


# API tokens -------------------------------------------------------------------------------------------------

API_TOKEN_PREFIX = "pfl_"
# 30 random bytes are 40 url-safe characters
API_TOKEN_BYTES = 30
API_TOKEN_LENGTH = len(API_TOKEN_PREFIX) + 40
# what the tokens page shows of a token, after pfl_
API_TOKEN_PREFIX_CHARS = ApiToken._meta.get_field("prefix").max_length
API_TOKEN_NAME_MAX_CHARS = ApiToken._meta.get_field("name").max_length
# last_used_at is a hint for the tokens page, not an audit log: one write a minute per token at most, instead of
# one per API request.
API_TOKEN_USE_RESOLUTION = timedelta(minutes=1)


def api_token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def api_token_create(*, user: AbstractBaseUser, name: str) -> tuple[ApiToken, str]:
    """A new token of `user`; returns its row and the raw token, which is stored nowhere (only its digest)."""
    name = name.strip()
    if not name:
        raise AccountError("Give the token a name: what will use it (a machine, a script)?")
    if len(name) > API_TOKEN_NAME_MAX_CHARS:
        raise AccountError(f"A token's name has at most {API_TOKEN_NAME_MAX_CHARS} characters.")
    if not user.is_active:
        raise AccountError(f"{user.get_username()} is deactivated and cannot have tokens.")
    raw = API_TOKEN_PREFIX + secrets.token_urlsafe(API_TOKEN_BYTES)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=raw[len(API_TOKEN_PREFIX):][:API_TOKEN_PREFIX_CHARS], digest=api_token_digest(raw)
    )
    return token, raw


def api_token_revoke(*, token_id: int, user: AbstractBaseUser) -> ApiToken:
    """Revoke one of `user`'s tokens: the next request with it is refused. Revoking again changes nothing."""
    token = ApiToken.objects.filter(pk=token_id, user=user).first()
    if token is None:
        raise AccountError(f"Token {token_id} is not yours or does not exist.")
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token.refresh_from_db(fields=["revoked_at"])
    return token


def api_token_authenticate(*, raw: str) -> User | None:
    """The active user whose unrevoked token `raw` is, else None. Looked up by digest, so the comparison that
    decides is the database's on a hash: its timing says nothing about how close a guess came."""
    if not raw.startswith(API_TOKEN_PREFIX) or len(raw) != API_TOKEN_LENGTH:
        return None
    token = (ApiToken.objects.select_related("user")
             .filter(digest=api_token_digest(raw), revoked_at__isnull=True).first())
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    due = now - API_TOKEN_USE_RESOLUTION
    if token.last_used_at is None or token.last_used_at <= due:
        # conditional, so that many requests at once write it once
        ApiToken.objects.filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=due), pk=token.pk).update(
            last_used_at=now
        )
    return token.user
