"""DELAY and TRANSACTION messages with the official rocketmq-python-client.

Real broker processes on 127.0.0.1, real gRPC, the official Producer and
SimpleConsumer. Restarts are a SIGTERM (clean) or a SIGKILL (crash) of the
broker process, then a new process on the same data directory.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker
from tests.support.official_client import receive_all, started_producer, started_simple_consumer
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import MessageType, TopicConfig

# Checks start once a half message is older than the broker's transaction timeout
# (6 s by default); a short interval asks right after that.
CHECK_INTERVAL_ARGS = ("--transaction-check-interval", "0.5")
# Generous: polls end as soon as their condition holds.
DEADLINE_S = 90.0
# How far ahead DELAY messages are scheduled: long enough that a message delivered
# at once would be caught, short enough for a quick test.
DELAY_S = 3

DELAY_TOPIC = "dt-delay"
COMMIT_TOPIC = "dt-commit"
ORPHAN_TOPIC = "dt-orphan"
AFTER_BAD_INPUT_TOPIC = "dt-after-bad-input"


def topics(*names_and_types: tuple[str, MessageType]) -> list[TopicConfig]:
    return [TopicConfig(name, 4, 4, message_type=kind) for name, kind in names_and_types]


broker = module_broker(
    "delay-transaction",
    *CHECK_INTERVAL_ARGS,
    topics=topics(
        (DELAY_TOPIC, MessageType.DELAY),
        (COMMIT_TOPIC, MessageType.TRANSACTION),
        (ORPHAN_TOPIC, MessageType.TRANSACTION),
        (AFTER_BAD_INPUT_TOPIC, MessageType.TRANSACTION),
    ),
)


@pytest.fixture(scope="module")
def config(broker: BrokerProcess) -> ClientConfiguration:
    return client_config(broker)


@pytest.fixture(autouse=True)
def no_broker_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Whatever a test does with the shared broker, it must not log an internal failure."""
    if "broker" not in request.fixturenames:
        yield
        return
    broker: BrokerProcess = request.getfixturevalue("broker")
    before = len(broker.log_lines())
    yield
    errors = [r for r in broker.log_lines()[before:] if r.get("level") == "error"]
    assert errors == []


def client_config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


class RecordingChecker(TransactionChecker):
    """Answers every check with ``resolution`` and records what it was asked about."""

    def __init__(self, resolution: TransactionResolution) -> None:
        self._resolution = resolution
        self._lock = threading.Lock()
        self.asked: list[Message] = []

    def check(self, message: Message) -> TransactionResolution:
        with self._lock:
            self.asked.append(message)
        return self._resolution


def message(topic: str, body: bytes, n: int) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    msg.tag = f"tag-{n}"
    msg.keys = f"order-{n}"
    msg.keys = f"customer-{n}"
    msg.add_property("n", str(n))
    msg.add_property("note", "ünïcode & spaces")
    return msg


def assert_same_message(got: Message, sent: Message, message_id: str) -> None:
    assert got.message_id == message_id
    assert got.topic == sent.topic
    assert got.body == sent.body
    assert got.tag == sent.tag
    assert got.keys == sent.keys
    assert got.properties == sent.properties
    assert not got.corrupted


# -- DELAY -----------------------------------------------------------------------


def test_delay_message_arrives_at_its_delivery_time_unchanged(config):
    # The client puts the value into the timestamp's seconds field as it is: seconds.
    deliver_at_s = int(time.time()) + DELAY_S
    sent = message(DELAY_TOPIC, b"later \x00\xff", 1)
    sent.delivery_timestamp = deliver_at_s
    with started_producer(config, DELAY_TOPIC) as client:
        sent_at_s = int(time.time())
        receipt = client.send(sent)

    with started_simple_consumer(config, new_group(), DELAY_TOPIC) as consumer:
        received = receive_all(consumer, 1)
        again = consumer.receive(32, 30)

    assert again == []
    [got] = received
    assert_same_message(got, sent, receipt.message_id)
    assert got.message_type == pb.MessageType.DELAY
    assert got.delivery_timestamp == deliver_at_s * 1000
    # The broker handed it out no earlier than its delivery time ...
    assert got.transport_delivery_timestamp >= deliver_at_s * 1000
    # ... and it still carries the time it was sent, not the time it was delivered.
    assert sent_at_s * 1000 <= got.born_timestamp < deliver_at_s * 1000


@pytest.mark.parametrize("restart", ["stop", "kill"])
def test_delay_messages_survive_a_restart_and_are_delivered_once(tmp_path: Path, restart: str):
    create_topics(data_dir_of(tmp_path), *topics((DELAY_TOPIC, MessageType.DELAY)))
    early, late = message(DELAY_TOPIC, b"early", 1), message(DELAY_TOPIC, b"late", 2)
    with running_broker(tmp_path) as broker:
        config = client_config(broker)
        with started_producer(config, DELAY_TOPIC) as client:
            early.delivery_timestamp = int(time.time()) + 1
            late_at_s = int(time.time()) + 2 * DELAY_S
            late.delivery_timestamp = late_at_s
            early_id = client.send(early).message_id
            late_id = client.send(late).message_id
        with started_simple_consumer(config, new_group(), DELAY_TOPIC) as consumer:
            [got_early] = receive_all(consumer, 1)
        assert got_early.message_id == early_id
        # Delivered moments ago: after a SIGKILL the saved state may not know it yet.
        broker.stop() if restart == "stop" else broker.kill()

    # A new group reads the topic from its start: everything that was ever delivered.
    with (
        running_broker(tmp_path) as broker,
        started_simple_consumer(client_config(broker), new_group(), DELAY_TOPIC) as consumer,
    ):
        received = receive_all(consumer, 2)
        again = consumer.receive(32, 30)

    assert sorted(m.message_id for m in received) == sorted([early_id, late_id])
    assert again == []
    [got_late] = [m for m in received if m.message_id == late_id]
    assert_same_message(got_late, late, late_id)
    assert got_late.transport_delivery_timestamp >= late_at_s * 1000


# -- TRANSACTION -------------------------------------------------------------------


def test_commit_delivers_and_rollback_never_does(config):
    checker = RecordingChecker(TransactionResolution.ROLLBACK)
    committed, rolled_back = message(COMMIT_TOPIC, b"commit", 1), message(COMMIT_TOPIC, b"no", 2)
    with started_producer(config, COMMIT_TOPIC, checker=checker) as client:
        transaction = client.begin_transaction()
        committed_receipt = client.send(committed, transaction)
        transaction.commit()
        transaction = client.begin_transaction()
        client.send(rolled_back, transaction)
        transaction.rollback()

    with started_simple_consumer(config, new_group(), COMMIT_TOPIC) as consumer:
        received = receive_all(consumer, 1)
        again = consumer.receive(32, 30)

    assert again == []
    [got] = received
    assert_same_message(got, committed, committed_receipt.message_id)
    assert got.message_type == pb.MessageType.TRANSACTION
    assert checker.asked == [], "transactions ended by the producer are never checked"


def test_an_orphaned_half_message_is_committed_by_the_producers_checker(config):
    checker = RecordingChecker(TransactionResolution.COMMIT)
    sent = message(ORPHAN_TOPIC, b"orphan", 1)
    with started_producer(config, ORPHAN_TOPIC, checker=checker) as client:
        # Sent as a half message, then neither committed nor rolled back.
        receipt = client.send(sent, client.begin_transaction())
        wait_for(lambda: checker.asked, "the broker's transaction check", deadline_s=DEADLINE_S)
        with started_simple_consumer(config, new_group(), ORPHAN_TOPIC) as consumer:
            received = receive_all(consumer, 1)
            again = consumer.receive(32, 30)

    [asked, *_] = checker.asked
    assert asked.message_id == receipt.message_id
    assert asked.topic == ORPHAN_TOPIC
    assert asked.body == sent.body
    assert again == []
    [got] = received
    assert_same_message(got, sent, receipt.message_id)


@pytest.mark.parametrize("restart", ["stop", "kill"])
def test_a_half_message_committed_after_a_restart_is_delivered_once(tmp_path: Path, restart: str):
    create_topics(data_dir_of(tmp_path), *topics((ORPHAN_TOPIC, MessageType.TRANSACTION)))
    sent = message(ORPHAN_TOPIC, b"across a restart", 1)
    undecided = RecordingChecker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    with running_broker(tmp_path, *CHECK_INTERVAL_ARGS) as broker:
        with started_producer(client_config(broker), ORPHAN_TOPIC, checker=undecided) as client:
            receipt = client.send(sent, client.begin_transaction())
        broker.stop() if restart == "stop" else broker.kill()

    checker = RecordingChecker(TransactionResolution.COMMIT)
    with running_broker(tmp_path, *CHECK_INTERVAL_ARGS) as broker:
        config = client_config(broker)
        with started_producer(config, ORPHAN_TOPIC, checker=checker):
            wait_for(
                lambda: checker.asked,
                "the broker's transaction check after the restart",
                deadline_s=DEADLINE_S,
            )
            with started_simple_consumer(config, new_group(), ORPHAN_TOPIC) as consumer:
                received = receive_all(consumer, 1)
                again = consumer.receive(32, 30)

    assert again == []
    [got] = received
    assert_same_message(got, sent, receipt.message_id)
    assert got.message_type == pb.MessageType.TRANSACTION


# -- bad input ---------------------------------------------------------------------


def test_bad_transaction_ends_and_internal_topics_get_clear_statuses(broker, config):
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = MessagingServiceStub(channel)
        unknown_id = stub.EndTransaction(
            spb.EndTransactionRequest(
                topic=pb.Resource(name=COMMIT_TOPIC),
                message_id="01ABCDEF",
                transaction_id="0000000000000000000000FF",
                resolution=pb.TransactionResolution.COMMIT,
                source=pb.TransactionSource.SOURCE_CLIENT,
            ),
            timeout=10,
        )
        internal = pb.Message(
            topic=pb.Resource(name="SCHEDULE_TOPIC_XXXX"),
            body=b"sneaky",
            system_properties=pb.SystemProperties(
                message_id="01ABCDEF", body_encoding=pb.Encoding.IDENTITY
            ),
        )
        sent_to_internal = stub.SendMessage(spb.SendMessageRequest(messages=[internal]), timeout=10)
        route_to_internal = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="RMQ_SYS_TRANS_HALF_TOPIC")), timeout=10
        )

    assert unknown_id.status.code == pb.Code.INVALID_TRANSACTION_ID
    assert "not issued by this broker" in unknown_id.status.message
    assert sent_to_internal.status.code == pb.Code.ILLEGAL_TOPIC
    # As RocketMQ's proxy: a system topic is refused by name, before any look-up.
    assert route_to_internal.status.code == pb.Code.ILLEGAL_TOPIC
    assert "cannot access system topic" in route_to_internal.status.message
    # Still serving.
    checker = RecordingChecker(TransactionResolution.ROLLBACK)
    sent = message(AFTER_BAD_INPUT_TOPIC, b"after bad input", 3)
    with started_producer(config, AFTER_BAD_INPUT_TOPIC, checker=checker) as client:
        transaction = client.begin_transaction()
        receipt = client.send(sent, transaction)
        transaction.commit()
    with started_simple_consumer(config, new_group(), AFTER_BAD_INPUT_TOPIC) as consumer:
        [got] = receive_all(consumer, 1)
    assert got.message_id == receipt.message_id
