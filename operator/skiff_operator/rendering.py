"""A Broker rendered into the Kubernetes objects that run it: a pure function of the spec.

Per Broker: the brokers' ServiceAccount with a namespaced Role and RoleBinding (by name:
this Broker's group Leases, the role label of its own pods, its external endpoints
ConfigMap; nothing of another Broker), a bootstrap Service over every pod, and a Secret
with the replication secret every pod reads into SKIFF_HA_SECRET; with
``spec.auth.enabled`` (the default) also a Secret with a random super user every pod
reads into SKIFF_AUTH_INIT_USER, whose keys the operator signs its admin calls with.
These Secrets are the children never re-applied: their random contents are made once
(``render_ha_secret``, ``render_admin_secret``) and kept while the Broker lives, since
the running pods hold them. Per broker group: a StatefulSet, a headless Service for
stable per-pod DNS names, a client Service in front of whichever pod labels itself
``skiff.io/role=master``, a ConfigMap with the broker settings as ``SKIFF_*`` variables
(the pods read it with ``envFrom``), a PodDisruptionBudget, with external access on a
NodePort or LoadBalancer Service in front of the master, and (unless
``spec.networkPolicy.enabled`` is false) a NetworkPolicy fencing the group's pods: the
client ports open to anyone, the replication port only to the group's own pods, the
metrics port only to the peers ``spec.metrics.allowFrom`` (or the operator's default)
names (none by default: then /metrics is bound on the pod's loopback), no other port. It
is per group because a policy cannot say "the same group as the pod it protects": one
per Broker would let any group's pods reach every group's replication port.

TLS (``spec.tls``): the pods mount one Secret with the certificate read-only at
``/etc/skiff/tls`` and point SKIFF_TLS_CERT/KEY/CA at its files. Only the Secret's name
is in the pod template, never its contents: Kubernetes updates a mounted Secret in place
and the brokers re-read the files, so a renewed certificate needs no restart. The
Secret is the user's, cert-manager's (from the ``Certificate`` rendered here) or the
operator's own (``render_tls_secret``, signed by the CA in ``render_ca_secret``).

Which pod of a group is master is decided by the group's Lease, never by ordinal, so
the StatefulSet uses ``OnDelete``: the operator restarts outdated pods itself, the
master last (see ``rolling_restart``). Nothing here talks to the API server.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from skiff_broker.wire.store_sizes import (
    ROCKETMQ_COMMIT_LOG_FILE_SIZE,
    ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES,
    ROCKETMQ_INDEX_FILE_ENTRIES,
    ROCKETMQ_INDEX_HASH_SLOTS,
)

from . import API_VERSION
from .broker_spec import BrokerSpec, CertificateSource
from .certificates import CertificateContents, KeyPair
from .metrics_access import scrapers
from .naming import (
    ADMIN_ACCESS_KEY,
    ADMIN_SECRET_KEY,
    ADMIN_USER_KEY,
    CLIENT_PORT,
    DATA_DIR,
    EXTERNAL_PORT,
    EXTERNAL_REMOTING_PORT,
    HA_PORT,
    HA_SECRET_KEY,
    LABEL_BROKER,
    LABEL_GROUP,
    LABEL_ROLE,
    MANAGED_BY,
    METRICS_PORT,
    REMOTING_PORT,
    ROLE_MASTER,
    TLS_MOUNT_PATH,
    admin_secret_name,
    bootstrap_service_name,
    broker_service_account_name,
    ca_secret_name,
    endpoints_config_map_name,
    external_service_name,
    group_name,
    group_suffix,
    ha_secret_name,
    headless_service_name,
    lease_name,
    network_policy_name,
    pod_monitor_name,
    settings_config_map_name,
    tls_secret_name,
)

SETTINGS_HASH_ANNOTATION = "skiff.io/settings-hash"
# Non-root user of the broker image (images/Dockerfile, target broker).
BROKER_UID = 10001
# The certificate files: owner root, group the pod's fsGroup (the broker's), read-only,
# so the broker reads them and no other user of the node does.
TLS_FILE_MODE = 0o440
# Keys of a kubernetes.io/tls Secret (and cert-manager's ca.crt).
TLS_CERT_KEY = "tls.crt"
TLS_KEY_KEY = "tls.key"
TLS_CA_KEY = "ca.crt"
# Keys of the operator's CA Secret.
CA_KEY_KEY = "ca.key"


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """What rendering needs of the Broker object besides its spec."""

    name: str
    namespace: str
    uid: str


@dataclasses.dataclass(frozen=True, slots=True)
class RenderSettings:
    """Operator-wide choices (from the operator's configuration)."""

    default_image: str = "skiff/broker:0.1.0"
    cluster_domain: str = "cluster.local"
    # Who may scrape /metrics of Brokers whose spec.metrics.allowFrom names nobody.
    metrics_allow_from: tuple[Mapping[str, Any], ...] = ()

    def scrapers(self, spec: BrokerSpec) -> tuple[Mapping[str, Any], ...]:
        """The peers admitted to the metrics port of a Broker with ``spec``."""
        return scrapers(spec.metrics.allow_from, self.metrics_allow_from)


@dataclasses.dataclass(frozen=True, slots=True)
class GroupManifests:
    index: int
    name: str
    config_map: dict[str, Any]
    headless_service: dict[str, Any]
    client_service: dict[str, Any]
    stateful_set: dict[str, Any]
    disruption_budget: dict[str, Any]
    external_service: dict[str, Any] | None = None
    network_policy: dict[str, Any] | None = None

    def all(self) -> list[dict[str, Any]]:
        """In the order they are applied: the ConfigMap before the pods that read it, the
        NetworkPolicy before the pods it fences."""
        fence = [self.network_policy] if self.network_policy is not None else []
        services = [self.headless_service, self.client_service]
        if self.external_service is not None:
            services.append(self.external_service)
        return [self.config_map, *fence, *services, self.stateful_set, self.disruption_budget]


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterManifests:
    """The Broker-wide children, applied before any group (the pods need the account)."""

    service_account: dict[str, Any]
    role: dict[str, Any]
    role_binding: dict[str, Any]
    bootstrap_service: dict[str, Any]

    def all(self) -> list[dict[str, Any]]:
        return [self.service_account, self.role, self.role_binding, self.bootstrap_service]


def broker_pod_names(broker_name: str, spec: BrokerSpec) -> list[str]:
    """Every pod the Broker's StatefulSets make: ``<group>-<ordinal>``."""
    return [
        f"{group_name(broker_name, index)}-{ordinal}"
        for index in range(spec.groups)
        for ordinal in range(spec.replicas_per_group)
    ]


def broker_rules(broker_name: str, spec: BrokerSpec) -> list[dict[str, Any]]:
    """What a broker does with the API server, exactly, and only on its own Broker's objects.

    It lists its cluster's Leases (by label: RBAC cannot narrow a list by name), reads
    and writes its group's Lease, labels its own pod with its role and reads the external
    endpoints map. Every write is narrowed by ``resourceNames`` to this Broker's Leases
    and pods, so a broker of another Broker in the namespace cannot move this one's
    master nor relabel its pods. ``create`` cannot be narrowed by name (the object does
    not exist yet), so it is a rule of its own: a group's first broker creates the Lease
    (a Lease deleted by hand is made again the same way); a Lease created under another
    Broker's name stays unwritable to its creator, since update and patch are by name.
    The operator holds every right granted here (Kubernetes lets it grant no more).
    """
    leases = [lease_name(broker_name, index) for index in range(spec.groups)]
    return [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        # patch: no more than update on the same names; kubectl and tools use it.
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": leases,
            "verbs": ["get", "update", "patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": broker_pod_names(broker_name, spec),
            "verbs": ["patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [endpoints_config_map_name(broker_name)],
            "verbs": ["get"],
        },
    ]


def owner_reference(broker: BrokerIdentity) -> dict[str, Any]:
    """Makes the Broker the controller of a child, so that deleting it deletes the child."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Broker",
        "name": broker.name,
        "uid": broker.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def group_labels(broker_name: str, index: int) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "skiff-broker",
        "app.kubernetes.io/instance": broker_name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_BROKER: broker_name,
        LABEL_GROUP: group_suffix(index),
    }


def group_selector(broker_name: str, index: int) -> dict[str, str]:
    return {LABEL_BROKER: broker_name, LABEL_GROUP: group_suffix(index)}


def master_selector(broker_name: str, index: int) -> dict[str, str]:
    """The pod of the group whose broker holds the Lease (it labels itself)."""
    return {**group_selector(broker_name, index), LABEL_ROLE: ROLE_MASTER}


def broker_labels(broker_name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "skiff-broker",
        "app.kubernetes.io/instance": broker_name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_BROKER: broker_name,
    }


def render_ha_secret(broker: BrokerIdentity) -> dict[str, Any]:
    """A new replication secret for the Broker: 32 random bytes, base64 (new on every call)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": ha_secret_name(broker.name),
            "namespace": broker.namespace,
            "labels": broker_labels(broker.name),
            "ownerReferences": [owner_reference(broker)],
        },
        "type": "Opaque",
        "stringData": {HA_SECRET_KEY: base64.b64encode(os.urandom(32)).decode()},
    }


def render_admin_secret(broker: BrokerIdentity) -> dict[str, Any]:
    """A new super user for the Broker, random on every call.

    The pods create (or reset) it at every start from SKIFF_AUTH_INIT_USER; the operator
    signs its admin calls with it; brokers sign their look-ups at other groups with it.
    """
    access_key = f"{broker.name}-admin-{secrets.token_hex(4)}"
    secret_key = secrets.token_urlsafe(32)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": admin_secret_name(broker.name),
            "namespace": broker.namespace,
            "labels": broker_labels(broker.name),
            "ownerReferences": [owner_reference(broker)],
        },
        "type": "Opaque",
        "stringData": {
            ADMIN_ACCESS_KEY: access_key,
            ADMIN_SECRET_KEY: secret_key,
            ADMIN_USER_KEY: f"{access_key}:{secret_key}",
        },
    }


def render_cluster(broker: BrokerIdentity, spec: BrokerSpec) -> ClusterManifests:
    """The brokers' identity and rights, and the one Service every client can start from.

    The Role names every pod and Lease of ``spec``'s groups; it is applied before the
    groups, so a pod added by scaling out may label itself from its start.
    """

    def metadata(object_name: str) -> dict[str, Any]:
        return {
            "name": object_name,
            "namespace": broker.namespace,
            "labels": broker_labels(broker.name),
            "ownerReferences": [owner_reference(broker)],
        }

    account = broker_service_account_name(broker.name)
    service_account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(account),
        "automountServiceAccountToken": False,
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(account),
        "rules": broker_rules(broker.name, spec),
    }
    role_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(account),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": broker.namespace}],
    }
    bootstrap = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(bootstrap_service_name(broker.name)),
        "spec": {
            "type": "ClusterIP",
            # Any ready broker answers route queries for every group of the Broker.
            "selector": {LABEL_BROKER: broker.name},
            "ports": [
                {"name": "grpc", "port": CLIENT_PORT, "targetPort": "grpc"},
                {"name": "remoting", "port": REMOTING_PORT, "targetPort": "remoting"},
            ],
        },
    }
    return ClusterManifests(service_account, role, role_binding, bootstrap)


def broker_settings(
    spec: BrokerSpec, broker: BrokerIdentity, index: int, render: RenderSettings
) -> dict[str, str]:
    """The ConfigMap's data: every broker setting of the group as a SKIFF_* variable.

    The per-pod values (SKIFF_ADVERTISE, SKIFF_REMOTING_ADVERTISE, SKIFF_HA_ADVERTISE,
    SKIFF_POD_NAME, SKIFF_NAMESPACE) come from the downward API in the pod spec instead. The group's
    Lease decides which pod is master (SKIFF_ROLE=LEASE), so no master address is
    rendered: replicas read it from the Lease.
    """
    settings = {
        "SKIFF_DATA_DIR": DATA_DIR,
        "SKIFF_LISTEN": f"0.0.0.0:{CLIENT_PORT}",
        "SKIFF_REMOTING_LISTEN": f"0.0.0.0:{REMOTING_PORT}",
        "SKIFF_BROKER_NAME": group_name(broker.name, index),
        "SKIFF_FLUSH_TYPE": spec.flush_type,
        "SKIFF_TRANSIENT_STORE_POOL": "true" if spec.transient_store_pool else "false",
        "SKIFF_DEFAULT_READ_QUEUES": str(spec.default_read_queues),
        "SKIFF_DEFAULT_WRITE_QUEUES": str(spec.default_write_queues),
        "SKIFF_CLUSTER": broker.name,
        "SKIFF_ROLE": "LEASE",
        "SKIFF_LEASE_DURATION": str(spec.lease_duration_seconds),
        "SKIFF_HA_LISTEN": f"0.0.0.0:{HA_PORT}",
        "SKIFF_METRICS_LISTEN": metrics_listen(render.scrapers(spec)),
        "SKIFF_REPLICATION_MODE": spec.replication_mode,
        "SKIFF_TLS_MODE": spec.tls.mode,
        # `skiff broker` defaults to a laptop's sizes; pods get RocketMQ's production ones.
        "SKIFF_COMMIT_LOG_FILE_SIZE": str(ROCKETMQ_COMMIT_LOG_FILE_SIZE),
        "SKIFF_CONSUME_QUEUE_FILE_ENTRIES": str(ROCKETMQ_CONSUME_QUEUE_FILE_ENTRIES),
        "SKIFF_INDEX_FILE_ENTRIES": str(ROCKETMQ_INDEX_FILE_ENTRIES),
        "SKIFF_INDEX_HASH_SLOTS": str(ROCKETMQ_INDEX_HASH_SLOTS),
    }
    if spec.external_access.enabled:
        settings["SKIFF_EXTERNAL_LISTEN"] = f"0.0.0.0:{EXTERNAL_PORT}"
        settings["SKIFF_REMOTING_EXTERNAL_LISTEN"] = f"0.0.0.0:{EXTERNAL_REMOTING_PORT}"
    if spec.auth.enabled:
        # The super user comes from the admin Secret, in the pod spec (not in a ConfigMap).
        settings["SKIFF_AUTH"] = "enabled"
    if spec.telemetry.otlp_endpoint:
        settings["OTEL_EXPORTER_OTLP_ENDPOINT"] = spec.telemetry.otlp_endpoint
        settings["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
        settings["OTEL_TRACES_SAMPLER_ARG"] = repr(spec.telemetry.sampling_ratio)
    # The CRD refuses keys that would override the per-pod ones above.
    settings.update(spec.settings)
    return dict(sorted(settings.items()))


def metrics_listen(admitted: tuple[Mapping[str, Any], ...]) -> str:
    """Where the brokers serve /metrics: the pod's loopback unless someone is let in.

    The metrics name every topic and consumer group. Bound on loopback, nothing but the
    pod itself reaches them, whatever the cluster's network plugin enforces; with peers
    ``admitted`` the port listens on the pod's address and the group's NetworkPolicy
    admits only those peers.
    """
    host = "0.0.0.0" if admitted else "127.0.0.1"
    return f"{host}:{METRICS_PORT}"


def settings_hash(settings: Mapping[str, str], pod_spec: Mapping[str, Any]) -> str:
    """Changes whenever the pods must restart to pick up a change."""
    text = json.dumps({"settings": settings, "pod": pod_spec}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def render_group(
    spec: BrokerSpec,
    broker: BrokerIdentity,
    index: int,
    render: RenderSettings,
    user_secret_has_ca: bool = False,
) -> GroupManifests:
    name = group_name(broker.name, index)
    labels = group_labels(broker.name, index)
    selector = group_selector(broker.name, index)
    owner = owner_reference(broker)

    def metadata(object_name: str) -> dict[str, Any]:
        return {
            "name": object_name,
            "namespace": broker.namespace,
            "labels": dict(labels),
            "ownerReferences": [dict(owner)],
        }

    settings = broker_settings(spec, broker, index, render)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        **{"metadata": metadata(settings_config_map_name(broker.name, index))},
        "data": settings,
    }
    headless = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(headless_service_name(broker.name, index)),
        "spec": {
            "clusterIP": "None",
            # Replicas must find their master before it is ready.
            "publishNotReadyAddresses": True,
            "selector": dict(selector),
            "ports": [
                {"name": "grpc", "port": CLIENT_PORT, "targetPort": "grpc"},
                {"name": "remoting", "port": REMOTING_PORT, "targetPort": "remoting"},
                {"name": "ha", "port": HA_PORT, "targetPort": "ha"},
            ],
        },
    }
    client = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name),
        "spec": {
            "type": "ClusterIP",
            # Clients write to the master, whichever pod the Lease made master.
            "selector": master_selector(broker.name, index),
            "ports": [
                {"name": "grpc", "port": CLIENT_PORT, "targetPort": "grpc"},
                {"name": "remoting", "port": REMOTING_PORT, "targetPort": "remoting"},
            ],
        },
    }
    external = (
        _external_service(spec, broker, index, metadata) if (spec.external_access.enabled) else None
    )
    pod_spec = _pod_spec(spec, broker, index, render, user_secret_has_ca)
    template_labels = dict(labels)
    stateful_set = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(name),
        "spec": {
            "serviceName": headless_service_name(broker.name, index),
            "replicas": spec.replicas_per_group,
            "selector": {"matchLabels": dict(selector)},
            # Any ordinal may be master: the StatefulSet's own rolling order (highest
            # ordinal first) could restart the master before its replicas. The operator
            # deletes outdated pods itself, replicas first (rolling_restart.py).
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Delete" if spec.storage.delete_claims_with_broker else "Retain",
                "whenScaled": "Retain",
            },
            "template": {
                "metadata": {
                    "labels": template_labels,
                    "annotations": {SETTINGS_HASH_ANNOTATION: settings_hash(settings, pod_spec)},
                },
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [_data_claim(spec, labels)],
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(selector)}},
    }
    network_policy = (
        _network_policy(spec, broker, index, metadata, render.scrapers(spec))
        if spec.network_policy.enabled
        else None
    )
    return GroupManifests(
        index, name, config_map, headless, client, stateful_set, budget, external, network_policy
    )


def _network_policy(
    spec: BrokerSpec,
    broker: BrokerIdentity,
    index: int,
    metadata: Callable[[str], dict[str, Any]],
    admitted: tuple[Mapping[str, Any], ...],
) -> dict[str, Any]:
    """Ingress to the group's pods: client ports from anywhere, replication from the group,
    metrics only from the peers ``admitted`` (see metrics_access).

    Egress stays open: the brokers call DNS, the API server (their Lease) and other
    groups' brokers on the client port.
    """
    client_ports = [
        {"protocol": "TCP", "port": CLIENT_PORT},
        {"protocol": "TCP", "port": REMOTING_PORT},
    ]
    if spec.external_access.enabled:
        client_ports.append({"protocol": "TCP", "port": EXTERNAL_PORT})
        client_ports.append({"protocol": "TCP", "port": EXTERNAL_REMOTING_PORT})
    ingress: list[dict[str, Any]] = [
        # No "from": clients may be anywhere (other namespaces, outside the cluster
        # through the external Service); the operator and the other groups' brokers
        # call this port too.
        {"ports": client_ports},
        # Replicas connect to their master; only pods of this very group.
        {
            "from": [{"podSelector": {"matchLabels": group_selector(broker.name, index)}}],
            "ports": [{"protocol": "TCP", "port": HA_PORT}],
        },
    ]
    if admitted:
        # Only the scrapers the user named; without any, no rule (and a loopback bind).
        ingress.append(
            {
                "from": [dict(peer) for peer in admitted],
                "ports": [{"protocol": "TCP", "port": METRICS_PORT}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(network_policy_name(broker.name, index)),
        "spec": {
            "podSelector": {"matchLabels": group_selector(broker.name, index)},
            # Only Ingress is listed, so egress is not restricted by this policy.
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def _external_service(
    spec: BrokerSpec,
    broker: BrokerIdentity,
    index: int,
    metadata: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """The group's master on the external ports, as a NodePort or LoadBalancer Service.

    The gRPC port comes first (readers of the Service take the first port for it); the
    remoting port's node port is always Kubernetes' choice.
    """
    access = spec.external_access
    port: dict[str, Any] = {
        "name": "external",
        "port": EXTERNAL_PORT,
        "targetPort": "external",
        "protocol": "TCP",
    }
    if access.type == "NodePort" and access.node_port_base:
        port["nodePort"] = access.node_port_base + index
    service_metadata = metadata(external_service_name(broker.name, index))
    if access.annotations:
        service_metadata["annotations"] = dict(access.annotations)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": service_metadata,
        "spec": {
            "type": access.type,
            "selector": master_selector(broker.name, index),
            # Traffic reaches the master wherever it runs, through any node.
            "externalTrafficPolicy": "Cluster",
            "ports": [
                port,
                {
                    "name": "remoting",
                    "port": REMOTING_PORT,
                    "targetPort": "remoting-ext",
                    "protocol": "TCP",
                },
            ],
        },
    }


def render_broker(
    spec: BrokerSpec,
    broker: BrokerIdentity,
    render: RenderSettings | None = None,
    user_secret_has_ca: bool = False,
) -> list[GroupManifests]:
    """Every child object of the Broker, group by group.

    ``user_secret_has_ca``: the user's Secret (``spec.tls.secretName``) holds a ca.crt.
    """
    render = render or RenderSettings()
    return [
        render_group(spec, broker, index, render, user_secret_has_ca)
        for index in range(spec.groups)
    ]


def mounted_tls_secret(spec: BrokerSpec, broker_name: str) -> str:
    """The Secret the pods mount at /etc/skiff/tls; "" when they serve no TLS."""
    source = spec.tls.source
    if source == CertificateSource.NONE:
        return ""
    if source == CertificateSource.SECRET:
        return spec.tls.secret_name
    return tls_secret_name(broker_name)


def render_certificate(
    spec: BrokerSpec, broker: BrokerIdentity, contents: CertificateContents
) -> dict[str, Any]:
    """The cert-manager Certificate (cert-manager.io/v1) for ``spec.tls.issuerRef``.

    cert-manager writes ``<broker>-tls`` and renews it a third of its life before it ends.
    """
    issuer = spec.tls.issuer_ref
    assert issuer is not None, "only for spec.tls.issuerRef"
    certificate_spec: dict[str, Any] = {
        "secretName": tls_secret_name(broker.name),
        "commonName": broker.name,
        "dnsNames": list(contents.dns_names),
        "usages": ["digital signature", *contents.usages],
        "duration": f"{int(contents.lifetime.total_seconds() // 3600)}h",
        "renewBefore": f"{int(contents.lifetime.total_seconds() // 3600 // 3)}h",
        "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
        "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
        # The Secret cert-manager writes carries the Broker's labels, so it is found as its.
        "secretTemplate": {"labels": broker_labels(broker.name)},
    }
    if contents.ip_addresses:
        certificate_spec["ipAddresses"] = list(contents.ip_addresses)
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {
            "name": tls_secret_name(broker.name),
            "namespace": broker.namespace,
            "labels": broker_labels(broker.name),
            "ownerReferences": [owner_reference(broker)],
        },
        "spec": certificate_spec,
    }


def _secret(broker: BrokerIdentity, name: str, kind: str, data: Mapping[str, bytes]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": broker.namespace,
            "labels": broker_labels(broker.name),
            "ownerReferences": [owner_reference(broker)],
        },
        "type": kind,
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def render_ca_secret(broker: BrokerIdentity, ca: KeyPair) -> dict[str, Any]:
    """The operator's CA for the Broker; made once and kept (the brokers trust it)."""
    return _secret(
        broker,
        ca_secret_name(broker.name),
        "Opaque",
        {TLS_CA_KEY: ca.cert_pem, CA_KEY_KEY: ca.key_pem},
    )


def render_tls_secret(broker: BrokerIdentity, leaf: KeyPair, ca_cert_pem: bytes) -> dict[str, Any]:
    """The brokers' certificate, its key and the CA that signed it, as the pods mount them."""
    return _secret(
        broker,
        tls_secret_name(broker.name),
        "kubernetes.io/tls",
        {TLS_CERT_KEY: leaf.cert_pem, TLS_KEY_KEY: leaf.key_pem, TLS_CA_KEY: ca_cert_pem},
    )


def _data_claim(spec: BrokerSpec, labels: Mapping[str, str]) -> dict[str, Any]:
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": spec.storage.size}},
    }
    if spec.storage.storage_class_name:
        claim_spec["storageClassName"] = spec.storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "labels": dict(labels)},
        "spec": claim_spec,
    }


def _probes(spec: BrokerSpec) -> dict[str, Any]:
    """The broker's gRPC health service (grpc.health.v1) answers every probe: SERVING once
    its store is recovered, NOT_SERVING from the moment it begins to stop.

    Recovery after a crash scans the commit log for as long as it takes: the startup
    probe allows half an hour, and liveness only starts counting after it. The kubelet's
    gRPC probes speak plaintext, which the client port takes unless TLS is
    ``enforcing`` (``spec.tls.mode``); there the probes only check that the port accepts
    connections.
    """
    if spec.tls.mode == "enforcing":
        check: dict[str, Any] = {"tcpSocket": {"port": "grpc"}}
    else:
        check = {"grpc": {"port": CLIENT_PORT}}
    return {
        "startupProbe": {**check, "periodSeconds": 5, "failureThreshold": 360},
        "readinessProbe": {**check, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**check, "periodSeconds": 10, "failureThreshold": 6},
    }


def render_pod_monitor(broker: BrokerIdentity) -> dict[str, Any]:
    """A Prometheus Operator PodMonitor scraping /metrics of every broker pod."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": pod_monitor_name(broker.name),
            "namespace": broker.namespace,
            "labels": broker_labels(broker.name),
            "ownerReferences": [owner_reference(broker)],
        },
        "spec": {
            "selector": {"matchLabels": {LABEL_BROKER: broker.name}},
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
        },
    }


def _pod_spec(
    spec: BrokerSpec,
    broker: BrokerIdentity,
    index: int,
    render: RenderSettings,
    user_secret_has_ca: bool = False,
) -> dict[str, Any]:
    selector = group_selector(broker.name, index)
    container: dict[str, Any] = {
        "name": "broker",
        "image": spec.image or render.default_image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["skiff"],
        "args": ["broker"],
        "envFrom": [{"configMapRef": {"name": settings_config_map_name(broker.name, index)}}],
        # Kubelet substitutes $(VAR) from earlier entries of this list.
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {
                "name": "SKIFF_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": "SKIFF_POD_NAME", "value": "$(POD_NAME)"},
            {"name": "SKIFF_ADVERTISE", "value": f"$(POD_IP):{CLIENT_PORT}"},
            {"name": "SKIFF_REMOTING_ADVERTISE", "value": f"$(POD_IP):{REMOTING_PORT}"},
            {"name": "SKIFF_HA_ADVERTISE", "value": f"$(POD_IP):{HA_PORT}"},
            # Replication peers prove they hold it; the Secret is the Broker's own.
            {
                "name": "SKIFF_HA_SECRET",
                "valueFrom": {
                    "secretKeyRef": {"name": ha_secret_name(broker.name), "key": HA_SECRET_KEY}
                },
            },
        ],
        "ports": [
            {"name": "grpc", "containerPort": CLIENT_PORT, "protocol": "TCP"},
            {"name": "remoting", "containerPort": REMOTING_PORT, "protocol": "TCP"},
            {"name": "ha", "containerPort": HA_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        **_probes(spec),
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": BROKER_UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if spec.auth.enabled:
        container["env"].append(
            {
                "name": "SKIFF_AUTH_INIT_USER",
                "valueFrom": {
                    "secretKeyRef": {"name": admin_secret_name(broker.name), "key": ADMIN_USER_KEY}
                },
            }
        )
    if spec.external_access.enabled:
        container["ports"] += [
            {"name": "external", "containerPort": EXTERNAL_PORT, "protocol": "TCP"},
            {
                "name": "remoting-ext",
                "containerPort": EXTERNAL_REMOTING_PORT,
                "protocol": "TCP",
            },
        ]
    if spec.resources:
        container["resources"] = dict(spec.resources)
    tls_secret = mounted_tls_secret(spec, broker.name)
    if tls_secret:
        container["volumeMounts"].append(
            {"name": "tls", "mountPath": TLS_MOUNT_PATH, "readOnly": True}
        )
        container["env"] += [
            {"name": "SKIFF_TLS_CERT", "value": f"{TLS_MOUNT_PATH}/{TLS_CERT_KEY}"},
            {"name": "SKIFF_TLS_KEY", "value": f"{TLS_MOUNT_PATH}/{TLS_KEY_KEY}"},
        ]
        # The operator's and cert-manager's Secrets always carry the CA; a user's may not.
        if spec.tls.source != CertificateSource.SECRET or user_secret_has_ca:
            container["env"].append(
                {"name": "SKIFF_TLS_CA", "value": f"{TLS_MOUNT_PATH}/{TLS_CA_KEY}"}
            )
    pod: dict[str, Any] = {
        # The broker holds its group's Lease and labels its pod through this account.
        "serviceAccountName": broker_service_account_name(broker.name),
        "automountServiceAccountToken": True,
        "containers": [container],
        # SIGTERM makes the broker flush and write its checkpoint; give it time.
        "terminationGracePeriodSeconds": 60,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": BROKER_UID,
            "runAsGroup": BROKER_UID,
            "fsGroup": BROKER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "enableServiceLinks": False,
    }
    if tls_secret:
        pod["volumes"].append(
            {"name": "tls", "secret": {"secretName": tls_secret, "defaultMode": TLS_FILE_MODE}}
        )
    scheduling = spec.scheduling
    if scheduling.node_selector:
        pod["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.affinity:
        pod["affinity"] = dict(scheduling.affinity)
    if scheduling.tolerations:
        pod["tolerations"] = [dict(t) for t in scheduling.tolerations]
    spread = []
    for wanted, key in (
        (scheduling.spread_across_nodes, "kubernetes.io/hostname"),
        (scheduling.spread_across_zones, "topology.kubernetes.io/zone"),
    ):
        if wanted:
            spread.append(
                {
                    "maxSkew": 1,
                    "topologyKey": key,
                    # A preference: a one-node cluster still runs every pod.
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": dict(selector)},
                }
            )
    if spread:
        pod["topologySpreadConstraints"] = spread
    return pod
