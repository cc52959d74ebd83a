"""All three services refuse malformed requests alike, briefly, and keep serving.

Against one real broker process: request bytes holding invalid UTF-8, and
names far longer than any valid one, sent to the messaging, admin and record
services. Each must answer with INVALID_ARGUMENT (or, on the messaging
service, the v2 status the official clients expect), with a message short
enough for any client to receive, never an internal failure of the broker's.
RocketMQ's own property names are refused as user properties by both write
doors, naming the property.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.message import Message as ProtoMessage
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess

from skiff_broker.admin.v1 import admin_pb2 as apb
from skiff_broker.admin.v1 import admin_pb2_grpc
from skiff_broker.client.records import encode_record, topic_field
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc
from skiff_broker.store.message import encode_properties

TOPIC = "bounded"
QUEUES = 2
RPC_TIMEOUT_S = 10.0
# The most an error message may be: what the broker cuts every message to.
MESSAGE_LIMIT = 1024
HUGE_NAME = "n" * 10 * 1024
PLACEHOLDER = "PLACEHOLDER-NAME"
# Same length as the placeholder; not UTF-8 (0xFF never occurs in it).
NOT_UTF8 = b"\xff\xfe" * (len(PLACEHOLDER) // 2)
# A sample of RocketMQ's internal property names, from its MessageConst (and the
# scheduled-delivery name Alibaba Cloud's clients use); written out here rather
# than taken from the broker's list, so the test does not check the list with itself.
INTERNAL_NAMES = (
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "__STARTDELIVERTIME",
    "INNER_MULTI_DISPATCH",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "DELAY",
    "REAL_TOPIC",
    "__RMQ.TRANSIENT.TOPIC_SYS_FLAG",
)


broker = module_broker(
    "bounded", "--max-message-size", "64k", topics=[TopicConfig(TOPIC, QUEUES, QUEUES)]
)


@pytest.fixture(scope="module")
def channel(broker: BrokerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.endpoint) as ch:
        yield ch


@pytest.fixture(autouse=True)
def broker_keeps_serving(broker: BrokerProcess, channel: grpc.Channel) -> Iterator[None]:
    """After each test: no failure of the broker's own logged, and it still serves all three."""
    before = len(broker.log_lines())
    yield
    errors = [r for r in broker.log_lines()[before:] if r.get("level") == "error"]
    assert errors == [], "a bad request made the broker log a failure of its own"
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    assert admin.GetTopic(apb.GetTopicRequest(name=TOPIC), timeout=RPC_TIMEOUT_S).name == TOPIC
    fetched = records_pb2_grpc.RecordServiceStub(channel).Fetch(
        rpb.FetchRequest(topic=TOPIC, queue_id=0, max_records=1), timeout=RPC_TIMEOUT_S
    )
    assert fetched.result in (rpb.FetchResponse.FOUND, rpb.FetchResponse.NO_NEW_RECORDS)
    sent = MessagingServiceStub(channel).SendMessage(
        spb.SendMessageRequest(messages=[v2_message()]), timeout=RPC_TIMEOUT_S
    )
    assert sent.status.code == pb.Code.OK, sent.status


def v2_message(*, topic: str = TOPIC, properties: dict[str, str] | None = None) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=b"payload",
        user_properties=properties or {},
        system_properties=pb.SystemProperties(
            message_id=uuid.uuid4().hex.upper(),
            body_encoding=pb.Encoding.IDENTITY,
            message_type=pb.MessageType.NORMAL,
        ),
    )


def record(properties: dict[str, str]) -> bytes:
    stored = {**properties, "UNIQ_KEY": uuid.uuid4().hex.upper()}
    return encode_record(topic_field(TOPIC), b"payload", encode_properties(stored), 1)


def assert_short(message: str) -> None:
    assert message.strip(), "a refusal must say why"
    assert len(message.encode()) <= MESSAGE_LIMIT, f"{len(message.encode())} bytes: {message!r}"


def with_bad_utf8(request: ProtoMessage) -> bytes:
    """``request``'s bytes with the placeholder string replaced by bytes that are not UTF-8."""
    data = request.SerializeToString()
    assert data.count(PLACEHOLDER.encode()) == 1
    return data.replace(PLACEHOLDER.encode(), NOT_UTF8)


# -- invalid UTF-8 -------------------------------------------------------------

UNARY_REQUESTS = {
    "/skiff.admin.v1.AdminService/GetTopic": apb.GetTopicRequest(name=PLACEHOLDER),
    "/skiff.admin.v1.AdminService/CreateTopic": apb.CreateTopicRequest(
        topic=apb.Topic(name=PLACEHOLDER)
    ),
    "/skiff.admin.v1.AdminService/GetConsumerLag": apb.GetConsumerLagRequest(
        topic=TOPIC, group=PLACEHOLDER
    ),
    "/skiff.records.v1.RecordService/Fetch": rpb.FetchRequest(topic=PLACEHOLDER, max_records=1),
    "/skiff.records.v1.RecordService/Append": rpb.AppendRequest(topic=PLACEHOLDER),
    "/apache.rocketmq.v2.MessagingService/QueryRoute": spb.QueryRouteRequest(
        topic=pb.Resource(name=PLACEHOLDER)
    ),
    "/apache.rocketmq.v2.MessagingService/SendMessage": spb.SendMessageRequest(
        messages=[v2_message(properties={"k": PLACEHOLDER})]
    ),
}


@pytest.mark.parametrize("path", sorted(UNARY_REQUESTS))
def test_invalid_utf8_is_invalid_argument_on_every_service(channel, path):
    call = channel.unary_unary(path)  # no serializers: the bytes go as they are
    with pytest.raises(grpc.RpcError) as refused:
        call(with_bad_utf8(UNARY_REQUESTS[path]), timeout=RPC_TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert "UTF-8" in refused.value.details()
    assert_short(refused.value.details())


def test_invalid_utf8_in_a_receive_is_invalid_argument(channel):
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=PLACEHOLDER),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
    )
    call = channel.unary_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage")
    with pytest.raises(grpc.RpcError) as refused:
        list(call(with_bad_utf8(request), timeout=RPC_TIMEOUT_S))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert_short(refused.value.details())


# -- names far too long --------------------------------------------------------


@pytest.mark.parametrize(
    "method, refused_request",
    [
        ("GetTopic", apb.GetTopicRequest(name=HUGE_NAME)),
        ("DeleteTopic", apb.DeleteTopicRequest(name=HUGE_NAME)),
        ("CreateTopic", apb.CreateTopicRequest(topic=apb.Topic(name=HUGE_NAME))),
        ("GetQueueOffsets", apb.GetQueueOffsetsRequest(topic=HUGE_NAME)),
        ("LookupMessage", apb.LookupMessageRequest(topic=HUGE_NAME, message_id="X")),
    ],
)
def test_admin_refuses_a_10_kib_topic_name_briefly(channel, method, refused_request):
    stub = admin_pb2_grpc.AdminServiceStub(channel)
    with pytest.raises(grpc.RpcError) as refused:
        getattr(stub, method)(refused_request, timeout=RPC_TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert f"({len(HUGE_NAME)} characters)" in refused.value.details()
    assert_short(refused.value.details())


def test_admin_names_a_10_kib_group_briefly(channel):
    stub = admin_pb2_grpc.AdminServiceStub(channel)
    with pytest.raises(grpc.RpcError) as refused:
        stub.GetConsumerLag(
            apb.GetConsumerLagRequest(topic=TOPIC, group=HUGE_NAME), timeout=RPC_TIMEOUT_S
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert_short(refused.value.details())


@pytest.mark.parametrize(
    "method, refused_request",
    [
        ("Fetch", rpb.FetchRequest(topic=HUGE_NAME, max_records=1)),
        ("Append", rpb.AppendRequest(topic=HUGE_NAME)),
    ],
)
def test_records_refuse_a_10_kib_topic_name_briefly(channel, method, refused_request):
    stub = records_pb2_grpc.RecordServiceStub(channel)
    with pytest.raises(grpc.RpcError) as refused:
        getattr(stub, method)(refused_request, timeout=RPC_TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert f"({len(HUGE_NAME)} characters)" in refused.value.details()
    assert_short(refused.value.details())


def test_messaging_refuses_10_kib_names_briefly(channel):
    stub = MessagingServiceStub(channel)
    route = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=HUGE_NAME)), timeout=RPC_TIMEOUT_S
    )
    assert route.status.code == pb.Code.ILLEGAL_TOPIC, route.status
    assert f"({len(HUGE_NAME)} characters)" in route.status.message
    assert_short(route.status.message)

    frames = list(
        stub.ReceiveMessage(
            spb.ReceiveMessageRequest(
                group=pb.Resource(name=HUGE_NAME),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
            ),
            timeout=RPC_TIMEOUT_S,
        )
    )
    [status] = [f.status for f in frames if f.HasField("status")]
    assert status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, status
    assert_short(status.message)

    sent = stub.SendMessage(
        spb.SendMessageRequest(messages=[v2_message(properties={HUGE_NAME + "\x01": "v"})]),
        timeout=RPC_TIMEOUT_S,
    )
    assert sent.status.code == pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, sent.status
    assert_short(sent.status.message)

    tagged = v2_message()
    tagged.system_properties.tag = HUGE_NAME + "|"
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[tagged]), timeout=RPC_TIMEOUT_S)
    assert sent.status.code == pb.Code.ILLEGAL_MESSAGE_TAG, sent.status
    assert_short(sent.status.message)


# -- RocketMQ's internal property names ----------------------------------------


@pytest.mark.parametrize("name", INTERNAL_NAMES)
def test_send_message_refuses_an_internal_property_name_naming_it(channel, name):
    sent = MessagingServiceStub(channel).SendMessage(
        spb.SendMessageRequest(messages=[v2_message(properties={name: "1"})]),
        timeout=RPC_TIMEOUT_S,
    )
    assert sent.status.code == pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, sent.status
    assert repr(name) in sent.status.message


@pytest.mark.parametrize("name", INTERNAL_NAMES)
def test_append_refuses_an_internal_property_name_naming_it(channel, name):
    stub = records_pb2_grpc.RecordServiceStub(channel)
    with pytest.raises(grpc.RpcError) as refused:
        stub.Append(
            rpb.AppendRequest(topic=TOPIC, records=record({name: "1"})), timeout=RPC_TIMEOUT_S
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert repr(name) in refused.value.details()


def test_official_producer_is_refused_an_internal_name_and_keeps_its_own(broker):
    producer = Producer(ClientConfiguration(broker.endpoint, Credentials()), (TOPIC,))
    producer.startup()
    try:
        forged = Message()
        forged.topic = TOPIC
        forged.body = b"steered"
        forged.add_property("__STARTDELIVERTIME", "1")
        with pytest.raises(Exception, match="__STARTDELIVERTIME"):
            producer.send(forged)

        plain = Message()
        plain.topic = TOPIC
        plain.body = b"fine"
        plain.tag = "TagA"
        plain.keys = "order-1"
        plain.add_property("order-id", "1")
        assert producer.send(plain).message_id
    finally:
        producer.shutdown()
