"""The ``Ready`` condition of a Broker or Topic status, in Kubernetes' condition shape."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

READY = "Ready"


def ready_condition(
    status: bool,
    reason: str,
    message: str,
    generation: int,
    previous: Sequence[Mapping[str, Any]] = (),
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """A Ready condition; ``lastTransitionTime`` only moves when the status flips."""
    value = "True" if status else "False"
    transition = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for condition in previous:
        if condition.get("type") == READY and condition.get("status") == value:
            transition = condition.get("lastTransitionTime") or transition
    return {
        "type": READY,
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": transition,
    }


def with_condition(
    conditions: Sequence[Mapping[str, Any]], condition: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``conditions`` with the one of the same type replaced by ``condition``."""
    kept = [dict(c) for c in conditions if c.get("type") != condition["type"]]
    return [*kept, dict(condition)]
