"""What a Broker's status says about each group, read from what the brokers publish.

The brokers of a group elect their master through the group's Lease and publish on it
(as annotations only the holder writes) the term, the master's endpoints and its
in-sync set. A group has a master only while the Lease names a holder whose last
renewal is younger than the Lease's duration: a holder that stopped renewing has
already stopped acknowledging writes, so it is not reported as master. Pure functions;
the handlers fetch the objects.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

ANNOTATION_EPOCH = "skiff.io/epoch"
ANNOTATION_ENDPOINT = "skiff.io/endpoint"
ANNOTATION_HA_ADDRESS = "skiff.io/ha-address"
ANNOTATION_IN_SYNC = "skiff.io/in-sync"


@dataclasses.dataclass(frozen=True, slots=True)
class GroupLease:
    """A group's Lease as the status reports it; ``master`` is "" while there is none."""

    master: str = ""
    epoch: int = 0
    in_sync: tuple[str, ...] = ()
    endpoint: str = ""
    # False until a broker of the group created the Lease (e.g. pods of an older
    # release, which chose their master by ordinal).
    exists: bool = True

    def status_fields(self) -> dict[str, Any]:
        return {
            "master": self.master,
            "epoch": self.epoch,
            "inSync": list(self.in_sync),
            "endpoint": self.endpoint,
        }


def read_lease(lease: Mapping[str, Any] | None, now: datetime.datetime) -> GroupLease:
    """The group's master, term and in-sync set from its Lease (None: not created yet)."""
    if not lease:
        return GroupLease(exists=False)
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    epoch = _integer(annotations.get(ANNOTATION_EPOCH))
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if not holder or _expired(spec, now):
        # The term stays known: the next master's epoch will be higher.
        return GroupLease(epoch=epoch)
    return GroupLease(
        master=holder,
        epoch=epoch,
        in_sync=_pod_names(annotations.get(ANNOTATION_IN_SYNC)),
        endpoint=annotations.get(ANNOTATION_ENDPOINT) or "",
    )


def _expired(spec: Mapping[str, Any], now: datetime.datetime) -> bool:
    renewed = _timestamp(spec.get("renewTime") or spec.get("acquireTime"))
    duration = _integer(spec.get("leaseDurationSeconds"))
    if renewed is None or duration <= 0:
        return True
    return now >= renewed + datetime.timedelta(seconds=duration)


def _timestamp(value: Any) -> datetime.datetime | None:
    """A Lease's MicroTime ("2026-01-01T10:00:00.123456Z")."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def _integer(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _pod_names(value: Any) -> tuple[str, ...]:
    """The JSON list of pod names a master publishes; anything else reads as empty."""
    try:
        names = json.loads(value) if isinstance(value, str) else []
    except ValueError:
        return ()
    if not isinstance(names, list):
        return ()
    return tuple(sorted(str(n) for n in names if isinstance(n, str)))


def external_endpoint(
    service: Mapping[str, Any] | None,
    nodes: Sequence[Mapping[str, Any]],
    advertised_host: str = "",
    port_name: str = "",
) -> str:
    """``host:port`` where clients outside reach the group's external Service; "" if unknown.

    ``port_name`` picks the Service port (default: its first, the gRPC port); a Service
    without that port has no such address.

    NodePort: the user's advertised host, else the first node (by name) with an
    ExternalIP, else one with an InternalIP, with the Service's node port. LoadBalancer:
    the first ingress IP or hostname once the cloud assigned one, with the Service port.
    """
    if not service:
        return ""
    spec = service.get("spec") or {}
    ports = spec.get("ports") or []
    if port_name:
        ports = [p for p in ports if p.get("name") == port_name]
    if not ports:
        return ""
    if spec.get("type") == "LoadBalancer":
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        for entry in ingress:
            host = entry.get("ip") or entry.get("hostname")
            if host:
                return f"{host}:{ports[0]['port']}"
        return ""
    node_port = ports[0].get("nodePort")
    if not node_port:
        return ""
    host = advertised_host or _node_address(nodes)
    return _host_port(host, node_port) if host else ""


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _node_address(nodes: Sequence[Mapping[str, Any]]) -> str:
    ordered = sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name") or "")
    for wanted in ("ExternalIP", "InternalIP"):
        for node in ordered:
            for address in (node.get("status") or {}).get("addresses") or []:
                if address.get("type") == wanted and address.get("address"):
                    return str(address["address"])
    return ""
