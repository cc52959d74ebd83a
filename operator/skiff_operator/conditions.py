"""The ``Ready`` condition of a Broker or Topic status, in Kubernetes' condition shape."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, MutableMapping, Sequence
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


def generation_of(body: Mapping[str, Any]) -> int:
    """The object's ``metadata.generation`` (0 where the API server set none)."""
    return int((body.get("metadata") or {}).get("generation") or 0)


def conditions_of(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The object's ``status.conditions`` as they are before this reconcile."""
    return list(body.get("status", {}).get("conditions") or [])


def write_ready(
    status_patch: MutableMapping[str, Any],
    conditions: Sequence[Mapping[str, Any]],
    status: bool,
    reason: str,
    message: str,
    generation: int,
) -> None:
    """Put the Ready condition into a status patch beside the object's other conditions."""
    condition = ready_condition(status, reason, message, generation, conditions)
    status_patch["conditions"] = with_condition(conditions, condition)


ReadySetter = Callable[[bool, str, str], None]


def ready_setter(
    body: Mapping[str, Any], status_patch: MutableMapping[str, Any], **fields: Any
) -> ReadySetter:
    """``set_ready(status, reason, message)`` for one object, reporting the generation seen.

    ``fields`` go into the status with every condition (e.g. the name the object maps to),
    so the status always says what the condition is about.
    """
    generation = generation_of(body)
    conditions = conditions_of(body)

    def set_ready(status: bool, reason: str, message: str) -> None:
        write_ready(status_patch, conditions, status, reason, message, generation)
        status_patch["observedGeneration"] = generation
        status_patch.update(fields)

    return set_ready
