"""Checking a password as the login page does."""

from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.test import RequestFactory


def authenticates_as(username: str, password: str) -> User | None:
    """Who these credentials log in as, asked with a request as the login page asks: the login throttle
    (django-axes) refuses to authenticate without one."""
    return authenticate(RequestFactory().post("/accounts/login/"), username=username, password=password)
