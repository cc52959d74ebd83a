"""Names of a Broker's children, shared by rendering, status and the Topic handler."""

from __future__ import annotations

import string

# gRPC port clients and the admin service use (RocketMQ 5 proxy's gRPC port).
CLIENT_PORT = 8081
# Replication port of a master (RocketMQ's HA port: listen port + 1 of 10911).
HA_PORT = 10912
DATA_DIR = "/var/lib/skiff"

LABEL_BROKER = "skiff.io/broker"
LABEL_GROUP = "skiff.io/group"
MANAGED_BY = "skiff-operator"


def group_suffix(index: int) -> str:
    """0 -> "a", 25 -> "z", 26 -> "aa": RocketMQ names its broker groups broker-a, broker-b."""
    letters = string.ascii_lowercase
    suffix = ""
    index += 1
    while index:
        index, remainder = divmod(index - 1, 26)
        suffix = letters[remainder] + suffix
    return suffix


def group_name(broker: str, index: int) -> str:
    """The group's StatefulSet, client Service and broker name (``--broker-name``)."""
    return f"{broker}-{group_suffix(index)}"


def headless_service_name(broker: str, index: int) -> str:
    return f"{group_name(broker, index)}-pods"


def settings_config_map_name(broker: str, index: int) -> str:
    return f"{group_name(broker, index)}-settings"


def master_pod_name(broker: str, index: int) -> str:
    return f"{group_name(broker, index)}-0"


def master_dns_name(broker: str, index: int, namespace: str, cluster_domain: str) -> str:
    """The master pod's stable name through the group's headless Service."""
    return (
        f"{master_pod_name(broker, index)}.{headless_service_name(broker, index)}."
        f"{namespace}.svc.{cluster_domain}"
    )


def client_service_dns_name(broker: str, index: int, namespace: str, cluster_domain: str) -> str:
    return f"{group_name(broker, index)}.{namespace}.svc.{cluster_domain}"
