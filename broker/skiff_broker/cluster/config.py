"""Typed settings of cluster membership (the group's Lease, peers, external access)."""

from __future__ import annotations

import dataclasses

from ..ha.config import parse_host_port
from ..wire.setting import option

# How often the holder renews and every other broker looks at the Lease.
RETRY_PERIOD_S = 2.0


@dataclasses.dataclass(slots=True)
class ClusterConfig:
    # The Broker resource's name: Leases labelled skiff.io/cluster=<name> are its groups.
    name: str = option(
        "",
        "--cluster",
        "SKIFF_CLUSTER",
        "The cluster (Broker resource) this group belongs to; its groups' Leases carry it.",
    )
    namespace: str = option(
        "",
        "--namespace",
        "SKIFF_NAMESPACE",
        "Kubernetes namespace of the group's Lease (--role LEASE).",
    )
    pod_name: str = option(
        "",
        "--pod-name",
        "SKIFF_POD_NAME",
        "This broker's pod (default: HOSTNAME); the Lease's holder identity.",
    )
    kubeconfig: str = option(
        "",
        "--kubeconfig",
        "SKIFF_KUBECONFIG",
        "A kubeconfig to reach the API server with (default: the pod's service account).",
    )
    lease_duration_s: int = option(
        15,
        "--lease-duration",
        "SKIFF_LEASE_DURATION",
        "Seconds a Lease not renewed stays with its holder; the holder stops "
        "acknowledging writes after 2/3 of it.",
        minimum=3,
    )
    ha_advertise: str = option(
        "",
        "--ha-advertise",
        "SKIFF_HA_ADVERTISE",
        "HOST:PORT replicas reach this broker's replication at when it is master "
        "(default: the --ha-listen address).",
    )
    # Outside Kubernetes.
    peers: list[str] = option(
        [],
        "--cluster-peers",
        "SKIFF_CLUSTER_PEERS",
        "Other groups' client endpoints (HOST:PORT,HOST:PORT) outside Kubernetes; routes "
        "include the topic's queues on them.",
    )
    external_listen: str = option(
        "",
        "--external-listen",
        "SKIFF_EXTERNAL_LISTEN",
        "A second client address; clients connecting there get the groups' external "
        "addresses (the <cluster>-endpoints ConfigMap) in routes.",
    )
    # How long a group's topic queues, learned by asking it, are reused.
    peer_cache_s: float = 5.0

    @property
    def renew_deadline_s(self) -> float:
        """The holder stops acknowledging this long after its last renewal (2/3 of the Lease)."""
        return self.lease_duration_s * 2 / 3

    def validate(self, *, under_lease: bool) -> None:
        if under_lease:
            missing = [
                option
                for option, value in (
                    ("--cluster (SKIFF_CLUSTER)", self.name),
                    ("--namespace (SKIFF_NAMESPACE)", self.namespace),
                    ("--pod-name (SKIFF_POD_NAME)", self.pod_name),
                )
                if not value
            ]
            if missing:
                raise ValueError(f"--role LEASE needs {', '.join(missing)}")
            if self.lease_duration_s < 3:
                raise ValueError("--lease-duration must be at least 3 seconds (default 15)")
        for peer in self.peers:
            parse_host_port(peer, "--cluster-peers")
        if self.ha_advertise:
            parse_host_port(self.ha_advertise, "--ha-advertise")
        if self.external_listen:
            parse_host_port(self.external_listen, "--external-listen")
