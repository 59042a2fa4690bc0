"""Personal API tokens: a program acts as its user through the API (webapp/api), with that user's role.

Only the token's SHA-256 digest is stored. The raw token (`pfl_` + 40 url-safe characters, about 240 random
bits) is shown once, in the answer to the request that made it; `prefix`, its first 8 characters after `pfl_`,
tells a user's tokens apart on the page without revealing them. A salted slow hash, as for passwords, is not
needed: a token is random and long, so its digest cannot be reversed by guessing, and a fast digest can be
looked up on every API request.
"""

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. the machine or script using it.")
    prefix = models.CharField(max_length=8)
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the whole token, hex.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} (pfl_{self.prefix}…)"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
