"""The alert rules: which logged metrics flag a run (loss not finite, KL too high, entropy collapsing)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.config import DEFAULT_ALERT_ENTROPY_BELOW, DEFAULT_ALERT_KL_ABOVE


@dataclass(frozen=True)
class AlertThresholds:
    """When a run is flagged; 0 turns an alert off. The online kinds set them in their config."""

    kl_above: float = DEFAULT_ALERT_KL_ABOVE
    entropy_below: float = DEFAULT_ALERT_ENTROPY_BELOW

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> AlertThresholds:
        """Our runs' configs are validated; an external run's config is whatever its program sent, so a value
        that is not a finite number there leaves the default."""
        return cls(
            kl_above=_threshold(config.get("alert_kl_above"), DEFAULT_ALERT_KL_ABOVE),
            entropy_below=_threshold(config.get("alert_entropy_below"), DEFAULT_ALERT_ENTROPY_BELOW),
        )


def _threshold(value: Any, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return default


def alerts_for(step: int, metrics: Mapping[str, float], thresholds: AlertThresholds) -> list[dict[str, Any]]:
    """The alerts one logged step raises, each {kind, step, message}."""
    alerts = []
    loss = metrics.get("loss")
    if loss is not None and not math.isfinite(loss):
        alerts.append({"kind": "loss_nan", "step": step, "message": f"loss is {loss} at step {step}"})
    kl, limit = metrics.get("kl"), thresholds.kl_above
    if kl is not None and math.isfinite(kl) and limit > 0 and kl > limit:
        alerts.append({"kind": "kl_high", "step": step, "message": f"KL {kl:.3g} above {limit:g} at step {step}"})
    entropy, floor = metrics.get("entropy"), thresholds.entropy_below
    if entropy is not None and math.isfinite(entropy) and floor > 0 and entropy < floor:
        alerts.append({"kind": "entropy_collapse", "step": step,
                       "message": f"entropy {entropy:.3g} below {floor:g} at step {step}"})
    return alerts
