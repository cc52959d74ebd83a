"""Real broker processes holding real Leases on the test API server, as a Broker's pods would.

Each test gets its own namespace with the brokers' RBAC as the operator renders it
(a ServiceAccount ``<cluster>-broker``, a Role naming the cluster's Leases, pods and
endpoints ConfigMap, a RoleBinding) and a kubeconfig holding that ServiceAccount's token from the
TokenRequest API, so every Lease and pod call a broker makes is checked by RBAC
as in a cluster. No kubelet runs: each broker is a local process whose Pod
object exists (so it can label itself) but never starts.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, start_broker
from tests.support.kube_control_plane import ControlPlane, write_kubeconfig
from tests.support.waiting import wait_for

from skiff_broker.endpoints import endpoints_of
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_operator.broker_spec import BrokerSpec
from skiff_operator.rendering import BrokerIdentity, render_cluster

CLUSTER = "orders"
TOPIC = "payments"
QUEUES = 4
CLUSTER_DEADLINE_S = 120.0
# Short heartbeats so that a lost replication peer is noticed quickly.
FAST_HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "5")
# The Broker whose brokers' Role the tests run under: groups orders-a and orders-b, pods
# orders-<group>-0 to -2.
RENDERED_LAYOUT = {"groups": 2, "replicasPerGroup": 3}

_namespaces = itertools.count()


def broker_rbac(namespace: str) -> list[dict]:
    """The brokers' ServiceAccount, Role and RoleBinding exactly as the operator renders
    them for a Broker of two groups of three pods (every pod name the tests use).

    Without the owner reference: no Broker object exists here.
    """
    identity = BrokerIdentity(CLUSTER, namespace, "00000000-0000-0000-0000-000000000000")
    rendered = render_cluster(identity, BrokerSpec.from_manifest(RENDERED_LAYOUT))
    access = [rendered.service_account, rendered.role, rendered.role_binding]
    for manifest in access:
        del manifest["metadata"]["ownerReferences"]
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, *access]


class Cluster:
    """The brokers of one test; every one still running is killed at the end."""

    def __init__(self, plane: ControlPlane, tmp_path: Path, lease_duration: int = 6) -> None:
        self.plane = plane
        self.tmp_path = tmp_path
        self.lease_duration = lease_duration
        self.namespace = f"cluster-{os.getpid()}-{next(_namespaces)}"
        plane.apply(broker_rbac(self.namespace))
        token = plane.kubectl(
            "create", "token", f"{CLUSTER}-broker", "-n", self.namespace, "--duration", "2h"
        ).stdout.strip()
        self.kubeconfig = write_kubeconfig(
            tmp_path / "broker.kubeconfig", plane.server, plane.ca_path, token, "broker"
        )
        self.brokers: dict[str, BrokerProcess] = {}
        self.groups: dict[str, str] = {}

    def start(
        self, group: str, pod: str, *extra: str, mode: str = "SYNC", queues: int = QUEUES
    ) -> BrokerProcess:
        """Start (or restart, on the same data) the broker of ``pod`` in ``group``."""
        home = self.tmp_path / pod
        if not home.exists():
            home.mkdir()
            create_topics(data_dir_of(home), TopicConfig(TOPIC, queues, queues))
            self.plane.apply(
                [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": pod,
                            "namespace": self.namespace,
                            "labels": {"skiff.io/cluster": CLUSTER, "skiff.io/group": group},
                        },
                        "spec": {
                            "serviceAccountName": f"{CLUSTER}-broker",
                            "automountServiceAccountToken": False,
                            "containers": [{"name": "broker", "image": "skiff:test"}],
                        },
                    }
                ]
            )
        broker = start_broker(
            home,
            *("--role", "LEASE", "--cluster", CLUSTER, "--namespace", self.namespace),
            *("--pod-name", pod, "--kubeconfig", str(self.kubeconfig)),
            *("--broker-name", group, "--lease-duration", str(self.lease_duration)),
            *("--replication-mode", mode, *FAST_HEARTBEATS, *extra),
        )
        self.brokers[pod] = broker
        self.groups[pod] = group
        return broker

    def lease(self, group: str) -> dict:
        lease = self.plane.get("lease", group, self.namespace) or {}
        notes = (lease.get("metadata") or {}).get("annotations") or {}
        spec = lease.get("spec") or {}
        return {
            "holder": spec.get("holderIdentity") or "",
            "epoch": int(notes.get("skiff.io/epoch") or 0),
            "in_sync": json.loads(notes.get("skiff.io/in-sync") or "[]"),
            "endpoint": notes.get("skiff.io/endpoint", ""),
            "remoting_endpoint": notes.get("skiff.io/remoting-endpoint", ""),
            "replicas": json.loads(notes.get("skiff.io/replicas") or "{}"),
        }

    def role_label(self, pod: str) -> str:
        found = self.plane.get("pod", pod, self.namespace) or {}
        return ((found.get("metadata") or {}).get("labels") or {}).get("skiff.io/role", "")

    def wait_master(self, group: str, pod: str, *, in_sync: set[str] | None = None) -> dict:
        """Until ``pod`` holds the group's Lease (and publishes ``in_sync``, if given)."""

        def ready() -> dict | None:
            lease = self.lease(group)
            if lease["holder"] != pod or not lease["endpoint"]:
                return None
            if in_sync is not None and set(lease["in_sync"]) != in_sync:
                return None
            return lease

        return wait_for(
            ready, f"{pod} to master {group} (in sync: {in_sync})", deadline_s=CLUSTER_DEADLINE_S
        )

    def cleanup(self) -> None:
        for broker in self.brokers.values():
            if broker.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(broker.proc.pid, signal.SIGCONT)
                broker.kill()
        self.plane.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)


def route(endpoint: str, topic: str = TOPIC) -> list[pb.MessageQueue]:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        # As the official clients do: the request names the endpoint they bootstrapped at.
        request = spb.QueryRouteRequest(
            topic=pb.Resource(name=topic), endpoints=endpoints_of(endpoint)
        )
        response = stub.QueryRoute(request, timeout=30)
    assert response.status.code == pb.Code.OK, response.status
    return list(response.message_queues)


def pull_all(endpoint: str, topic: str = TOPIC, queues: int = QUEUES) -> dict[str, bytes]:
    """Every message of ``topic`` on the broker at ``endpoint``, by message id (raw pull)."""
    return {m: body for m, (body, _, _) in pull_placed(endpoint, topic, queues).items()}


def pull_every_group(
    groups: list[tuple[str, int]], sent: set[str], topic: str = TOPIC
) -> list[dict[str, bytes]]:
    """``pull_all`` of each (endpoint, queue count), once every message of ``sent`` is on
    one of them: a message is readable once its broker has dispatched it, which can be
    just after its acknowledgement."""

    def pulled() -> list[dict[str, bytes]] | None:
        found = [pull_all(endpoint, topic, queues) for endpoint, queues in groups]
        return found if set().union(*found) >= sent else None

    return wait_for(pulled, "every acknowledged message to be readable", CLUSTER_DEADLINE_S)


def pull_placed(
    endpoint: str, topic: str = TOPIC, queues: int = QUEUES
) -> dict[str, tuple[bytes, int, int]]:
    """Message id → (body, queue id, queue offset) of every message of ``topic``."""
    found: dict[str, tuple[bytes, int, int]] = {}
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for queue_id in range(queues):
            offset = 0
            while True:
                request = spb.PullMessageRequest(
                    group=pb.Resource(name="audit"),
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id),
                    offset=offset,
                    batch_size=256,
                    filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                )
                batch = []
                for frame in stub.PullMessage(request, timeout=30):
                    content = frame.WhichOneof("content")
                    if content == "message":
                        batch.append(frame.message)
                    elif content == "next_offset":
                        offset = frame.next_offset
                if not batch:
                    break
                found.update(
                    (
                        m.system_properties.message_id,
                        (m.body, queue_id, m.system_properties.queue_offset),
                    )
                    for m in batch
                )
    return found
