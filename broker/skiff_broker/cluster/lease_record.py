"""A group's Lease (coordination.k8s.io/v1) as the brokers read and write it.

The Lease is named after the group and labelled with its cluster and group.
``spec.holderIdentity`` is the master's pod name. Only the holder writes the
annotations: the term (``skiff.io/epoch``), where clients and replicas reach it
(``skiff.io/endpoint``, ``skiff.io/remoting-endpoint`` for 4.x clients,
``skiff.io/ha-address``), which pods hold every write it
acknowledged (``skiff.io/in-sync``, the master included), every replica's client
endpoint (``skiff.io/replicas``) and, once it stopped and gave the Lease up,
that it did (``skiff.io/released-by``). Every write of the Lease carries the
``resourceVersion`` it was based on, so of two brokers racing for an expired
Lease exactly one succeeds.
"""

from __future__ import annotations

import dataclasses
import datetime
import json

CLUSTER_LABEL = "skiff.io/cluster"
GROUP_LABEL = "skiff.io/group"
ROLE_LABEL = "skiff.io/role"
EPOCH = "skiff.io/epoch"
ENDPOINT = "skiff.io/endpoint"
# Absent (a holder without a remoting port, or one from before it): none is known.
REMOTING_ENDPOINT = "skiff.io/remoting-endpoint"
HA_ADDRESS = "skiff.io/ha-address"
IN_SYNC = "skiff.io/in-sync"
REPLICAS = "skiff.io/replicas"
RELEASED_BY = "skiff.io/released-by"


def now_micro() -> str:
    """The Lease's MicroTime format."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass(slots=True)
class LeaseRecord:
    name: str
    cluster: str
    holder: str = ""
    duration_s: int = 15
    epoch: int = 0
    endpoint: str = ""
    remoting_endpoint: str = ""
    ha_address: str = ""
    # None: no holder ever published one (a new Lease); anyone may take it.
    in_sync: list[str] | None = None
    replicas: dict[str, str] = dataclasses.field(default_factory=dict)
    transitions: int = 0
    # The pod that gave the Lease up when it stopped; cleared by the next taker.
    released_by: str = ""
    acquire_time: str = ""
    renew_time: str = ""
    resource_version: str = ""
    # Kept as found: the operator makes the Broker own the Lease, so it goes with the Broker.
    owners: list[dict] = dataclasses.field(default_factory=list)

    @classmethod
    def from_object(cls, lease: dict) -> LeaseRecord:
        meta = lease.get("metadata") or {}
        spec = lease.get("spec") or {}
        notes = meta.get("annotations") or {}
        in_sync: list[str] | None = None
        if IN_SYNC in notes:
            try:
                parsed = json.loads(notes[IN_SYNC])
                in_sync = [str(p) for p in parsed] if isinstance(parsed, list) else []
            except ValueError:
                # Unreadable: nobody is known to hold every acknowledged write.
                in_sync = []
        try:
            replicas = json.loads(notes.get(REPLICAS) or "{}")
            if not isinstance(replicas, dict):
                replicas = {}
        except ValueError:
            replicas = {}
        try:
            epoch = int(notes.get(EPOCH) or 0)
        except ValueError:
            epoch = 0
        return cls(
            name=meta.get("name", ""),
            cluster=(meta.get("labels") or {}).get(CLUSTER_LABEL, ""),
            holder=spec.get("holderIdentity") or "",
            duration_s=int(spec.get("leaseDurationSeconds") or 15),
            epoch=epoch,
            endpoint=notes.get(ENDPOINT, ""),
            remoting_endpoint=notes.get(REMOTING_ENDPOINT, ""),
            ha_address=notes.get(HA_ADDRESS, ""),
            in_sync=in_sync,
            replicas={str(k): str(v) for k, v in replicas.items()},
            transitions=int(spec.get("leaseTransitions") or 0),
            released_by=notes.get(RELEASED_BY, ""),
            acquire_time=spec.get("acquireTime") or "",
            renew_time=spec.get("renewTime") or "",
            resource_version=meta.get("resourceVersion", ""),
            owners=[o for o in meta.get("ownerReferences") or [] if isinstance(o, dict)],
        )

    def to_object(self) -> dict:
        annotations = {
            EPOCH: str(self.epoch),
            ENDPOINT: self.endpoint,
            HA_ADDRESS: self.ha_address,
            IN_SYNC: json.dumps(self.in_sync or []),
            REPLICAS: json.dumps(self.replicas, sort_keys=True),
        }
        if self.remoting_endpoint:
            annotations[REMOTING_ENDPOINT] = self.remoting_endpoint
        if self.released_by:
            annotations[RELEASED_BY] = self.released_by
        meta: dict = {
            "name": self.name,
            "labels": {CLUSTER_LABEL: self.cluster, GROUP_LABEL: self.name},
            "annotations": annotations,
        }
        if self.resource_version:
            meta["resourceVersion"] = self.resource_version
        if self.owners:
            meta["ownerReferences"] = self.owners
        spec: dict = {
            "holderIdentity": self.holder or None,
            "leaseDurationSeconds": self.duration_s,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def may_take(self, pod: str) -> bool:
        """Whether ``pod`` holds every write the last holder acknowledged."""
        return self.in_sync is None or pod in self.in_sync

    def identity(self) -> tuple[str, str]:
        """Changes whenever the holder writes the Lease (how readers see it is alive)."""
        return (self.holder, self.renew_time)
