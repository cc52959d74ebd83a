"""A Broker rendered into the Kubernetes objects that run it: a pure function of the spec.

Per broker group: a StatefulSet (ordinal 0 is the master), a headless Service for stable
per-pod DNS names, a client Service in front of the master, a ConfigMap with the broker
settings as ``SKIFF_*`` variables (the pods read it with ``envFrom``) and a
PodDisruptionBudget. Nothing here talks to the API server.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from . import API_VERSION
from .broker_spec import BrokerSpec
from .naming import (
    CLIENT_PORT,
    DATA_DIR,
    HA_PORT,
    LABEL_BROKER,
    LABEL_GROUP,
    MANAGED_BY,
    group_name,
    group_suffix,
    headless_service_name,
    master_dns_name,
    master_pod_name,
    settings_config_map_name,
)

SETTINGS_HASH_ANNOTATION = "skiff.io/settings-hash"
# Non-root user of the broker image (images/Dockerfile, target broker).
BROKER_UID = 10001


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


@dataclasses.dataclass(frozen=True, slots=True)
class GroupManifests:
    index: int
    name: str
    config_map: dict[str, Any]
    headless_service: dict[str, Any]
    client_service: dict[str, Any]
    stateful_set: dict[str, Any]
    disruption_budget: dict[str, Any]

    def all(self) -> list[dict[str, Any]]:
        """In the order they are applied: the ConfigMap before the pods that read it."""
        return [
            self.config_map,
            self.headless_service,
            self.client_service,
            self.stateful_set,
            self.disruption_budget,
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


def broker_settings(
    spec: BrokerSpec, broker: BrokerIdentity, index: int, render: RenderSettings
) -> dict[str, str]:
    """The ConfigMap's data: every broker setting of the group as a SKIFF_* variable.

    The per-pod values (SKIFF_ADVERTISE, SKIFF_POD_NAME) come from the downward API in
    the pod spec instead. Replication variables are read by brokers that replicate; a
    broker without replication ignores unknown SKIFF_* variables.
    """
    settings = {
        "SKIFF_DATA_DIR": DATA_DIR,
        "SKIFF_LISTEN": f"0.0.0.0:{CLIENT_PORT}",
        "SKIFF_BROKER_NAME": group_name(broker.name, index),
        "SKIFF_FLUSH_TYPE": spec.flush_type,
        "SKIFF_TRANSIENT_STORE_POOL": "true" if spec.transient_store_pool else "false",
        "SKIFF_DEFAULT_READ_QUEUES": str(spec.default_read_queues),
        "SKIFF_DEFAULT_WRITE_QUEUES": str(spec.default_write_queues),
        # AUTO: ordinal 0 of the StatefulSet is the master, the others replicate from it.
        "SKIFF_ROLE": "AUTO",
        "SKIFF_MASTER_ADDRESS": (
            f"{master_dns_name(broker.name, index, broker.namespace, render.cluster_domain)}"
            f":{HA_PORT}"
        ),
        "SKIFF_HA_LISTEN": f"0.0.0.0:{HA_PORT}",
        "SKIFF_REPLICATION_MODE": spec.replication_mode,
    }
    if spec.telemetry.otlp_endpoint:
        settings["OTEL_EXPORTER_OTLP_ENDPOINT"] = spec.telemetry.otlp_endpoint
        settings["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
        settings["OTEL_TRACES_SAMPLER_ARG"] = repr(spec.telemetry.sampling_ratio)
    # The CRD refuses keys that would override the per-pod ones above.
    settings.update(spec.settings)
    return dict(sorted(settings.items()))


def settings_hash(settings: Mapping[str, str], pod_spec: Mapping[str, Any]) -> str:
    """Changes whenever the pods must restart to pick up a change."""
    text = json.dumps({"settings": settings, "pod": pod_spec}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def render_group(
    spec: BrokerSpec, broker: BrokerIdentity, index: int, render: RenderSettings
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
            # Clients write to the master; replicas serve through it.
            "selector": {
                **selector,
                "statefulset.kubernetes.io/pod-name": master_pod_name(broker.name, index),
            },
            "ports": [{"name": "grpc", "port": CLIENT_PORT, "targetPort": "grpc"}],
        },
    }
    pod_spec = _pod_spec(spec, broker, index, render)
    template_labels = dict(labels)
    stateful_set = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(name),
        "spec": {
            "serviceName": headless_service_name(broker.name, index),
            "replicas": spec.replicas_per_group,
            "selector": {"matchLabels": dict(selector)},
            # Rolling updates go from the highest ordinal down: the replicas restart
            # before their master (ordinal 0), one at a time, each waiting for readiness.
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
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
    return GroupManifests(index, name, config_map, headless, client, stateful_set, budget)


def render_broker(
    spec: BrokerSpec, broker: BrokerIdentity, render: RenderSettings | None = None
) -> list[GroupManifests]:
    """Every child object of the Broker, group by group."""
    render = render or RenderSettings()
    return [render_group(spec, broker, index, render) for index in range(spec.groups)]


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


def _pod_spec(
    spec: BrokerSpec, broker: BrokerIdentity, index: int, render: RenderSettings
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
            {"name": "SKIFF_POD_NAME", "value": "$(POD_NAME)"},
            {"name": "SKIFF_ADVERTISE", "value": f"$(POD_IP):{CLIENT_PORT}"},
        ],
        "ports": [
            {"name": "grpc", "containerPort": CLIENT_PORT, "protocol": "TCP"},
            {"name": "ha", "containerPort": HA_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "tcpSocket": {"port": "grpc"},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "tcpSocket": {"port": "grpc"},
            # Recovery after a crash scans the commit log before the port opens.
            "initialDelaySeconds": 60,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
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
    if spec.resources:
        container["resources"] = dict(spec.resources)
    pod: dict[str, Any] = {
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
