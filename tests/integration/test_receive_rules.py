"""Receive, ack and change-invisible-duration with Apache RocketMQ's ranges and expiry.

Through the official Python client where it can say it, raw gRPC stubs where it cannot
(durations in milliseconds). As RocketMQ's proxy has it:

- one receive hands out at most 32 messages; a larger batch size is capped, not refused;
- a receive's invisible duration is 10 s to 12 h (ILLEGAL_INVISIBLE_TIME, "the
  invisibleTime is too small" / "too large"); a change of it is 0 to 12 h;
- an ack or change after the invisible time ran out answers INVALID_RECEIPT_HANDLE, and
  the message is delivered again;
- a change to 0 is a nack: the message comes again at once, its attempt counted; below 0
  is refused ("the invisibleTime is too small. min is 0");
- ForwardMessageToDeadLetterQueue moves the message to %DLQ%<group> at once: it is not
  delivered to the group again.

Two brokers: one with the default minimum, one started with a 1 s minimum so that the
expiry tests wait seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import ClientConfiguration, Credentials, Message
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.exception import BadRequestException
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import SHORT_INVISIBLE_ARGS, BrokerProcess
from tests.support.official_client import receive_all, started_producer, started_simple_consumer

from skiff_broker.metadata.topic_table import TopicConfig

BATCH_TOPIC = "rules-batch"
EMPTY_TOPIC = "rules-empty"
LATE_ACK_TOPIC = "rules-late-ack"
LATE_CHANGE_TOPIC = "rules-late-change"
NACK_TOPIC = "rules-nack"
FORWARD_TOPIC = "rules-forward"
TWELVE_HOURS_MS = 12 * 3600 * 1000
# Short, so the test waits little; the broker is started accepting it.
SHORT_INVISIBLE_S = 2
RPC_TIMEOUT_S = 10.0

broker = module_broker(
    "receive-rules",
    topics=(
        TopicConfig(BATCH_TOPIC, 1, 1),
        TopicConfig(EMPTY_TOPIC, 1, 1),
        TopicConfig(NACK_TOPIC, 1, 1),
    ),
)
short_broker = module_broker(
    "receive-rules-short",
    *SHORT_INVISIBLE_ARGS,
    topics=(
        TopicConfig(LATE_ACK_TOPIC, 1, 1),
        TopicConfig(LATE_CHANGE_TOPIC, 1, 1),
        TopicConfig(FORWARD_TOPIC, 1, 1),
    ),
)


def client_config(process: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(process.endpoint, Credentials())


@pytest.fixture(scope="module")
def stub(broker: BrokerProcess) -> Iterator[MessagingServiceStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield MessagingServiceStub(channel)


def send(process: BrokerProcess, topic: str, count: int, prefix: str) -> list[bytes]:
    bodies = [f"{prefix}-{i}".encode() for i in range(count)]
    with started_producer(client_config(process), topic) as producer:
        for body in bodies:
            message = Message()
            message.topic = topic
            message.body = body
            producer.send(message)
    return bodies


def receive_status(stub: MessagingServiceStub, invisible: Duration) -> pb.Status:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="rules-raw"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=EMPTY_TOPIC), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=1,
        invisible_duration=invisible,
        long_polling_timeout=Duration(seconds=1),
    )
    frames = list(stub.ReceiveMessage(request, timeout=RPC_TIMEOUT_S))
    return [f.status for f in frames if f.HasField("status")][-1]


def ms(milliseconds: int) -> Duration:
    return Duration(seconds=milliseconds // 1000, nanos=milliseconds % 1000 * 1_000_000)


# -- batch size -------------------------------------------------------------------------


@pytest.mark.parametrize("asked", [50, 100_000])
def test_a_receive_hands_out_at_most_32_and_a_larger_batch_is_not_refused(
    broker: BrokerProcess, asked: int
) -> None:
    group = f"rules-batch-{asked}"
    sent = send(broker, BATCH_TOPIC, 40, group)
    batches: list[int] = []
    received: set[bytes] = set()
    with started_simple_consumer(client_config(broker), group, BATCH_TOPIC) as consumer:
        while not set(sent) <= received:
            batch = consumer.receive(asked, 30)
            assert batch, "every message sent must come"
            batches.append(len(batch))
            for message in batch:
                received.add(message.body)
                consumer.ack(message)
    assert max(batches) <= 32, f"one receive handed out {max(batches)}"


# -- invisible duration ------------------------------------------------------------------


def test_a_receive_invisible_for_9999_ms_is_refused_and_10_s_is_accepted(
    stub: MessagingServiceStub,
) -> None:
    refused = receive_status(stub, ms(9_999))
    assert refused.code == pb.Code.ILLEGAL_INVISIBLE_TIME, refused
    assert "the invisibleTime is too small. min is 10000" in refused.message
    accepted = receive_status(stub, ms(10_000))
    assert accepted.code == pb.Code.MESSAGE_NOT_FOUND, accepted


def test_a_receive_invisible_for_over_12_h_is_refused_and_12_h_is_accepted(
    stub: MessagingServiceStub,
) -> None:
    refused = receive_status(stub, ms(TWELVE_HOURS_MS + 1))
    assert refused.code == pb.Code.ILLEGAL_INVISIBLE_TIME, refused
    assert f"the invisibleTime is too large. max is {TWELVE_HOURS_MS}" in refused.message
    accepted = receive_status(stub, ms(TWELVE_HOURS_MS))
    assert accepted.code == pb.Code.MESSAGE_NOT_FOUND, accepted


def test_the_official_client_receiving_invisible_for_9_s_learns_the_minimum(
    broker: BrokerProcess,
) -> None:
    config = client_config(broker)
    with (
        started_simple_consumer(config, "rules-nine", EMPTY_TOPIC) as consumer,
        pytest.raises(BadRequestException) as refused,
    ):
        consumer.receive(1, 9)
    assert refused.value.code == pb.Code.ILLEGAL_INVISIBLE_TIME
    assert "the invisibleTime is too small. min is 10000" in str(refused.value)


def test_a_change_of_invisible_duration_over_12_h_is_refused(
    stub: MessagingServiceStub,
) -> None:
    response = stub.ChangeInvisibleDuration(
        spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="rules-raw"),
            topic=pb.Resource(name=EMPTY_TOPIC),
            receipt_handle="0 0 0 0 0 broker-a 0 0 0",
            invisible_duration=ms(TWELVE_HOURS_MS + 1),
            message_id="00000000000000000000000000000000",
        ),
        timeout=RPC_TIMEOUT_S,
    )
    assert response.status.code == pb.Code.ILLEGAL_INVISIBLE_TIME, response.status
    assert f"the invisibleTime is too large. max is {TWELVE_HOURS_MS}" in response.status.message


# -- expired receipt handles --------------------------------------------------------------


def test_an_ack_after_the_invisible_time_ran_out_is_refused_and_the_message_comes_again(
    short_broker: BrokerProcess,
) -> None:
    [body] = send(short_broker, LATE_ACK_TOPIC, 1, "late-ack")
    config = client_config(short_broker)
    with started_simple_consumer(config, "rules-late-ack", LATE_ACK_TOPIC) as consumer:
        [first] = consumer.receive(1, SHORT_INVISIBLE_S)
        time.sleep(SHORT_INVISIBLE_S + 1)  # past its invisible time
        with pytest.raises(BadRequestException) as refused:
            consumer.ack(first)
        assert refused.value.code == pb.Code.INVALID_RECEIPT_HANDLE
        assert "delivered again" in str(refused.value)
        [again] = consumer.receive(1, 30)
        assert (again.message_id, again.body) == (first.message_id, body)
        assert again.delivery_attempt == first.delivery_attempt + 1
        consumer.ack(again)


def test_a_change_of_invisible_duration_after_it_ran_out_is_refused_and_the_message_comes_again(
    short_broker: BrokerProcess,
) -> None:
    [body] = send(short_broker, LATE_CHANGE_TOPIC, 1, "late-change")
    config = client_config(short_broker)
    with started_simple_consumer(config, "rules-late-change", LATE_CHANGE_TOPIC) as consumer:
        [first] = consumer.receive(1, SHORT_INVISIBLE_S)
        time.sleep(SHORT_INVISIBLE_S + 1)  # past its invisible time
        with pytest.raises(BadRequestException) as refused:
            consumer.change_invisible_duration(first, 60)
        assert refused.value.code == pb.Code.INVALID_RECEIPT_HANDLE
        assert "delivered again" in str(refused.value)
        # The refused change did not hide it for a minute: it comes in this receive.
        [again] = consumer.receive(1, 30)
        assert (again.message_id, again.body) == (first.message_id, body)
        consumer.ack(again)


# -- nack -----------------------------------------------------------------------------------


def change_status(
    stub: MessagingServiceStub, group: str, topic: str, message: Message, invisible: Duration
) -> spb.ChangeInvisibleDurationResponse:
    return stub.ChangeInvisibleDuration(
        spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=message.receipt_handle,
            invisible_duration=invisible,
            message_id=message.message_id,
        ),
        timeout=RPC_TIMEOUT_S,
    )


def test_a_change_of_invisible_duration_to_0_is_a_nack_and_below_0_is_refused(
    broker: BrokerProcess, stub: MessagingServiceStub
) -> None:
    [body] = send(broker, NACK_TOPIC, 1, "nack")
    group = "rules-nack"
    with started_simple_consumer(client_config(broker), group, NACK_TOPIC) as consumer:
        [first] = consumer.receive(1, 60)
        below = change_status(stub, group, NACK_TOPIC, first, Duration(nanos=-1_000_000))
        assert below.status.code == pb.Code.ILLEGAL_INVISIBLE_TIME, below.status
        assert "the invisibleTime is too small. min is 0" in below.status.message
        nack = change_status(stub, group, NACK_TOPIC, first, Duration())
        assert nack.status.code == pb.Code.OK, nack.status
        # Due at once: this receive gets it, though it asked for a minute's invisibility.
        [again] = consumer.receive(1, 30)
        assert (again.message_id, again.body) == (first.message_id, body)
        assert again.delivery_attempt == first.delivery_attempt + 1
        consumer.ack(again)


# -- forward to the dead-letter topic ---------------------------------------------------------


def forward_status(
    stub: MessagingServiceStub, group: str, topic: str, message: Message
) -> pb.Status:
    return stub.ForwardMessageToDeadLetterQueue(
        spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=message.receipt_handle,
            message_id=message.message_id,
            delivery_attempt=message.delivery_attempt,
            max_delivery_attempts=16,
        ),
        timeout=RPC_TIMEOUT_S,
    ).status


def test_a_forwarded_message_goes_to_the_dead_letter_topic_and_not_to_the_group_again(
    short_broker: BrokerProcess,
) -> None:
    [body] = send(short_broker, FORWARD_TOPIC, 1, "forward")
    group = "rules-forward"
    config = client_config(short_broker)
    with grpc.insecure_channel(short_broker.endpoint) as channel:
        stub = MessagingServiceStub(channel)
        with started_simple_consumer(config, group, FORWARD_TOPIC, await_s=2) as consumer:
            [first] = consumer.receive(1, SHORT_INVISIBLE_S)
            forwarded = forward_status(stub, group, FORWARD_TOPIC, first)
            assert forwarded.code == pb.Code.OK, forwarded
            # Its handle is spent: a second forward or an ack is refused.
            again = forward_status(stub, group, FORWARD_TOPIC, first)
            assert again.code == pb.Code.INVALID_RECEIPT_HANDLE, again
            time.sleep(SHORT_INVISIBLE_S + 1)  # past the invisible time it was received with
            assert consumer.receive(1, 30) == [], "a forwarded message is not delivered again"
        dead_letter_topic = f"%DLQ%{group}"
        with started_simple_consumer(config, f"{group}-dlq", dead_letter_topic) as dlq:
            [dead] = receive_all(dlq, 1)
    assert (dead.message_id, dead.body) == (first.message_id, body)
