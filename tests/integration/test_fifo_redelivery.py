"""FIFO redelivery of a partly acknowledged batch, as Apache RocketMQ's ordered pop has it.

Through the official Python client, and the official Go and Java clients
(tests/official_clients), on FIFO topics of one queue. A FIFO queue hands
out one batch at a time; once every unacknowledged message of the batch is due again,
the queue is read again from the batch's first unacknowledged message, so the ones
after it come again even if they were acknowledged, in order. A message that was in
the previous batch comes with its delivery attempt counted up, acknowledged or not;
one that was not comes as a first attempt. Nothing of the queue comes while any
unacknowledged message of the batch is still invisible.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, SimpleConsumer
from tests.official_clients import (
    GoClient,
    JavaClient,
    built_or_skipped,
    go_client,
    java_client,
    run_client,
)
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import SHORT_INVISIBLE_ARGS, BrokerProcess
from tests.support.official_client import started_producer, started_simple_consumer
from tests.support.queue_ends import wait_for_messages

from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.metadata.topic_table import MessageType, TopicConfig

PARTLY_ACKED_TOPIC = "fifo-partly-acked"
LONGER_BATCH_TOPIC = "fifo-longer-batch"
HELD_TOPIC = "fifo-held"
GO_TOPIC = "fifo-go"
JAVA_TOPIC = "fifo-java"
MESSAGE_GROUP = "orders"
# Short, so the tests wait little; the broker is started accepting it.
SHORT_INVISIBLE_S = 2
# Long enough that a receive made meanwhile would see the queue free if the rule were broken.
LONGER_INVISIBLE_S = 8

broker = module_broker(
    "fifo-redelivery",
    *SHORT_INVISIBLE_ARGS,
    topics=tuple(
        TopicConfig(name, 1, 1, message_type=MessageType.FIFO)
        for name in (PARTLY_ACKED_TOPIC, LONGER_BATCH_TOPIC, HELD_TOPIC, GO_TOPIC, JAVA_TOPIC)
    ),
)


@pytest.fixture(scope="session")
def go() -> GoClient:
    return built_or_skipped(go_client)


@pytest.fixture(scope="session")
def java() -> JavaClient:
    return built_or_skipped(java_client)


def sent_ids(process: BrokerProcess, topic: str, count: int) -> list[str]:
    send_in_order(process, topic, count)
    with PullConsumer(process.endpoint) as pull:
        return [m.message_id for m in pull.pull(topic, 0, 0, max_messages=count).messages]


def send_in_order(process: BrokerProcess, topic: str, count: int) -> list[bytes]:
    bodies = [f"{topic}-{i}".encode() for i in range(count)]
    config = ClientConfiguration(process.endpoint, Credentials())
    with started_producer(config, topic) as producer:
        for body in bodies:
            message = Message()
            message.topic = topic
            message.body = body
            message.message_group = MESSAGE_GROUP
            producer.send(message)
    wait_for_messages(process.endpoint, topic, count)
    return bodies


def receive_batch(consumer: SimpleConsumer, count: int, invisible_s: int) -> list[Message]:
    """One receive of ``count`` (the long poll waits for the queue to be free)."""
    batch = consumer.receive(count, invisible_s)
    assert batch, "the queue's next batch must come within the long poll"
    return batch


def test_acking_all_but_the_first_brings_the_whole_batch_again(broker: BrokerProcess) -> None:
    bodies = send_in_order(broker, PARTLY_ACKED_TOPIC, 3)
    config = ClientConfiguration(broker.endpoint, Credentials())
    with started_simple_consumer(config, "fifo-partly", PARTLY_ACKED_TOPIC, await_s=20) as c:
        first = receive_batch(c, 3, SHORT_INVISIBLE_S)
        assert [m.body for m in first] == bodies
        assert [m.delivery_attempt for m in first] == [1, 1, 1]
        c.ack(first[1])
        c.ack(first[2])
        again = receive_batch(c, 3, 30)
        # From the first unacknowledged on: the acknowledged second and third come too.
        assert [m.body for m in again] == bodies
        assert [m.message_id for m in again] == [m.message_id for m in first]
        assert [m.delivery_attempt for m in again] == [2, 2, 2]
        for message in again:
            c.ack(message)
        assert c.receive(3, 30) == [], "everything was acknowledged"


def test_a_message_past_the_last_batch_comes_again_as_a_first_attempt(
    broker: BrokerProcess,
) -> None:
    bodies = send_in_order(broker, LONGER_BATCH_TOPIC, 3)
    config = ClientConfiguration(broker.endpoint, Credentials())
    with started_simple_consumer(config, "fifo-longer", LONGER_BATCH_TOPIC, await_s=20) as c:
        first = receive_batch(c, 2, SHORT_INVISIBLE_S)
        assert [m.body for m in first] == bodies[:2]
        c.ack(first[1])
        again = receive_batch(c, 3, 30)
        assert [m.body for m in again] == bodies
        # The first two were in the last batch; the third is new to this group.
        assert [m.delivery_attempt for m in again] == [2, 2, 1]
        for message in again:
            c.ack(message)


def test_the_queue_waits_for_every_unacknowledged_message_of_the_batch(
    broker: BrokerProcess,
) -> None:
    bodies = send_in_order(broker, HELD_TOPIC, 2)
    config = ClientConfiguration(broker.endpoint, Credentials())
    with started_simple_consumer(config, "fifo-held", HELD_TOPIC, await_s=2) as c:
        first = receive_batch(c, 2, SHORT_INVISIBLE_S)
        assert [m.body for m in first] == bodies
        c.change_invisible_duration(first[1], LONGER_INVISIBLE_S)
        time.sleep(SHORT_INVISIBLE_S + 1)  # the first is due again, the second is not
        assert c.receive(2, 30) == [], "the second message of the batch still holds the queue"
        # Once the second is due too, the batch comes again from the first.
        end = time.monotonic() + 3 * LONGER_INVISIBLE_S
        again: list[Message] = []
        while not again and time.monotonic() < end:
            again = c.receive(2, 30)
        assert [m.body for m in again] == bodies
        assert [m.delivery_attempt for m in again] == [2, 2]
        for message in again:
            c.ack(message)


def test_the_go_client_sees_the_whole_batch_again_after_acking_all_but_the_first(
    go: GoClient, broker: BrokerProcess, tmp_path: Path
) -> None:
    sent = sent_ids(broker, GO_TOPIC, 3)
    command = go.command(
        endpoint=broker.endpoint,
        topic=GO_TOPIC,
        group=f"fifo-go-{uuid.uuid4().hex[:6]}",
        count=3,
        mode="fifo-partial-ack",
        invisible_s=SHORT_INVISIBLE_S,
    )
    outcome = run_client(command, tmp_path / "logs")
    assert outcome.errors == [], outcome.stderr[-3000:]
    assert outcome.summary["received"] == sent
    again = outcome.summary["again"]
    assert [d["id"] for d in again] == sent
    assert [d["attempt"] for d in again] == [2, 2, 2]


def test_the_java_client_sees_the_whole_batch_again_after_acking_all_but_the_first(
    java: JavaClient, broker: BrokerProcess, tmp_path: Path
) -> None:
    sent = sent_ids(broker, JAVA_TOPIC, 3)
    command = java.command(
        "fifo-partial-ack",
        tmp_path / "logs",
        endpoint=broker.endpoint,
        topic=JAVA_TOPIC,
        group=f"fifo-java-{uuid.uuid4().hex[:6]}",
        count=3,
        invisible_s=SHORT_INVISIBLE_S,
    )
    outcome = run_client(command, tmp_path / "logs")
    assert outcome.errors == [], outcome.stderr[-3000:]
    assert outcome.summary["received"] == sent
    assert outcome.summary["again"] == [f"{message_id}/2" for message_id in sent]
