"""Typed settings of cluster membership (the group's Lease, peers, external access)."""

from __future__ import annotations

import dataclasses

from ..ha.config import parse_host_port

# How often the holder renews and every other broker looks at the Lease.
RETRY_PERIOD_S = 2.0


@dataclasses.dataclass(slots=True)
class ClusterConfig:
    # The Broker resource's name: Leases labelled skiff.io/cluster=<name> are its groups.
    name: str = ""
    namespace: str = ""
    pod_name: str = ""
    # A kubeconfig to use instead of the pod's service-account credentials.
    kubeconfig: str = ""
    lease_duration_s: int = 15
    # Where this broker serves replication when master, as replicas reach it.
    ha_advertise: str = ""
    # Other groups' client endpoints, outside Kubernetes.
    peers: list[str] = dataclasses.field(default_factory=list)
    # A second client port: clients that come in there get external addresses in routes.
    external_listen: str = ""
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
