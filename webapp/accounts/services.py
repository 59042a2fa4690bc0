"""Writes for accounts: users with a role, a project's members, one-time passwords.

A one-time password is generated here, shown once to the researcher on the page that answers the request
(never redirected to, never put in a message or a log) and stored only as Django's salted hash. We chose that
over an invite link because this app sends no mail: a link would reach the annotator by the same hand as a
password, and a password works at once on the login page, which the annotator then changes from the header.
"""

import secrets

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import transaction
from django.utils import timezone

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
