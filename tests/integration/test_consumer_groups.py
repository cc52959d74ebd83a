"""Consumer-group tools (list, describe, reset, delete) against a real broker process.

One broker serves the module; each test uses its own topic and groups. A live
consumer is made the way official clients announce themselves: a Heartbeat as a
SIMPLE_CONSUMER of the group, or the official Python client's SimpleConsumer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess

from skiff_broker.client.admin import AdminClient, ResetTo
from skiff_broker.client.errors import FailedPrecondition, InvalidArgument, NotFound
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_operator.group_drain import unconsumed_messages

broker = module_broker("groups")


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[AdminClient]:
    with AdminClient(broker.endpoint) as client:
        yield client


@pytest.fixture
def messaging(broker: BrokerProcess) -> Iterator[MessagingClient]:
    with MessagingClient(broker.endpoint) as client:
        yield client


def send(messaging: MessagingClient, topic: str, *bodies: str) -> None:
    messaging.send([OutgoingMessage(topic, body.encode()) for body in bodies])


def consume(messaging: MessagingClient, group: str, topic: str, count: int) -> list[str]:
    """Receive and acknowledge up to ``count`` messages; their bodies."""
    bodies: list[str] = []
    while len(bodies) < count:
        batch = messaging.receive(group, topic, max_messages=count - len(bodies), wait_s=1)
        if not batch:
            break
        messaging.ack(group, topic, batch)
        bodies.extend(m.body.decode() for m in batch)
    return bodies


def heartbeat_as_consumer(broker: BrokerProcess, group: str) -> None:
    with grpc.insecure_channel(broker.endpoint) as channel:
        reply = service_pb2_grpc.MessagingServiceStub(channel).Heartbeat(
            spb.HeartbeatRequest(
                group=pb.Resource(name=group), client_type=pb.ClientType.SIMPLE_CONSUMER
            ),
            metadata=[("x-mq-client-id", f"test-consumer-of-{group}")],
            timeout=30,
        )
    assert reply.status.code == pb.Code.OK


def test_list_and_describe_show_what_a_group_has_left(admin, messaging):
    admin.create_topic("cg-lag", read_queues=2)
    send(messaging, "cg-lag", *(f"m{i}" for i in range(10)))
    assert len(consume(messaging, "cg-lag-readers", "cg-lag", 4)) == 4

    [listed] = [g for g in admin.list_consumer_groups() if g.group == "cg-lag-readers"]
    assert listed.topics == ("cg-lag",)
    assert listed.total_lag == 6
    assert listed.live_consumers == 0
    assert [g.group for g in admin.list_consumer_groups(topic="cg-lag")] == ["cg-lag-readers"]

    described = admin.describe_consumer_group("cg-lag-readers")
    [topic] = described.topics
    assert topic.topic == "cg-lag"
    assert topic.total_lag == 6
    assert sum(q.max_offset for q in topic.queues) == 10
    # A queue the group never popped from has no offset (-1).
    assert sum(max(q.consumer_offset, 0) for q in topic.queues) == 4
    assert all(q.in_flight == 0 for q in topic.queues)
    assert all(q.last_commit_time > 0 for q in topic.queues if q.consumer_offset > 0)

    with pytest.raises(NotFound, match="skiff group list"):
        admin.describe_consumer_group("cg-never-seen")


def test_a_drain_counts_what_the_groups_that_consumed_a_topic_have_left(broker, admin, messaging):
    # The operator's drain finds the groups through the group list, not an error's text.
    topic = admin.create_topic("cg-drain", read_queues=1)
    send(messaging, "cg-drain", "a", "b", "c")
    # Nobody has read it: every message it holds counts.
    assert unconsumed_messages(admin, topic) == 3
    # A live consumer that has committed nothing has not read anything either.
    heartbeat_as_consumer(broker, "cg-drain-watchers")
    assert unconsumed_messages(admin, topic) == 3
    assert len(consume(messaging, "cg-drain-readers", "cg-drain", 2)) == 2
    assert unconsumed_messages(admin, topic) == 1


def test_in_flight_deliveries_show_until_acknowledged(admin, messaging):
    admin.create_topic("cg-inflight", read_queues=1)
    send(messaging, "cg-inflight", "a", "b", "c")
    received = []
    while len(received) < 2:  # one receive may see part of what was just sent
        received += messaging.receive(
            "cg-inflight-readers", "cg-inflight", max_messages=2 - len(received), wait_s=1
        )
    [queue] = admin.describe_consumer_group("cg-inflight-readers").topics[0].queues
    assert (queue.in_flight, queue.invisible) == (2, 2)
    assert (queue.consumer_offset, queue.next_offset, queue.lag) == (0, 2, 3)
    messaging.ack("cg-inflight-readers", "cg-inflight", received)
    [queue] = admin.describe_consumer_group("cg-inflight-readers").topics[0].queues
    assert (queue.in_flight, queue.consumer_offset, queue.lag) == (0, 2, 1)


def test_reset_to_earliest_makes_the_group_read_everything_again(admin, messaging):
    admin.create_topic("cg-replay", read_queues=2)
    send(messaging, "cg-replay", *(f"r{i}" for i in range(6)))
    assert len(consume(messaging, "cg-replay-readers", "cg-replay", 6)) == 6

    preview = admin.reset_consumer_group(
        "cg-replay-readers", "cg-replay", ResetTo.EARLIEST, dry_run=True
    )
    # A queue the group never read has no offset (-1).
    assert sum(max(q.old_offset, 0) for q in preview) == 6
    assert all(q.new_offset == 0 for q in preview)
    assert admin.describe_consumer_group("cg-replay-readers").topics[0].total_lag == 0

    moved = admin.reset_consumer_group("cg-replay-readers", "cg-replay", ResetTo.EARLIEST)
    assert moved == preview
    assert admin.describe_consumer_group("cg-replay-readers").topics[0].total_lag == 6
    again = consume(messaging, "cg-replay-readers", "cg-replay", 6)
    assert sorted(again) == [f"r{i}" for i in range(6)]

    admin.reset_consumer_group("cg-replay-readers", "cg-replay", ResetTo.LATEST)
    assert consume(messaging, "cg-replay-readers", "cg-replay", 1) == []


def test_reset_by_time_rereads_only_what_was_stored_since(admin, messaging):
    admin.create_topic("cg-time", read_queues=2)
    send(messaging, "cg-time", "old-1", "old-2", "old-3")
    time.sleep(0.05)  # store timestamps are in milliseconds: a clear boundary
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    send(messaging, "cg-time", "new-1", "new-2")
    assert len(consume(messaging, "cg-time-readers", "cg-time", 5)) == 5

    admin.reset_consumer_group(
        "cg-time-readers", "cg-time", ResetTo.TIMESTAMP, timestamp_ms=boundary
    )
    assert sorted(consume(messaging, "cg-time-readers", "cg-time", 5)) == ["new-1", "new-2"]


def test_reset_to_an_offset_is_checked_and_can_be_limited_to_queues(admin, messaging):
    admin.create_topic("cg-offset", read_queues=2)
    send(messaging, "cg-offset", "a", "b", "c", "d")
    with pytest.raises(InvalidArgument, match="outside the queue's stored range"):
        admin.reset_consumer_group("cg-offset-readers", "cg-offset", ResetTo.OFFSET, offset=99)
    with pytest.raises(InvalidArgument, match="out of range"):
        admin.reset_consumer_group("cg-offset-readers", "cg-offset", ResetTo.LATEST, queue_ids=[7])
    [held] = [q.queue_id for q in admin.queue_offsets("cg-offset") if q.max_offset == 4]
    [moved] = admin.reset_consumer_group(
        "cg-offset-readers", "cg-offset", ResetTo.OFFSET, offset=1, queue_ids=[held]
    )
    assert (moved.queue_id, moved.old_offset, moved.new_offset) == (held, -1, 1)
    queues = admin.describe_consumer_group("cg-offset-readers").topics[0].queues
    assert {q.queue_id: q.consumer_offset for q in queues} == {held: 1, 1 - held: -1}


def test_live_consumers_stop_a_reset_or_delete_unless_forced(broker, admin, messaging):
    admin.create_topic("cg-live", read_queues=1)
    send(messaging, "cg-live", "x")
    assert consume(messaging, "cg-live-readers", "cg-live", 1) == ["x"]
    heartbeat_as_consumer(broker, "cg-live-readers")

    [listed] = [g for g in admin.list_consumer_groups() if g.group == "cg-live-readers"]
    assert listed.live_consumers == 1
    consumers = admin.describe_consumer_group("cg-live-readers").consumers
    assert [(c.client_id, c.client_type) for c in consumers] == [
        ("test-consumer-of-cg-live-readers", "SIMPLE_CONSUMER")
    ]
    with pytest.raises(FailedPrecondition, match="1 live consumer"):
        admin.reset_consumer_group("cg-live-readers", "cg-live", ResetTo.EARLIEST)
    with pytest.raises(FailedPrecondition, match="live consumer"):
        admin.delete_consumer_group("cg-live-readers")
    # A dry run changes nothing, so it is answered.
    [preview] = admin.reset_consumer_group(
        "cg-live-readers", "cg-live", ResetTo.EARLIEST, dry_run=True
    )
    assert (preview.old_offset, preview.new_offset) == (1, 0)

    admin.reset_consumer_group("cg-live-readers", "cg-live", ResetTo.EARLIEST, force=True)
    assert consume(messaging, "cg-live-readers", "cg-live", 1) == ["x"]
    assert admin.delete_consumer_group("cg-live-readers", force=True).topics == ("cg-live",)


def test_delete_removes_the_group_and_it_starts_over(admin, messaging):
    admin.create_topic("cg-gone", read_queues=1)
    send(messaging, "cg-gone", "p", "q")
    assert len(consume(messaging, "cg-gone-readers", "cg-gone", 2)) == 2

    deleted = admin.delete_consumer_group("cg-gone-readers")
    assert deleted.topics == ("cg-gone",)
    assert deleted.kept_dlq_topic == ""
    assert "cg-gone-readers" not in {g.group for g in admin.list_consumer_groups()}
    with pytest.raises(NotFound, match="nothing to delete"):
        admin.delete_consumer_group("cg-gone-readers")
    # A group of that name is new again: it starts at the oldest message.
    assert sorted(consume(messaging, "cg-gone-readers", "cg-gone", 2)) == ["p", "q"]


def test_an_official_consumer_is_live_until_it_shuts_down(broker, admin, messaging):
    admin.create_topic("cg-official", read_queues=2)
    send(messaging, "cg-official", "hello")
    config = ClientConfiguration(broker.endpoint, Credentials())
    consumer = SimpleConsumer(config, "cg-official-readers", {"cg-official": FilterExpression()}, 1)
    consumer.startup()
    try:
        for received in consumer.receive(16, 30):
            consumer.ack(received)
        [listed] = [g for g in admin.list_consumer_groups() if g.group == "cg-official-readers"]
        assert (listed.topics, listed.live_consumers, listed.total_lag) == (("cg-official",), 1, 0)
        [live] = admin.describe_consumer_group("cg-official-readers").consumers
        assert (live.client_type, live.topics) == ("SIMPLE_CONSUMER", ("cg-official",))
        with pytest.raises(FailedPrecondition, match="stop them"):
            admin.reset_consumer_group("cg-official-readers", "cg-official", ResetTo.EARLIEST)
    finally:
        consumer.shutdown()
    # Shutting down tells the broker it is gone.
    admin.reset_consumer_group("cg-official-readers", "cg-official", ResetTo.EARLIEST)
