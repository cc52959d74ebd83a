"""Malformed requests against a running broker, through raw gRPC stubs.

Every bad request must get a clear refusal: a v2 status that is not OK and says
why (never the broker's own INTERNAL_SERVER_ERROR), or, for bytes that are not
a request at all, a gRPC INVALID_ARGUMENT / RESOURCE_EXHAUSTED. Refused requests
must leave the commit log exactly as it was, and the broker must keep serving.

The broker runs with a 64 KiB message limit so oversize bodies are cheap.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess, running_broker

from skiff_broker.metadata.topic_table import MessageType, TopicConfig
from skiff_broker.wire.property_names import RESERVED
from skiff_broker.wire.resource_names import NAME_CHARSET

MAX_MESSAGE_SIZE = 64 * 1024
NORMAL = "fuzz-normal"
FIFO = "fuzz-fifo"
EMPTY = "fuzz-empty"  # nothing is ever sent here: receives on it find nothing
ROUND_TRIP = "fuzz-round-trip"
TOPICS = (NORMAL, FIFO, EMPTY, ROUND_TRIP)
QUEUES = 4
SERVICE = "/apache.rocketmq.v2.MessagingService"
# The server answers a receive this long before the call's deadline.
RPC_TIMEOUT_S = 10.0
FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


broker = module_broker(
    "malformed",
    "--max-message-size",
    "64k",
    topics=(
        TopicConfig(NORMAL, QUEUES, QUEUES),
        TopicConfig(FIFO, QUEUES, QUEUES, message_type=MessageType.FIFO),
        TopicConfig(EMPTY, QUEUES, QUEUES),
        TopicConfig(ROUND_TRIP, QUEUES, QUEUES),
    ),
)


@pytest.fixture(scope="module")
def channel(broker: BrokerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.endpoint) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> MessagingServiceStub:
    return MessagingServiceStub(channel)


@pytest.fixture(autouse=True)
def broker_keeps_serving(broker: BrokerProcess, stub: MessagingServiceStub) -> Iterator[None]:
    """After each barrage: no internal failure logged, and a valid round trip works."""
    before = len(broker.log_lines())
    yield
    errors = [r for r in broker.log_lines()[before:] if r.get("level") == "error"]
    assert errors == [], "a bad request made the broker log a failure of its own"
    assert_round_trip(stub)


# -- requests ------------------------------------------------------------------


def valid_message(topic: str = NORMAL, body: bytes = b"payload") -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=uuid.uuid4().hex.upper(),
            body_encoding=pb.Encoding.IDENTITY,
            message_type=pb.MessageType.NORMAL,
            born_timestamp=Timestamp(seconds=1_700_000_000),
            born_host="10.0.0.1",
        ),
    )


def receive_request(
    group: str, topic: str, *, polling_s: float = 5.0, batch: int = 32
) -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=batch,
        invisible_duration=Duration(seconds=60),
        long_polling_timeout=Duration(seconds=int(polling_s), nanos=int(polling_s % 1 * 1e9)),
    )


def final_status(frames: list) -> pb.Status:
    statuses = [f.status for f in frames if f.HasField("status")]
    assert statuses, "a stream must say how it ended"
    return statuses[-1]


def assert_refused(status: pb.Status) -> None:
    assert status.code not in (pb.Code.OK, pb.Code.MULTIPLE_RESULTS), status
    assert status.code != pb.Code.INTERNAL_SERVER_ERROR, f"a client error, not ours: {status}"
    assert status.message.strip(), f"a refusal must say why: {status}"


def assert_round_trip(stub: MessagingServiceStub) -> None:
    message = valid_message(ROUND_TRIP, os.urandom(64))
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[message]), timeout=RPC_TIMEOUT_S)
    assert sent.status.code == pb.Code.OK, sent.status
    message_id = message.system_properties.message_id
    for _ in range(20):
        frames = list(
            stub.ReceiveMessage(receive_request("round-trip", ROUND_TRIP), timeout=RPC_TIMEOUT_S)
        )
        for got in (f.message for f in frames if f.HasField("message")):
            ack = stub.AckMessage(
                spb.AckMessageRequest(
                    group=pb.Resource(name="round-trip"),
                    topic=pb.Resource(name=ROUND_TRIP),
                    entries=[
                        spb.AckMessageEntry(
                            message_id=got.system_properties.message_id,
                            receipt_handle=got.system_properties.receipt_handle,
                        )
                    ],
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert ack.status.code == pb.Code.OK, ack.status
            if got.system_properties.message_id == message_id:
                assert got.body == message.body
                return
    raise AssertionError("the round-trip message never came back")


# -- the store -----------------------------------------------------------------


def commit_log_digests(data_dir: Path) -> dict[str, str]:
    """Each commit-log segment's SHA-256. Without the transient store pool the
    broker writes through a shared mapping, so a read sees every append at once."""
    directory = data_dir / "commitlog"
    return {
        name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
        for name in sorted(os.listdir(directory))
        # Segments are named by their start offset; the allocator's temporary files are not.
        if name.isdigit()
    }


def assert_commit_log_unchanged(data_dir: Path, before: dict[str, str]) -> None:
    after = commit_log_digests(data_dir)
    for name, digest in before.items():
        assert after[name] == digest, f"a refused request changed commit-log segment {name}"
    for name in sorted(set(after) - set(before)):
        # A segment allocated ahead of need is all zeros.
        assert not (data_dir / "commitlog" / name).read_bytes().strip(b"\0"), name


# -- strategies ----------------------------------------------------------------

texts = st.text(max_size=40)
# Names the broker might accept (so lookups happen) and names it must refuse outright.
names = st.one_of(texts, st.from_regex(r"[%|a-zA-Z0-9_-]{1,30}", fullmatch=True))
unknown_topics = names.filter(lambda t: t not in TOPICS)


@st.composite
def noise(draw: st.DrawFn, message: pb.Message) -> None:
    """Random values in the optional fields; they may or may not be valid."""
    system = message.system_properties
    if draw(st.booleans()):
        system.tag = draw(texts)
    system.keys.extend(draw(st.lists(texts, max_size=3)))
    message.user_properties.update(draw(st.dictionaries(texts, texts, max_size=4)))
    if draw(st.booleans()):
        system.born_host = draw(texts)
    if draw(st.booleans()):
        system.message_type = draw(st.sampled_from([*pb.MessageType.values(), 77]))
    if draw(st.booleans()):
        system.message_group = draw(texts)
    if draw(st.booleans()):
        system.born_timestamp.seconds = draw(st.integers(-(2**40), 2**40))


def _unknown_topic(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    request.messages[0].topic.name = draw(unknown_topics)


def _empty_body(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    request.messages[0].body = b""


def _oversize_body(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    size = draw(st.integers(MAX_MESSAGE_SIZE + 1, 3 * MAX_MESSAGE_SIZE))
    request.messages[0].body = bytes([draw(st.integers(0, 255))]) * size


def _reserved_property(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    request.messages[0].user_properties[draw(st.sampled_from(sorted(RESERVED)))] = draw(texts)


def _separator_in_property(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    separator = draw(st.sampled_from(["\x01", "\x02"]))
    key, value = draw(texts), draw(texts)
    if draw(st.booleans()):
        key = key[:3] + separator + key[3:]
    else:
        value = value[:3] + separator + value[3:]
    request.messages[0].user_properties[key] = value


def _empty_property_name(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    request.messages[0].user_properties[""] = draw(texts)


def _too_many_properties(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    count = draw(st.integers(129, 300))
    request.messages[0].user_properties.update({f"p{i}": "v" for i in range(count)})


def _oversize_properties(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    request.messages[0].user_properties["big"] = "v" * draw(st.integers(16 * 1024 + 1, 40_000))


def _blank_message_id(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    system = request.messages[0].system_properties
    if draw(st.booleans()):
        system.ClearField("message_id")
    else:
        system.message_id = draw(st.sampled_from([" ", "\t", "  \n"]))


def _bad_tag(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    tag = draw(st.one_of(st.sampled_from(["", " ", "\t\n"]), texts.map(lambda t: t + "|" + t)))
    request.messages[0].system_properties.tag = tag


def _bad_key(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    key = draw(st.one_of(st.just(""), texts.map(lambda t: t + " x")))
    request.messages[0].system_properties.keys.append(key)


def _type_not_accepted(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    message = request.messages[0]
    system = message.system_properties
    if draw(st.booleans()):
        # A NORMAL topic takes neither FIFO, DELAY nor TRANSACTION messages.
        message.topic.name = NORMAL
        system.message_type = draw(
            st.sampled_from([pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION])
        )
        system.message_group = "g"
        system.delivery_timestamp.seconds = 2_000_000_000
    else:
        message.topic.name = FIFO
        system.message_type = pb.MessageType.NORMAL


def _long_message_group(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    message = request.messages[0]
    message.topic.name = FIFO
    message.system_properties.message_type = pb.MessageType.FIFO
    message.system_properties.message_group = "g" * draw(st.integers(64, 200))


def _no_messages(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    del request.messages[:]


def _mixed_topics(draw: st.DrawFn, request: spb.SendMessageRequest) -> None:
    request.messages[0].topic.name = NORMAL
    request.messages.append(valid_message(draw(st.sampled_from([FIFO, EMPTY, "elsewhere"]))))


CORRUPTIONS: list[Callable[[st.DrawFn, spb.SendMessageRequest], None]] = [
    _unknown_topic,
    _empty_body,
    _oversize_body,
    _reserved_property,
    _separator_in_property,
    _empty_property_name,
    _too_many_properties,
    _oversize_properties,
    _blank_message_id,
    _bad_tag,
    _bad_key,
    _type_not_accepted,
    _long_message_group,
    _no_messages,
    _mixed_topics,
]


@st.composite
def invalid_send_requests(draw: st.DrawFn) -> spb.SendMessageRequest:
    """A message with random optional fields, then something definitely wrong with it."""
    message = valid_message()
    draw(noise(message))
    request = spb.SendMessageRequest(messages=[message])
    corrupt = draw(st.sampled_from(CORRUPTIONS))
    corrupt(draw, request)
    return request


receipt_handles = st.one_of(
    texts,
    st.lists(st.one_of(st.integers(-(2**70), 2**70).map(str), texts), min_size=9, max_size=9).map(
        " ".join
    ),
    # Well formed, but for no delivery the broker made.
    st.tuples(st.integers(-5, 2**40), st.integers(-(2**31), 2**31), st.integers(-5, 2**40)).map(
        lambda t: f"{t[0]} {t[2]} 60000 0 0 broker-a {t[1]} {t[0]} -1"
    ),
)
groups = st.one_of(st.just("fuzz-group"), names)
durations = st.builds(
    Duration, seconds=st.integers(-(2**40), 2**40), nanos=st.integers(-(10**9), 10**9)
)
queue_ids_out_of_range = st.one_of(st.integers(-(2**31), -1), st.integers(QUEUES, 2**31 - 1))
consumer_topics = st.one_of(st.just(EMPTY), unknown_topics)


@st.composite
def receive_requests(draw: st.DrawFn) -> spb.ReceiveMessageRequest:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=draw(groups)),
        message_queue=pb.MessageQueue(
            topic=pb.Resource(name=draw(consumer_topics)),
            id=draw(st.one_of(queue_ids_out_of_range, st.integers(0, QUEUES - 1))),
        ),
        filter_expression=pb.FilterExpression(
            type=draw(st.sampled_from([0, pb.FilterType.TAG, pb.FilterType.SQL, 9])),
            expression=draw(st.one_of(st.just("*"), st.just("TagA||TagB"), texts)),
        ),
        batch_size=draw(st.integers(-(2**31), 2**31 - 1)),
        auto_renew=draw(st.booleans()),
    )
    if draw(st.booleans()):
        request.invisible_duration.CopyFrom(draw(durations))
    # A valid receive on the empty topic waits this long; keep it short.
    request.long_polling_timeout.CopyFrom(
        draw(
            st.builds(
                Duration, seconds=st.integers(-5, 0), nanos=st.integers(-(10**9), 300_000_000)
            )
        )
    )
    return request


ack_requests = st.builds(
    spb.AckMessageRequest,
    group=st.builds(pb.Resource, name=groups),
    topic=st.builds(pb.Resource, name=consumer_topics),
    entries=st.lists(
        st.builds(spb.AckMessageEntry, message_id=texts, receipt_handle=receipt_handles),
        max_size=3,
    ),
)
change_invisible_requests = st.builds(
    spb.ChangeInvisibleDurationRequest,
    group=st.builds(pb.Resource, name=groups),
    topic=st.builds(pb.Resource, name=consumer_topics),
    receipt_handle=receipt_handles,
    invisible_duration=durations,
    message_id=texts,
)
dead_letter_requests = st.builds(
    spb.ForwardMessageToDeadLetterQueueRequest,
    group=st.builds(pb.Resource, name=groups),
    topic=st.builds(pb.Resource, name=consumer_topics),
    receipt_handle=receipt_handles,
    message_id=texts,
    delivery_attempt=st.integers(-(2**31), 2**31 - 1),
    max_delivery_attempts=st.integers(-(2**31), 2**31 - 1),
)
out_of_range_queues = st.builds(
    pb.MessageQueue,
    topic=st.builds(pb.Resource, name=st.sampled_from(TOPICS)),
    id=queue_ids_out_of_range,
)


# -- tests ---------------------------------------------------------------------


def test_invalid_sends_are_refused_and_store_nothing(broker, stub):
    before = commit_log_digests(broker.data_dir)

    @FUZZ
    @given(request=invalid_send_requests())
    def send(request: spb.SendMessageRequest) -> None:
        response = stub.SendMessage(request, timeout=RPC_TIMEOUT_S)
        assert_refused(response.status)
        for entry in response.entries:
            assert_refused(entry.status)

    send()
    assert_commit_log_unchanged(broker.data_dir, before)


def test_garbage_receipts_and_consumer_parameters_are_refused(broker, stub):
    before = commit_log_digests(broker.data_dir)

    @FUZZ
    @given(
        receive=receive_requests(),
        ack=ack_requests,
        change=change_invisible_requests,
        dead_letter=dead_letter_requests,
        queue=out_of_range_queues,
    )
    def barrage(receive, ack, change, dead_letter, queue) -> None:  # type: ignore[no-untyped-def]
        frames = list(stub.ReceiveMessage(receive, timeout=RPC_TIMEOUT_S))
        assert not [f for f in frames if f.HasField("message")], "nothing was sent there"
        assert_refused(final_status(frames))
        assert_refused(stub.AckMessage(ack, timeout=RPC_TIMEOUT_S).status)
        assert_refused(stub.ChangeInvisibleDuration(change, timeout=RPC_TIMEOUT_S).status)
        assert_refused(
            stub.ForwardMessageToDeadLetterQueue(dead_letter, timeout=RPC_TIMEOUT_S).status
        )
        group = pb.Resource(name="fuzz-group")
        pull = spb.PullMessageRequest(group=group, message_queue=queue, batch_size=8)
        assert_refused(final_status(list(stub.PullMessage(pull, timeout=RPC_TIMEOUT_S))))
        assert_refused(
            stub.GetOffset(
                spb.GetOffsetRequest(group=group, message_queue=queue), timeout=RPC_TIMEOUT_S
            ).status
        )
        assert_refused(
            stub.UpdateOffset(
                spb.UpdateOffsetRequest(group=group, message_queue=queue, offset=0),
                timeout=RPC_TIMEOUT_S,
            ).status
        )
        assert_refused(
            stub.QueryOffset(
                spb.QueryOffsetRequest(message_queue=queue), timeout=RPC_TIMEOUT_S
            ).status
        )

    barrage()
    assert_commit_log_unchanged(broker.data_dir, before)


# Methods whose requests must name something that exists, so no request is valid by chance.
UNARY_METHODS = {
    "QueryRoute": spb.QueryRouteResponse,
    "QueryAssignment": spb.QueryAssignmentResponse,
    "SendMessage": spb.SendMessageResponse,
    "AckMessage": spb.AckMessageResponse,
    "ChangeInvisibleDuration": spb.ChangeInvisibleDurationResponse,
    "ForwardMessageToDeadLetterQueue": spb.ForwardMessageToDeadLetterQueueResponse,
    "UpdateOffset": spb.UpdateOffsetResponse,
    "GetOffset": spb.GetOffsetResponse,
    "QueryOffset": spb.QueryOffsetResponse,
}
STREAM_METHODS = {
    "ReceiveMessage": spb.ReceiveMessageResponse,
    "PullMessage": spb.PullMessageResponse,
}


def test_undecodable_request_bytes_are_invalid_arguments(broker, channel):
    before = commit_log_digests(broker.data_dir)
    # No serializers: the bytes go on the wire as they are.
    unary = {m: channel.unary_unary(f"{SERVICE}/{m}") for m in UNARY_METHODS}
    streams = {m: channel.unary_stream(f"{SERVICE}/{m}") for m in STREAM_METHODS}

    @FUZZ
    @given(
        method=st.sampled_from(sorted(UNARY_METHODS) + sorted(STREAM_METHODS)),
        data=st.binary(max_size=300),
    )
    def garbage(method: str, data: bytes) -> None:
        try:
            if method in unary:
                reply = UNARY_METHODS[method].FromString(unary[method](data, timeout=RPC_TIMEOUT_S))
                status = reply.status
            else:
                frames = [
                    STREAM_METHODS[method].FromString(raw)
                    for raw in streams[method](data, timeout=RPC_TIMEOUT_S)
                ]
                status = final_status(frames)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (exc.code(), exc.details())
            assert method in exc.details() or "apache.rocketmq.v2" in exc.details()
            return
        # The bytes happened to parse; then it is an ordinary (bad) request.
        assert_refused(status)

    garbage()
    assert_commit_log_unchanged(broker.data_dir, before)


def test_oversize_frame_is_refused_by_grpc(broker, channel):
    before = commit_log_digests(broker.data_dir)
    send = channel.unary_unary(f"{SERVICE}/SendMessage")
    # Larger than the broker's inbound limit (16 MiB here): gRPC refuses it unread.
    frame = spb.SendMessageRequest(
        messages=[valid_message(body=b"x" * (17 * 1024 * 1024))]
    ).SerializeToString()
    with pytest.raises(grpc.RpcError) as refused:
        send(frame, timeout=60)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details()
    assert_commit_log_unchanged(broker.data_dir, before)


@st.composite
def plausible_messages(draw: st.DrawFn) -> pb.Message:
    """Messages a careless producer might send: often valid, sometimes not."""
    fifo = draw(st.booleans())
    message = valid_message(FIFO if fifo else NORMAL, draw(st.binary(min_size=1, max_size=2048)))
    system = message.system_properties
    # Unique, so an accepted message can be found again by its id.
    system.message_id = draw(texts) + uuid.uuid4().hex
    if draw(st.booleans()):
        system.tag = draw(texts)
    system.keys.extend(draw(st.lists(texts, max_size=3)))
    message.user_properties.update(draw(st.dictionaries(texts, texts, max_size=4)))
    if fifo:
        system.message_type = pb.MessageType.FIFO
        system.message_group = draw(texts)
    system.born_host = draw(st.one_of(texts, st.ip_addresses().map(str)))
    system.born_timestamp.CopyFrom(
        Timestamp(seconds=draw(st.integers(1, 2**36)), nanos=draw(st.integers(0, 10**9 - 1)))
    )
    if draw(st.booleans()):
        system.trace_context = draw(texts)
    return message


def test_plausible_sends_are_stored_intact_or_refused_clearly(stub):
    accepted: dict[str, pb.Message] = {}

    @FUZZ
    @given(message=plausible_messages())
    def send(message: pb.Message) -> None:
        response = stub.SendMessage(
            spb.SendMessageRequest(messages=[message]), timeout=RPC_TIMEOUT_S
        )
        if response.status.code == pb.Code.OK:
            (entry,) = response.entries
            assert entry.message_id == message.system_properties.message_id
            accepted[entry.message_id] = message
        else:
            assert_refused(response.status)

    send()
    assert accepted, "some plausible messages must be accepted"
    received: dict[str, pb.Message] = {}
    for topic in (NORMAL, FIFO):
        for _ in range(50):
            frames = list(
                stub.ReceiveMessage(
                    receive_request("fuzz-verify", topic, polling_s=1, batch=1024),
                    timeout=RPC_TIMEOUT_S,
                )
            )
            batch = [f.message for f in frames if f.HasField("message")]
            if not batch:
                break
            received.update((m.system_properties.message_id, m) for m in batch)
    assert sorted(received) == sorted(accepted)
    for message_id, sent in accepted.items():
        got = received[message_id]
        assert got.body == sent.body
        assert dict(got.user_properties) == dict(sent.user_properties)
        assert got.system_properties.tag == sent.system_properties.tag
        assert list(got.system_properties.keys) == list(sent.system_properties.keys)
        assert got.system_properties.message_group == sent.system_properties.message_group
        assert got.system_properties.trace_context == sent.system_properties.trace_context
        assert same_host(got.system_properties.born_host, sent.system_properties.born_host)
        assert millis(got.system_properties.born_timestamp) == millis(
            sent.system_properties.born_timestamp
        )


def millis(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def same_host(got: str, sent: str) -> bool:
    """IP addresses come back in their normal form, anything else as it was sent;
    without one, the broker records the address the producer connected from."""
    sent = sent or "127.0.0.1"
    try:
        return ipaddress.ip_address(got) == ipaddress.ip_address(sent)
    except ValueError:
        return got == sent


def test_auto_creating_broker_refuses_names_no_topic_can_have(tmp_path):
    """With auto-creation on, a bad name must be refused, not reach topic creation."""
    bad_names = ["", "two words", "x" * 128, "tab\there", "naïve", "a/b"]
    with running_broker(tmp_path, "--auto-create-topics") as broker:
        with grpc.insecure_channel(broker.endpoint) as ch:
            stub = MessagingServiceStub(ch)
            for name in bad_names:
                route = stub.QueryRoute(
                    spb.QueryRouteRequest(topic=pb.Resource(name=name)), timeout=RPC_TIMEOUT_S
                )
                receive = final_status(
                    list(stub.ReceiveMessage(receive_request("g", name), timeout=RPC_TIMEOUT_S))
                )
                send = stub.SendMessage(
                    spb.SendMessageRequest(messages=[valid_message(name)]), timeout=RPC_TIMEOUT_S
                )
                for rpc, status in (
                    ("route", route.status),
                    ("receive", receive),
                    ("send", send.status),
                ):
                    assert status.code == pb.Code.ILLEGAL_TOPIC, (rpc, name, status)
                    # RocketMQ's words, which say what a name may hold or how long it may be.
                    assert NAME_CHARSET in status.message or "max length 127" in status.message
        assert [r for r in broker.log_lines() if r.get("level") == "error"] == []
