"""Names of a Broker's children, shared by rendering, status and the Topic handler."""

from __future__ import annotations

import string

# gRPC port clients and the admin service use (RocketMQ 5 proxy's gRPC port).
CLIENT_PORT = 8081
# Replication port of a master (RocketMQ's HA port: listen port + 1 of 10911).
HA_PORT = 10912
# Second client port, for clients outside the cluster: routes name external addresses.
EXTERNAL_PORT = 8082
# RocketMQ's remoting protocol (4.x clients, mqadmin): the RocketMQ 5 proxy's remoting port.
REMOTING_PORT = 8080
# The pods' second remoting port, behind the external Service's remoting port (REMOTING_PORT).
EXTERNAL_REMOTING_PORT = 8083
# The Service port (and pod port) name of the remoting protocol.
REMOTING_PORT_NAME = "remoting"
# Prometheus /metrics of every broker (RocketMQ 5's metrics port).
METRICS_PORT = 5557
DATA_DIR = "/var/lib/skiff"

LABEL_BROKER = "skiff.io/broker"
LABEL_GROUP = "skiff.io/group"
# Set by each broker on its own pod; the group's client Service selects the master.
LABEL_ROLE = "skiff.io/role"
ROLE_MASTER = "master"
# On the Leases the brokers create (one per group, named after the group).
LABEL_CLUSTER = "skiff.io/cluster"
MANAGED_BY = "skiff-operator"


# Key of the replication secret in the Broker's Secret (ha_secret_name).
HA_SECRET_KEY = "secret"


def ha_secret_name(broker: str) -> str:
    """The Secret holding the replication secret every pod of the Broker shares."""
    return f"{broker}-replication"


# Keys of the Broker's admin Secret (admin_secret_name): the super user's keys, and both
# as ACCESS:SECRET, the form the pods read into SKIFF_AUTH_INIT_USER.
ADMIN_ACCESS_KEY = "accessKey"
ADMIN_SECRET_KEY = "secretKey"
ADMIN_USER_KEY = "user"


def admin_secret_name(broker: str) -> str:
    """The Secret holding the super user every pod of the Broker starts with (auth on)."""
    return f"{broker}-admin"


# Where the pods mount the Secret with their certificate (tls.crt, tls.key, ca.crt).
TLS_MOUNT_PATH = "/etc/skiff/tls"


def tls_secret_name(broker: str) -> str:
    """The Secret with the brokers' certificate, made by the operator or by cert-manager."""
    return f"{broker}-tls"


def ca_secret_name(broker: str) -> str:
    """The operator's own CA for the Broker (ca.crt, ca.key), when it manages the certificate."""
    return f"{broker}-ca"


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


def external_service_name(broker: str, index: int) -> str:
    return f"{group_name(broker, index)}-external"


def network_policy_name(broker: str, index: int) -> str:
    """The group's NetworkPolicy (its own kind, so it may share the group's name)."""
    return group_name(broker, index)


def lease_name(broker: str, index: int) -> str:
    """The group's Lease, created by its brokers (the contract names it after the group)."""
    return group_name(broker, index)


def bootstrap_service_name(broker: str) -> str:
    """The Service over every pod of the Broker: any broker answers routes for all groups."""
    return broker


def broker_service_account_name(broker: str) -> str:
    """The brokers' ServiceAccount, and the name of their Role and RoleBinding."""
    return f"{broker}-broker"


def pod_monitor_name(broker: str) -> str:
    """The PodMonitor over every broker pod (its own kind, so it may share the name)."""
    return broker


def endpoints_config_map_name(broker: str) -> str:
    """Group name -> external ``host:port``, read by the brokers."""
    return f"{broker}-endpoints"


def group_index(suffix: str) -> int:
    """The inverse of :func:`group_suffix`: "a" -> 0, "aa" -> 26."""
    index = 0
    for letter in suffix:
        index = index * 26 + (ord(letter) - ord("a") + 1)
    return index - 1


def client_service_dns_name(broker: str, index: int, namespace: str, cluster_domain: str) -> str:
    """The group's client Service, in front of whichever pod holds the group's Lease."""
    return f"{group_name(broker, index)}.{namespace}.svc.{cluster_domain}"


def bootstrap_service_dns_name(broker: str, namespace: str, cluster_domain: str) -> str:
    return f"{bootstrap_service_name(broker)}.{namespace}.svc.{cluster_domain}"


def external_remoting_key(group: str) -> str:
    """The ``<Broker>-endpoints`` entry naming ``group``'s external remoting address (the
    brokers read the same key: skiff_broker.cluster.routes.external_remoting_key)."""
    return f"{group}.remoting"
