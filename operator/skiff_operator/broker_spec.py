"""A Broker's spec as typed values, with the CRD's defaults for fields the API server left out.

The API server fills defaults from the CRD schema; the same defaults live here so that
rendering works on a spec read from a file or written by hand in a test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class StorageSpec:
    size: str = "10Gi"
    storage_class_name: str = ""
    delete_claims_with_broker: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulingSpec:
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    affinity: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    spread_across_nodes: bool = True
    spread_across_zones: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class TelemetrySpec:
    otlp_endpoint: str = ""
    sampling_ratio: float = 0.01


@dataclasses.dataclass(frozen=True, slots=True)
class ExternalAccessSpec:
    """How clients outside the cluster reach each group's master (off when ``type`` is "")."""

    type: str = ""  # "NodePort" or "LoadBalancer"
    # Group i gets node port node_port_base + i; 0 lets Kubernetes choose.
    node_port_base: int = 0
    # The host clients use with a node port; empty: a node's ExternalIP, else InternalIP.
    advertised_host: str = ""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.type)


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkPolicySpec:
    """Whether the operator fences the brokers' pods with NetworkPolicies."""

    enabled: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class AuthSpec:
    """Whether the brokers require signed requests from known users (SKIFF_AUTH)."""

    enabled: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class IssuerRef:
    """A cert-manager issuer: the operator asks it for the brokers' certificate."""

    name: str
    kind: str = "Issuer"  # or "ClusterIssuer"
    group: str = "cert-manager.io"


class CertificateSource:
    """Where the brokers' certificate comes from (``TlsSpec.source``)."""

    NONE = "none"  # mode disabled: the brokers serve no TLS
    SECRET = "secret"  # the user's kubernetes.io/tls Secret
    CERT_MANAGER = "cert-manager"  # a Certificate the operator asks cert-manager for
    MANAGED = "managed"  # the operator's own CA, in the Broker's Secrets


@dataclasses.dataclass(frozen=True, slots=True)
class TlsSpec:
    """TLS on the brokers' client ports; at most one of secret_name and issuer_ref."""

    mode: str = "permissive"  # SKIFF_TLS_MODE: permissive, enforcing or disabled
    secret_name: str = ""
    issuer_ref: IssuerRef | None = None

    @property
    def source(self) -> str:
        if self.mode == "disabled":
            return CertificateSource.NONE
        if self.secret_name:
            return CertificateSource.SECRET
        if self.issuer_ref is not None:
            return CertificateSource.CERT_MANAGER
        return CertificateSource.MANAGED


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsSpec:
    """Who may scrape the brokers' /metrics, and whether a PodMonitor is made for them.

    ``allow_from`` holds NetworkPolicy peers (``namespaceSelector`` and/or ``podSelector``,
    as the API server stored them). Empty: the port is bound on the pod's loopback only,
    since the metrics name every topic and consumer group.
    """

    pod_monitor: bool = False
    allow_from: tuple[Mapping[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerSpec:
    image: str = ""
    image_pull_policy: str = "IfNotPresent"
    groups: int = 1
    replicas_per_group: int = 1
    replication_mode: str = "ASYNC"
    flush_type: str = "ASYNC_FLUSH"
    transient_store_pool: bool = False
    default_read_queues: int = 8
    default_write_queues: int = 8
    storage: StorageSpec = StorageSpec()
    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    scheduling: SchedulingSpec = SchedulingSpec()
    telemetry: TelemetrySpec = TelemetrySpec()
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Seconds a group's Lease holder stays master without renewing (SKIFF_LEASE_DURATION).
    lease_duration_seconds: int = 15
    external_access: ExternalAccessSpec = ExternalAccessSpec()
    # Group suffixes ("c") whose topics take no more writes, so they can be consumed
    # empty and the group removed.
    drain_groups: tuple[str, ...] = ()
    network_policy: NetworkPolicySpec = NetworkPolicySpec()
    auth: AuthSpec = AuthSpec()
    tls: TlsSpec = TlsSpec()
    metrics: MetricsSpec = MetricsSpec()

    @classmethod
    def from_manifest(cls, spec: Mapping[str, Any]) -> BrokerSpec:
        """``spec`` as stored by the API server (camelCase keys)."""
        storage = spec.get("storage") or {}
        scheduling = spec.get("scheduling") or {}
        telemetry = spec.get("telemetry") or {}
        external = spec.get("externalAccess") or {}
        network_policy = spec.get("networkPolicy") or {}
        auth = spec.get("auth") or {}
        tls = spec.get("tls") or {}
        issuer = tls.get("issuerRef") or {}
        metrics = spec.get("metrics") or {}
        defaults = cls()
        return cls(
            image=spec.get("image") or defaults.image,
            image_pull_policy=spec.get("imagePullPolicy") or defaults.image_pull_policy,
            groups=int(spec.get("groups", defaults.groups)),
            replicas_per_group=int(spec.get("replicasPerGroup", defaults.replicas_per_group)),
            replication_mode=spec.get("replicationMode") or defaults.replication_mode,
            flush_type=spec.get("flushType") or defaults.flush_type,
            transient_store_pool=bool(spec.get("transientStorePool", False)),
            default_read_queues=int(spec.get("defaultReadQueues", defaults.default_read_queues)),
            default_write_queues=int(spec.get("defaultWriteQueues", defaults.default_write_queues)),
            storage=StorageSpec(
                size=str(storage.get("size") or defaults.storage.size),
                storage_class_name=storage.get("storageClassName") or "",
                delete_claims_with_broker=bool(storage.get("deleteClaimsWithBroker", False)),
            ),
            resources=dict(spec.get("resources") or {}),
            scheduling=SchedulingSpec(
                node_selector=dict(scheduling.get("nodeSelector") or {}),
                affinity=dict(scheduling.get("affinity") or {}),
                tolerations=tuple(scheduling.get("tolerations") or ()),
                spread_across_nodes=bool(scheduling.get("spreadAcrossNodes", True)),
                spread_across_zones=bool(scheduling.get("spreadAcrossZones", False)),
            ),
            telemetry=TelemetrySpec(
                otlp_endpoint=telemetry.get("otlpEndpoint") or "",
                sampling_ratio=float(
                    telemetry.get("samplingRatio", defaults.telemetry.sampling_ratio)
                ),
            ),
            settings={str(k): str(v) for k, v in (spec.get("settings") or {}).items()},
            lease_duration_seconds=int(
                spec.get("leaseDurationSeconds", defaults.lease_duration_seconds)
            ),
            external_access=ExternalAccessSpec(
                type=external.get("type") or "",
                node_port_base=int(external.get("nodePortBase") or 0),
                advertised_host=external.get("advertisedHost") or "",
                annotations={
                    str(k): str(v) for k, v in (external.get("annotations") or {}).items()
                },
            ),
            drain_groups=tuple(str(g) for g in spec.get("drainGroups") or ()),
            network_policy=NetworkPolicySpec(enabled=bool(network_policy.get("enabled", True))),
            auth=AuthSpec(enabled=bool(auth.get("enabled", defaults.auth.enabled))),
            tls=TlsSpec(
                mode=tls.get("mode") or defaults.tls.mode,
                secret_name=tls.get("secretName") or "",
                issuer_ref=IssuerRef(
                    name=str(issuer["name"]),
                    kind=issuer.get("kind") or "Issuer",
                    group=issuer.get("group") or "cert-manager.io",
                )
                if issuer.get("name")
                else None,
            ),
            metrics=MetricsSpec(
                pod_monitor=bool(metrics.get("podMonitor", False)),
                allow_from=tuple(dict(peer) for peer in metrics.get("allowFrom") or ()),
            ),
        )
