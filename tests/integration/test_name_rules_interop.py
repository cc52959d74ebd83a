"""RocketMQ 5.3's door rules for topic and group names, body size, delay and transaction
recovery time, each at its limit and one past it, with the proxy's status codes and words.

The official Python client where it reaches the broker with the input; raw gRPC stubs
where the client refuses first (an empty or oversized body, a recovery time it cannot
set). The admin and records doors take topic and group names by the same rules.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import ClientConfiguration, Credentials, Message
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.exception import ClientException
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess
from tests.support.official_client import started_producer, started_simple_consumer

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.errors import InvalidArgument
from skiff_broker.metadata.topic_table import MessageType, TopicConfig

LONGEST_TOPIC = "t" * 127
NORMAL_TOPIC = "names-normal"
DELAY_TOPIC = "names-delay"
TRANSACTION_TOPIC = "names-transaction"
LONGEST_GROUP = "g" * 120
MAX_BODY = 4 * 1024 * 1024
DAY_MS = 24 * 3600 * 1000
# Margin on either side of the delay limit: the send takes a moment to arrive.
DELAY_MARGIN_MS = 60_000
RPC_TIMEOUT_S = 30.0

broker = module_broker(
    "name-rules",
    topics=(
        TopicConfig(LONGEST_TOPIC, 1, 1),
        TopicConfig(NORMAL_TOPIC, 1, 1),
        TopicConfig(DELAY_TOPIC, 1, 1, message_type=MessageType.DELAY),
        TopicConfig(TRANSACTION_TOPIC, 1, 1, message_type=MessageType.TRANSACTION),
    ),
)


@pytest.fixture(scope="module")
def config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


@pytest.fixture(scope="module")
def stub(broker: BrokerProcess) -> Iterator[MessagingServiceStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield MessagingServiceStub(channel)


@pytest.fixture(autouse=True)
def no_broker_errors(broker: BrokerProcess) -> Iterator[None]:
    before = len(broker.log_lines())
    yield
    assert [r for r in broker.log_lines()[before:] if r.get("level") == "error"] == []


def new_message(topic: str, body: bytes = b"body") -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def refused(config: ClientConfiguration, msg: Message) -> ClientException:
    with started_producer(config) as client, pytest.raises(ClientException) as caught:
        client.send(msg)
    return caught.value


def raw_send(stub: MessagingServiceStub, message: pb.Message) -> pb.Status:
    response = stub.SendMessage(spb.SendMessageRequest(messages=[message]), timeout=RPC_TIMEOUT_S)
    return response.status


def raw_message(topic: str, body: bytes, **system: object) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=uuid.uuid4().hex.upper(), body_encoding=pb.Encoding.IDENTITY, **system
        ),
    )


# -- topic names ------------------------------------------------------------------------
# The official client checks a topic's charset itself and reports a refused route without
# its status, so past the limits the doors are asked with raw stubs.


def route_status(stub: MessagingServiceStub, topic: str) -> pb.Status:
    request = spb.QueryRouteRequest(topic=pb.Resource(name=topic))
    return stub.QueryRoute(request, timeout=RPC_TIMEOUT_S).status


def receive_status(stub: MessagingServiceStub, group: str, topic: str) -> pb.Status:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=1,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=1),
    )
    frames = list(stub.ReceiveMessage(request, timeout=RPC_TIMEOUT_S))
    return [f.status for f in frames if f.HasField("status")][-1]


def test_a_topic_name_of_127_characters_is_used_and_128_is_refused(config, stub):
    with started_producer(config) as client:
        assert client.send(new_message(LONGEST_TOPIC)).message_id
    for status in (
        route_status(stub, "t" * 128),
        raw_send(stub, raw_message("t" * 128, b"body")),
    ):
        assert status.code == pb.Code.ILLEGAL_TOPIC, status
        assert "The specified topic is longer than topic max length 127" in status.message


@pytest.mark.parametrize("name", ["dotted.name", "with space", "ünïcode"])
def test_a_topic_name_outside_the_charset_is_refused(stub, name):
    for status in (route_status(stub, name), raw_send(stub, raw_message(name, b"body"))):
        assert status.code == pb.Code.ILLEGAL_TOPIC, status
        assert "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$" in status.message


@pytest.mark.parametrize(
    "name", ["TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_mine"]
)
def test_system_topics_are_refused_to_producers_and_consumers(stub, name):
    for status in (
        route_status(stub, name),
        raw_send(stub, raw_message(name, b"body")),
        receive_status(stub, "names-system", name),
    ):
        assert status.code == pb.Code.ILLEGAL_TOPIC, status
        assert "cannot access system topic" in status.message


# -- consumer group names ----------------------------------------------------------------


def test_a_group_name_of_120_characters_receives_and_121_is_refused(config):
    with started_simple_consumer(config, LONGEST_GROUP, NORMAL_TOPIC, await_s=1) as consumer:
        consumer.receive(1, 30)  # nothing to receive, and no refusal
    with (
        started_simple_consumer(config, "g" * 121, NORMAL_TOPIC, await_s=1) as consumer,
        pytest.raises(ClientException) as caught,
    ):
        consumer.receive(1, 30)
    assert caught.value.code == pb.Code.ILLEGAL_CONSUMER_GROUP
    assert "is longer than group max length: 120" in str(caught.value)


def test_a_system_consumer_group_is_refused(config):
    with (
        started_simple_consumer(config, "CID_RMQ_SYS_mine", NORMAL_TOPIC, await_s=1) as consumer,
        pytest.raises(ClientException) as caught,
    ):
        consumer.receive(1, 30)
    assert caught.value.code == pb.Code.ILLEGAL_CONSUMER_GROUP
    assert "cannot use system consumer group" in str(caught.value)


def test_a_group_name_outside_the_charset_is_refused(stub):
    group = pb.Resource(name="dotted.group")
    assignment = stub.QueryAssignment(
        spb.QueryAssignmentRequest(topic=pb.Resource(name=NORMAL_TOPIC), group=group),
        timeout=RPC_TIMEOUT_S,
    )
    heartbeat = stub.Heartbeat(
        spb.HeartbeatRequest(group=group, client_type=pb.ClientType.SIMPLE_CONSUMER),
        timeout=RPC_TIMEOUT_S,
    )
    for status in (
        receive_status(stub, group.name, NORMAL_TOPIC),
        assignment.status,
        heartbeat.status,
    ):
        assert status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, status
        assert "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$" in status.message


# -- bodies -------------------------------------------------------------------------------


def test_a_body_of_4_mib_is_stored_and_one_byte_more_is_refused(config, stub):
    with started_producer(config) as client:
        assert client.send(new_message(NORMAL_TOPIC, b"x" * MAX_BODY)).message_id
    status = raw_send(stub, raw_message(NORMAL_TOPIC, b"x" * (MAX_BODY + 1)))
    assert status.code == pb.Code.MESSAGE_BODY_TOO_LARGE, status
    assert f"message body cannot exceed the max {MAX_BODY}" in status.message


def test_an_empty_body_is_refused(stub):
    status = raw_send(stub, raw_message(NORMAL_TOPIC, b""))
    assert status.code == pb.Code.MESSAGE_BODY_EMPTY, status
    assert "message body cannot be empty" in status.message


# -- delays -------------------------------------------------------------------------------


def delayed(ahead_ms: int) -> Message:
    msg = new_message(DELAY_TOPIC)
    msg.delivery_timestamp = int(time.time() * 1000) + ahead_ms
    return msg


def test_a_delay_of_a_day_is_accepted_and_more_is_refused(config):
    with started_producer(config) as client:
        assert client.send(delayed(DAY_MS - DELAY_MARGIN_MS)).message_id
    error = refused(config, delayed(DAY_MS + DELAY_MARGIN_MS))
    assert error.code == pb.Code.ILLEGAL_DELIVERY_TIME
    assert f"the max delay time of message is too large, max is {DAY_MS}" in str(error)


def test_a_too_far_delay_is_refused_before_the_topic_type_is_looked_at(stub):
    # As RocketMQ's proxy answers: the message's own rules first, the topic's type last.
    far = int(time.time() * 1000) + DAY_MS + DELAY_MARGIN_MS
    message = raw_message(NORMAL_TOPIC, b"late", delivery_timestamp={"seconds": far // 1000})
    status = raw_send(stub, message)
    assert status.code == pb.Code.ILLEGAL_DELIVERY_TIME, status


# -- transaction recovery ------------------------------------------------------------------


def test_a_transaction_recovery_time_of_an_hour_is_accepted_and_more_is_refused(stub):
    def half(recovery_s: int) -> pb.Message:
        return raw_message(
            TRANSACTION_TOPIC,
            b"half",
            message_type=pb.MessageType.TRANSACTION,
            orphaned_transaction_recovery_duration=Duration(seconds=recovery_s),
        )

    accepted = raw_send(stub, half(3600))
    assert accepted.code == pb.Code.OK, accepted
    status = raw_send(stub, half(3601))
    assert status.code == pb.Code.BAD_REQUEST, status
    assert "the max transaction recovery time of message is too large, max is 3600" in (
        status.message
    )


# -- the admin door ------------------------------------------------------------------------


def test_the_admin_door_creates_by_the_same_topic_rules(broker):
    with AdminClient(broker.endpoint) as admin:
        assert admin.create_topic("a" * 127).name == "a" * 127
        with pytest.raises(InvalidArgument, match="longer than topic max length 127"):
            admin.create_topic("a" * 128)
        with pytest.raises(InvalidArgument, match=r"contains illegal characters"):
            admin.create_topic("dotted.name")
        for system in ("TBW102", "rmq_sys_mine"):
            with pytest.raises(InvalidArgument, match="is conflict with system topic"):
                admin.create_topic(system)
        with pytest.raises(InvalidArgument, match="longer than group max length: 120"):
            admin.describe_consumer_group("g" * 121)


def telemetry_refusal(stub: MessagingServiceStub, settings: pb.Settings) -> grpc.RpcError:
    commands = iter([spb.TelemetryCommand(settings=settings)])
    with pytest.raises(grpc.RpcError) as caught:
        for _ in stub.Telemetry(commands, timeout=RPC_TIMEOUT_S):
            pass
    return caught.value


def test_client_settings_naming_a_bad_group_or_topic_end_the_telemetry_stream(stub):
    bad_group = pb.Settings(
        client_type=pb.ClientType.SIMPLE_CONSUMER,
        subscription=pb.Subscription(group=pb.Resource(name="g" * 121)),
    )
    system_topic = pb.Settings(
        client_type=pb.ClientType.PRODUCER,
        publishing=pb.Publishing(topics=[pb.Resource(name="rmq_sys_mine")]),
    )
    for settings, words in (
        (bad_group, "is longer than group max length: 120"),
        (system_topic, "cannot access system topic"),
    ):
        error = telemetry_refusal(stub, settings)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        assert "process client telemetryCommand failed." in error.details()
        assert words in error.details()
