"""Which pod of a group to restart next so that its pods reach the current template.

The StatefulSet uses ``OnDelete``: a pod picks up a new template only when deleted.
Invariants of the order chosen here:

- one pod at a time, and only while every pod of the group is ready and none is
  already going (a restart never overlaps another, or a failover in progress);
- the master (the holder of the group's Lease) last: its replicas are on the new
  template before it restarts;
- the master restarts only once a replica is in its published in-sync set, so that
  the Lease can pass to a replica that holds every acknowledged message;
- with no master known, pods go from the highest ordinal down, as the StatefulSet
  controller would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

REVISION_LABEL = "controller-revision-hash"


@dataclasses.dataclass(frozen=True, slots=True)
class RestartStep:
    """``pod`` to delete now ("" for none); ``waiting`` says why none, if pods are outdated."""

    pod: str = ""
    waiting: str = ""
    outdated: int = 0


def next_restart(
    pods: Sequence[Mapping[str, Any]],
    update_revision: str,
    master: str,
    in_sync: Collection[str],
) -> RestartStep:
    if not update_revision:
        return RestartStep()
    outdated = [p for p in pods if _labels(p).get(REVISION_LABEL) != update_revision]
    if not outdated:
        return RestartStep()
    count = len(outdated)
    busy = [_name(p) for p in pods if not _ready(p) or _metadata(p).get("deletionTimestamp")]
    if busy:
        return RestartStep(
            waiting=f"waiting for pod(s) {', '.join(sorted(busy))} to be ready", outdated=count
        )
    replicas = sorted((p for p in outdated if _name(p) != master), key=_ordinal, reverse=True)
    if replicas:
        return RestartStep(pod=_name(replicas[0]), outdated=count)
    others = [_name(p) for p in pods if _name(p) != master]
    if others and not set(others) & set(in_sync):
        return RestartStep(
            waiting=f"the master {master} restarts once a replica is in its in-sync set",
            outdated=count,
        )
    return RestartStep(pod=master, outdated=count)


def _metadata(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return _metadata(pod).get("labels") or {}


def _name(pod: Mapping[str, Any]) -> str:
    return str(_metadata(pod).get("name") or "")


def _ordinal(pod: Mapping[str, Any]) -> int:
    suffix = _name(pod).rpartition("-")[2]
    return int(suffix) if suffix.isdigit() else -1


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
