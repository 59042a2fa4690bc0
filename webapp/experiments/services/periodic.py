"""Periodic jobs: which beat's tick acts, once per period however many beats tick."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import F
from django.db.models.functions import Now

from webapp.experiments.models import PeriodicJobClaim

# A tick this fraction of a period or less after the last act is another beat's, and does nothing. Above one half,
# so two beats ticking at any phase act once per period between them; a quarter of a period is left for a tick's
# delivery to run late.
PERIODIC_CLAIM_FRACTION = 0.75
_NEVER = datetime(2000, 1, 1, tzinfo=UTC)


def periodic_job_claim(*, name: str, every_s: float) -> bool:
    """Whether this tick of the periodic job `name` should act: True (and the act recorded) unless the job acted
    less than PERIODIC_CLAIM_FRACTION of `every_s` ago. One conditional UPDATE, by the database's clock: of two beats
    ticking at once, exactly one gets it (Postgres re-checks the condition on the row the other one updated; SQLite
    has one writer)."""
    PeriodicJobClaim.objects.get_or_create(name=name, defaults={"acted_at": _NEVER})
    due = Now() - timedelta(seconds=every_s * PERIODIC_CLAIM_FRACTION)
    return bool(PeriodicJobClaim.objects.filter(name=name, acted_at__lte=due).update(acted_at=Now(), acts=F("acts") + 1))
