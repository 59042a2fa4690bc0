"""The charts a user pins on run pages, per run kind (selectors.chart_pins reads them)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from webapp.experiments.models import ChartPins, Run
from webapp.experiments.services.external import METRIC_NAME_MAX_LENGTH

CHART_PINS_MAX = 50


def chart_pins_set(*, user: AbstractBaseUser, kind: Any, metrics: Any) -> list[str]:
    """Replace the user's pins for the kind with `metrics` (a list of metric names); returns what is stored."""
    if kind not in Run.Kind.values:
        raise ValidationError({"kind": f"kind must be one of {', '.join(Run.Kind.values)}, got {str(kind)[:40]!r}"})
    if not isinstance(metrics, list):
        raise ValidationError({"metrics": f"metrics must be a list of metric names, got {type(metrics).__name__}"})
    if len(metrics) > CHART_PINS_MAX:
        raise ValidationError({"metrics": f"at most {CHART_PINS_MAX} pinned charts, got {len(metrics)}"})
    for position, name in enumerate(metrics):
        if not isinstance(name, str) or not name or len(name) > METRIC_NAME_MAX_LENGTH:
            raise ValidationError({"metrics": f"metrics[{position}] must be a metric name of 1 to "
                                              f"{METRIC_NAME_MAX_LENGTH} characters, got {str(name)[:40]!r}"})
    unique = list(dict.fromkeys(metrics))
    ChartPins.objects.update_or_create(user=user, kind=kind, defaults={"metrics": unique})
    return unique
