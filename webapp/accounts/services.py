"""Writes for accounts: creating users with a role."""

import secrets

from django.contrib.auth.models import User
from django.db import transaction

from webapp.accounts.roles import grant_role


@transaction.atomic
def user_create(*, username: str, role: str, password: str | None = None, email: str = "") -> tuple[User, str]:
    """Create a user with one role; returns the user and the password (generated when none is given)."""
    password = password or secrets.token_urlsafe(12)
    user = User.objects.create_user(username=username, email=email, password=password)
    grant_role(user, role)
    return user, password
