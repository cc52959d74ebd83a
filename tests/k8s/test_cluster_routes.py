"""One access point for a whole cluster: any broker routes to every group.

Two groups of one Broker, each with its Lease. An official producer and consumer
bootstrapped at group a's broker send to and receive from the queues of both
groups; the topic's queue count on each group is that group's own. Clients that
come in on the external port are handed the groups' external addresses from the
``<cluster>-endpoints`` ConfigMap. A 4.x client's remoting routes, asked of any broker,
even a replica, name each group's master (from its Lease) at its remoting port as
broker id 0 and the replicas as read-only ids from 1.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from tests.k8s.cluster_members import (
    CLUSTER,
    CLUSTER_DEADLINE_S,
    TOPIC,
    Cluster,
    pull_every_group,
    route,
)
from tests.support.kube_control_plane import ControlPlane, free_port
from tests.support.remoting_client import remoting_call
from tests.support.waiting import wait_for

from skiff_broker.remoting.codes import RequestCode


@pytest.fixture
def cluster(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Cluster]:
    members = Cluster(control_plane, tmp_path)
    try:
        yield members
    finally:
        members.cleanup()


@contextlib.contextmanager
def producer(endpoint: str) -> Iterator[Producer]:
    client = Producer(ClientConfiguration(endpoint, Credentials()), (TOPIC,))
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def send(endpoint: str, count: int, prefix: bytes) -> dict[str, bytes]:
    sent = {}
    with producer(endpoint) as client:
        for number in range(count):
            message = Message()
            message.topic = TOPIC
            message.body = prefix + b"-%d" % number
            sent[client.send(message).message_id] = message.body
    return sent


def receive_all(endpoint: str, wanted: set[str]) -> dict[str, bytes]:
    received: dict[str, bytes] = {}
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()), "auditors", {TOPIC: FilterExpression()}, 2
    )
    consumer.startup()
    try:

        def done() -> bool:
            for message in consumer.receive(32, 30) or []:
                received[message.message_id] = message.body
                consumer.ack(message)
            return wanted <= received.keys()

        wait_for(
            done, "every message through one bootstrap endpoint", deadline_s=CLUSTER_DEADLINE_S
        )
    finally:
        consumer.shutdown()
    return received


def test_one_bootstrap_endpoint_reaches_the_queues_of_every_group(cluster: Cluster) -> None:
    a = cluster.start("orders-a", "orders-a-0", mode="ASYNC", queues=4)
    b = cluster.start("orders-b", "orders-b-0", mode="ASYNC", queues=2)
    cluster.wait_master("orders-a", "orders-a-0")
    cluster.wait_master("orders-b", "orders-b-0")

    def both_groups() -> dict[str, set[int]]:
        queues: dict[str, set[int]] = {}
        for queue in route(a.endpoint):
            queues.setdefault(queue.broker.name, set()).add(queue.id)
        return queues if len(queues) == 2 else {}

    queues = wait_for(both_groups, "routes naming both groups", deadline_s=CLUSTER_DEADLINE_S)
    # Each group's own queue count, asked of that group.
    assert queues == {"orders-a": {0, 1, 2, 3}, "orders-b": {0, 1}}
    ports = {q.broker.name: q.broker.endpoints.addresses[0].port for q in route(a.endpoint)}
    assert ports == {
        "orders-a": int(a.endpoint.rpartition(":")[2]),
        "orders-b": int(b.endpoint.rpartition(":")[2]),
    }

    sent = send(a.endpoint, 120, b"order")
    on_a, on_b = pull_every_group([(a.endpoint, 4), (b.endpoint, 2)], set(sent))
    assert on_a and on_b, "the producer used only one group"
    assert on_a.keys() | on_b.keys() == sent.keys()

    received = receive_all(a.endpoint, set(sent))
    assert {m: received[m] for m in sent} == sent


def test_clients_on_the_external_port_get_the_external_addresses(cluster: Cluster) -> None:
    external = {"orders-a": free_port(), "orders-b": free_port()}
    cluster.plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{CLUSTER}-endpoints", "namespace": cluster.namespace},
                "data": {group: f"127.0.0.1:{port}" for group, port in external.items()},
            }
        ]
    )
    brokers = {
        group: cluster.start(
            group,
            f"{group}-0",
            "--external-listen",
            f"127.0.0.1:{external[group]}",
            mode="ASYNC",
        )
        for group in external
    }
    for group in external:
        cluster.wait_master(group, f"{group}-0")
    entry = f"127.0.0.1:{external['orders-a']}"

    def external_ports() -> dict[str, int]:
        found = {q.broker.name: q.broker.endpoints.addresses[0].port for q in route(entry)}
        return found if len(found) == 2 else {}

    assert (
        wait_for(external_ports, "routes on the external port", deadline_s=CLUSTER_DEADLINE_S)
        == external
    )
    # The internal port keeps handing the internal addresses.
    internal = {
        q.broker.name: q.broker.endpoints.addresses[0].port
        for q in route(brokers["orders-a"].endpoint)
    }
    assert internal["orders-a"] == int(brokers["orders-a"].endpoint.rpartition(":")[2])

    sent = send(entry, 60, b"from-outside")
    received = receive_all(entry, set(sent))
    assert {m: received[m] for m in sent} == sent


def remoting_addresses(endpoint: str, code: int, **fields: object) -> dict[str, dict[str, str]]:
    answer = remoting_call(endpoint, code, **fields)
    assert answer.code == 0, answer.remark
    body = json.loads(answer.body)
    datas = body["brokerDatas"] if "brokerDatas" in body else body["brokerAddrTable"].values()
    return {data["brokerName"]: data["brokerAddrs"] for data in datas}


def test_remoting_routes_name_each_groups_master_and_replicas_from_the_leases(
    cluster: Cluster,
) -> None:
    a0 = cluster.start("orders-a", "orders-a-0", mode="ASYNC")
    lease = cluster.wait_master("orders-a", "orders-a-0")
    # The master publishes its remoting port beside its client endpoint.
    assert lease["remoting_endpoint"] == a0.remoting_endpoint
    a1 = cluster.start("orders-a", "orders-a-1", mode="ASYNC")
    b0 = cluster.start("orders-b", "orders-b-0", mode="ASYNC", queues=2)
    cluster.wait_master("orders-b", "orders-b-0")
    wanted = {
        "orders-a": {"0": a0.remoting_endpoint, "1": a1.remoting_endpoint},
        "orders-b": {"0": b0.remoting_endpoint},
    }

    def routed() -> bool:
        # Each broker reads the Leases on its own schedule: every one must name them all.
        return all(
            remoting_addresses(b.remoting_endpoint, code, topic=TOPIC) == wanted
            for b in (a0, a1, b0)
            for code in (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO)
        )

    # Asked of the replica too: it names its master at id 0 and itself at id 1.
    wait_for(routed, "remoting routes naming both groups", deadline_s=CLUSTER_DEADLINE_S)
    answer = remoting_call(a0.remoting_endpoint, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
    queues = {q["brokerName"]: q for q in json.loads(answer.body)["queueDatas"]}
    assert queues["orders-a"]["writeQueueNums"] == 4 and queues["orders-b"]["writeQueueNums"] == 2
    assert {q["perm"] for q in queues.values()} == {6}

    # Its master gone and the Lease passed on, group a is named at its new master (in
    # between it may be left out, or named at its replica only).
    cluster.wait_master("orders-a", "orders-a-0", in_sync={"orders-a-0", "orders-a-1"})
    a0.stop()
    cluster.wait_master("orders-a", "orders-a-1")
    wait_for(
        lambda: (
            remoting_addresses(
                b0.remoting_endpoint, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC
            ).get("orders-a")
            == {"0": a1.remoting_endpoint}
        ),
        "the new master in the remoting route",
        deadline_s=CLUSTER_DEADLINE_S,
    )


def test_4x_clients_on_the_external_remoting_port_get_the_external_remoting_addresses(
    cluster: Cluster,
) -> None:
    external = {"orders-a": free_port(), "orders-b": free_port()}
    cluster.plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{CLUSTER}-endpoints", "namespace": cluster.namespace},
                "data": {
                    f"{group}.remoting": f"127.0.0.1:{port}" for group, port in external.items()
                },
            }
        ]
    )
    brokers = {
        group: cluster.start(
            group,
            f"{group}-0",
            "--remoting-external-listen",
            f"127.0.0.1:{external[group]}",
            mode="ASYNC",
        )
        for group in external
    }
    for group in external:
        cluster.wait_master(group, f"{group}-0")
    outside = {group: {"0": f"127.0.0.1:{port}"} for group, port in external.items()}
    entry = f"127.0.0.1:{external['orders-a']}"

    def routed() -> bool:
        return remoting_addresses(entry, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC) == outside

    wait_for(routed, "external remoting routes naming both groups", deadline_s=CLUSTER_DEADLINE_S)
    # The internal remoting port keeps naming the internal addresses.
    inside = remoting_addresses(
        brokers["orders-a"].remoting_endpoint, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC
    )
    assert inside == {group: {"0": b.remoting_endpoint} for group, b in brokers.items()}
