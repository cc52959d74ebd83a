"""Roles and routes outside Kubernetes, with real broker processes.

A forced promotion is refused while the master still answers (it would make two
masters). A broker told to follow a master of an older epoch than its own
refuses, cuts nothing and says what to do. With ``--cluster-peers`` any broker
answers a route with the topic's queues on every group, also when every client port
enforces TLS and brokers verify each other against the cluster's CA (``--tls-ca``);
a broker whose certificate comes from another CA is left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc
from tests.k8s.cluster_members import CLUSTER_DEADLINE_S, pull_all, pull_every_group, route
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, start_broker
from tests.support.certificate_authority import CertificateAuthority
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.channels import ClientTls, channel
from skiff_broker.client.errors import FailedPrecondition
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.producer import BatchingProducer
from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.metadata.topic_table import TopicConfig

TOPIC = "payments"
FAST_HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "5")


class Brokers:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.running: list[BrokerProcess] = []

    def start(self, name: str, *args: str, queues: int = 4) -> BrokerProcess:
        home = self.tmp_path / name
        if not home.exists():
            home.mkdir()
            create_topics(data_dir_of(home), TopicConfig(TOPIC, queues, queues))
        # The brokers of one group share its name (a0 and a1 are group a); replication
        # peers prove the group's secret for that name.
        group = name.rstrip("0123456789")
        broker = start_broker(home, "--broker-name", group, *FAST_HEARTBEATS, *args)
        self.running.append(broker)
        return broker

    def cleanup(self) -> None:
        for broker in self.running:
            broker.kill()


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Brokers]:
    started = Brokers(tmp_path)
    try:
        yield started
    finally:
        started.cleanup()


def send(endpoint: str, count: int, prefix: bytes) -> dict[str, bytes]:
    with MessagingClient(endpoint, timeout=30) as client:
        messages = [OutgoingMessage(TOPIC, prefix + b"-%d" % i) for i in range(count)]
        receipts = list(client.send_each(messages, in_flight=8))
    return {r.message_id: m.body for r, m in zip(receipts, messages, strict=True)}


def info(endpoint: str):  # type: ignore[no-untyped-def]
    with AdminClient(endpoint) as admin:
        return admin.broker_info()


def test_forced_promotion_is_refused_while_the_master_answers(brokers: Brokers) -> None:
    master = brokers.start("a0")
    replica = brokers.start("a1", "--role", "REPLICA", "--master-address", master.ha_endpoint)
    wait_for(
        lambda: info(replica.endpoint).replica_in_sync,
        "the replica to follow",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    with (
        AdminClient(replica.endpoint) as admin,
        pytest.raises(FailedPrecondition, match="still answers"),
    ):
        admin.promote(force=True)
    # Still one master: the replica takes no writes.
    assert info(replica.endpoint).role == "REPLICA"
    assert send(master.endpoint, 3, b"only-master")


def test_a_broker_refuses_to_follow_a_master_of_an_older_epoch(brokers: Brokers) -> None:
    old = brokers.start("a0")
    follower = brokers.start("a1", "--role", "REPLICA", "--master-address", old.ha_endpoint)
    shared = send(old.endpoint, 10, b"shared")
    wait_for(
        lambda: pull_all(follower.endpoint).keys() >= shared.keys(),
        "the replica to copy them",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    old_ha = old.ha_endpoint
    old.kill()
    with AdminClient(follower.endpoint) as admin:
        promoted = admin.promote()
    acknowledged = send(follower.endpoint, 5, b"promoted")
    # Restarted with its replica command, it stays master: a new term.
    follower.stop()
    follower = brokers.start("a1", "--role", "REPLICA", "--master-address", old_ha)
    assert info(follower.endpoint).epoch == promoted.epoch + 1
    follower.stop()

    # The role file is removed by hand, and the broker is pointed at the old master,
    # which came back as master of an older term.
    (follower.data_dir / "role").unlink()
    old = brokers.start("a0", "--ha-listen", old_ha)
    assert info(old.endpoint).epoch < promoted.epoch + 1
    follower = brokers.start("a1", "--role", "REPLICA", "--master-address", old.ha_endpoint)
    refusal = wait_for(
        lambda: [r["msg"] for r in follower.log_lines() if "older than this broker" in r["msg"]],
        "the refusal",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    assert "nothing was cut" in refusal[0] and "replica of this broker" in refusal[0]
    assert not any("diverged" in r["msg"] for r in follower.log_lines())
    assert pull_all(follower.endpoint).keys() >= (shared | acknowledged).keys()
    assert info(follower.endpoint).epoch == promoted.epoch + 1


def test_a_broker_ahead_of_its_master_in_the_same_term_cuts_nothing(brokers: Brokers) -> None:
    old = brokers.start("a0")
    follower = brokers.start("a1", "--role", "REPLICA", "--master-address", old.ha_endpoint)
    shared = send(old.endpoint, 10, b"shared")
    wait_for(
        lambda: pull_all(follower.endpoint).keys() >= shared.keys(),
        "the copy",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    old_ha = old.ha_endpoint
    old.kill()
    with AdminClient(follower.endpoint) as admin:
        admin.promote()
    acknowledged = send(follower.endpoint, 5, b"promoted")
    follower.stop()
    (follower.data_dir / "role").unlink()

    # The old master's restart begins a term with the same number at the same offset.
    old = brokers.start("a0", "--ha-listen", old_ha)
    follower = brokers.start("a1", "--role", "REPLICA", "--master-address", old.ha_endpoint)
    refusal = wait_for(
        lambda: [r["msg"] for r in follower.log_lines() if "both were master" in r["msg"]],
        "the refusal",
        deadline_s=CLUSTER_DEADLINE_S,
    )
    assert "nothing was cut" in refusal[0]
    assert not any("diverged" in r["msg"] for r in follower.log_lines())
    assert pull_all(follower.endpoint).keys() >= (shared | acknowledged).keys()


def test_cluster_peers_put_every_groups_queues_in_routes(brokers: Brokers) -> None:
    b = brokers.start("orders-b", queues=6)
    a = brokers.start("orders-a", "--cluster-peers", b.endpoint, queues=4)
    queues: dict[str, set[int]] = {}
    for queue in route(a.endpoint):
        queues.setdefault(queue.broker.name, set()).add(queue.id)
    assert queues == {"orders-a": {0, 1, 2, 3}, "orders-b": {0, 1, 2, 3, 4, 5}}

    # Skiff's batching producer, bootstrapped at one group, writes to both.
    async def produce() -> list[str]:
        receipts = []
        async with BatchingProducer(a.endpoint, linger_ms=0) as producer:
            for batch in range(20):
                receipts += await asyncio.gather(
                    *(producer.send(TOPIC, b"batched-%d-%d" % (batch, i)) for i in range(10))
                )
        return [r.message_id for r in receipts]

    sent = set(asyncio.run(produce()))
    on_a, on_b = pull_every_group([(a.endpoint, 4), (b.endpoint, 6)], sent, TOPIC)
    assert on_a and on_b, "the producer wrote to one group only"
    assert on_a.keys() | on_b.keys() == sent
    # A pull consumer reads its own group's queues from the broker it is given.
    with PullConsumer(a.endpoint) as consumer:
        assert consumer.queue_ids(TOPIC) == [0, 1, 2, 3]

    b.stop()
    # A peer that does not answer is left out once what was learned from it is stale.
    wait_for(
        lambda: {q.broker.name for q in route(a.endpoint)} == {"orders-a"},
        "the stopped group to leave the route",
        deadline_s=CLUSTER_DEADLINE_S,
    )


def groups_routed_over_tls(endpoint: str, ca: CertificateAuthority) -> set[str]:
    """The groups whose queues a route asked over verified TLS names."""
    with channel(endpoint, tls=ClientTls(enabled=True, ca_file=str(ca.ca_file))) as tls:
        request = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
        response = service_pb2_grpc.MessagingServiceStub(tls).QueryRoute(request, timeout=30)
    assert response.status.code == pb.Code.OK, response.status
    return {queue.broker.name for queue in response.message_queues}


def test_brokers_enforcing_tls_route_to_each_other_verified_by_the_cluster_ca(
    brokers: Brokers, tmp_path: Path
) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    enforcing = ("--tls-mode", "enforcing")
    b = brokers.start("orders-b", *enforcing, *ca.broker_args("b"), queues=6)
    a = brokers.start("orders-a", *enforcing, *ca.broker_args("a"), "--cluster-peers", b.endpoint)
    assert groups_routed_over_tls(a.endpoint, ca) == {"orders-a", "orders-b"}

    # A broker of another CA cannot verify b (nor b it): its routes name its own group only.
    foreign = CertificateAuthority(tmp_path / "foreign", name="foreign-ca")
    c = brokers.start(
        "orders-c", *enforcing, *foreign.broker_args("c"), "--cluster-peers", b.endpoint
    )
    assert groups_routed_over_tls(c.endpoint, foreign) == {"orders-c"}
