"""The official rocketmq-python-client against a real broker process.

One broker serves the whole module (each test uses its own topics and consumer
groups). It allows two delivery attempts, so a message a consumer keeps failing
reaches the dead-letter topic after one redelivery.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    PushConsumer,
)
from rocketmq.grpc_protocol import FilterType
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.exception import BadRequestException
from rocketmq.v5.util.misc import Misc
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import SHORT_INVISIBLE_ARGS, BrokerProcess
from tests.support.official_client import receive_all, started_producer, started_simple_consumer
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import MessageType, TopicConfig

MAX_ATTEMPTS = 2
# Generous: polls end as soon as their condition holds.
DEADLINE_S = 90.0
# The broker is started accepting invisible times from 1 s (SHORT_INVISIBLE_ARGS); a little
# more keeps the "not yet redelivered" window of the FIFO test comfortably wide.
SHORT_INVISIBLE_S = 3

NORMAL_TOPICS = (
    "interop-props",
    "interop-redeliver",
    "interop-tags",
    "interop-push",
    "interop-push-retry",
    "interop-push-dlq",
    "interop-sql",
)
FIFO_TOPICS = (
    "interop-fifo",
    "interop-fifo-redeliver",
    "interop-fifo-push",
    "interop-fifo-dlq",
    "interop-fifo-sql",
)


broker = module_broker(
    "interop",
    "--max-delivery-attempts",
    str(MAX_ATTEMPTS),
    *SHORT_INVISIBLE_ARGS,
    topics=(
        *(TopicConfig(name, 4, 4) for name in NORMAL_TOPICS),
        *(TopicConfig(name, 4, 4, message_type=MessageType.FIFO) for name in FIFO_TOPICS),
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
    """Whatever a test does, the broker must not log an internal failure."""
    before = len(broker.log_lines())
    yield
    errors = [r for r in broker.log_lines()[before:] if r.get("level") == "error"]
    assert errors == []


@pytest.fixture
def group() -> str:
    """A consumer group no other test uses."""
    return f"g-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def push_consumer(
    config: ClientConfiguration, group: str, topic: str, listener: MessageListener
) -> Iterator[PushConsumer]:
    client = PushConsumer(config, group, listener, {topic: FilterExpression()})
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def message(topic: str, body: bytes, *, tag: str = "", group: str = "") -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    if tag:
        msg.tag = tag
    if group:
        msg.message_group = group
    return msg


def receive_frames(
    stub: MessagingServiceStub, request: spb.ReceiveMessageRequest
) -> list[spb.ReceiveMessageResponse]:
    return list(stub.ReceiveMessage(request, timeout=30))


class RecordingListener(MessageListener):
    """Records every delivery; ``fail_when(message)`` decides FAILURE."""

    def __init__(self, fail_when: Callable[[Message], bool] = lambda _: False) -> None:
        self._fail_when = fail_when
        self._lock = threading.Lock()
        self.deliveries: list[Message] = []

    def consume(self, message: Message) -> ConsumeResult:
        with self._lock:
            self.deliveries.append(message)
        return ConsumeResult.FAILURE if self._fail_when(message) else ConsumeResult.SUCCESS

    def snapshot(self) -> list[Message]:
        with self._lock:
            return list(self.deliveries)

    def message_ids(self) -> set[str]:
        return {m.message_id for m in self.snapshot()}

    def attempts(self, message_id: str) -> list[int]:
        return [m.delivery_attempt for m in self.snapshot() if m.message_id == message_id]


def group_offsets_caught_up(stub: MessagingServiceStub, group: str, topic: str) -> bool:
    """True when the broker holds every message of ``topic`` as acknowledged by ``group``."""
    for queue_id in range(4):
        queue = pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)
        end = stub.QueryOffset(
            spb.QueryOffsetRequest(message_queue=queue, query_offset_policy=pb.END), timeout=10
        )
        assert end.status.code == pb.Code.OK, end.status
        if end.offset == 0:
            continue
        consumed = stub.GetOffset(
            spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=queue), timeout=10
        )
        if consumed.status.code != pb.Code.OK or consumed.offset != end.offset:
            return False
    return True


# -- producing and receiving ---------------------------------------------------


def test_messages_come_back_byte_identical_with_their_properties(config, group):
    topic = "interop-props"
    bodies = [bytes(range(256)), b"\x00" * 1000, "grüße, 世界".encode(), b"\xff\xfe\x00\x01"]
    sent: dict[str, tuple[Message, int, int]] = {}
    with started_producer(config, topic) as client:
        for i, body in enumerate(bodies):
            msg = message(topic, body, tag=f"Tag{i}")
            msg.keys = f"order-{i}"
            msg.keys = f"customer-{i}"
            msg.add_property("index", str(i))
            msg.add_property("note", "ünïcode & spaces = fine")
            before = int(time.time())
            receipt = client.send(msg)
            sent[receipt.message_id] = (msg, before, int(time.time()))

    with started_simple_consumer(config, group, topic) as consumer:
        received = receive_all(consumer, len(bodies))

    assert sorted(m.message_id for m in received) == sorted(sent)
    for got in received:
        original, before, after = sent[got.message_id]
        assert got.body == original.body
        assert got.tag == original.tag
        assert got.keys == original.keys
        assert got.properties == original.properties
        assert got.born_host == Misc.get_local_ip()
        # The client sets whole seconds; they come back unchanged, as milliseconds.
        assert got.born_timestamp % 1000 == 0
        assert before <= got.born_timestamp // 1000 <= after
        assert got.delivery_attempt == 1
        assert not got.corrupted, "the body digest the broker sent must match the body"


def test_unacked_message_is_redelivered_after_its_invisible_time(config, group):
    topic = "interop-redeliver"
    with started_producer(config, topic) as client:
        message_id = client.send(message(topic, b"redeliver me")).message_id

    with started_simple_consumer(config, group, topic, await_s=20) as consumer:
        (first,) = receive_all(consumer, 1, SHORT_INVISIBLE_S, ack=False)
        (second,) = receive_all(consumer, 1, SHORT_INVISIBLE_S, ack=False)
        consumer.ack(second)
    assert first.message_id == second.message_id == message_id
    assert second.body == b"redeliver me"
    assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
    with started_simple_consumer(config, group, topic, await_s=SHORT_INVISIBLE_S + 2) as consumer:
        assert consumer.receive(32, 30) == [], "an acked message must not come back"


def test_tag_filter_delivers_only_the_named_tags(config, group):
    topic = "interop-tags"
    # 'Tah"' and 'Tah#' share their tag hash with TagA and TagB: the consume queue
    # cannot tell them apart, the exact check after it must.
    tags = ["TagA", "TagB", "TagC", "", "TagA", "TagAB", 'Tah"', "Tah#"]
    with started_producer(config, topic) as client:
        ids = [
            client.send(message(topic, f"m{i}".encode(), tag=t)).message_id
            for i, t in enumerate(tags)
        ]
    wanted = {ids[i] for i, t in enumerate(tags) if t in ("TagA", "TagB")}

    with started_simple_consumer(config, group, topic, "TagA||TagB") as consumer:
        filtered = receive_all(consumer, len(wanted))
        assert consumer.receive(32, 30) == [], "messages of other tags must not be delivered"
    assert {m.message_id for m in filtered} == wanted
    assert len(filtered) == len(wanted)

    # Another group without a filter still gets everything: the rest was stored, only filtered.
    with started_simple_consumer(config, f"{group}-all", topic) as consumer:
        everything = receive_all(consumer, len(tags))
    assert sorted(m.message_id for m in everything) == sorted(ids)


# -- push consumers ------------------------------------------------------------


def test_push_consumer_consumes_every_message_exactly_once(config, group, stub):
    topic = "interop-push"
    count = 60
    with started_producer(config, topic) as client:
        sent = {
            client.send(message(topic, b"push-%d" % i)).message_id: b"push-%d" % i
            for i in range(count)
        }

    listener = RecordingListener()
    with push_consumer(config, group, topic, listener):
        wait_for(
            lambda: len(listener.snapshot()) >= count,
            f"{count} messages consumed",
            deadline_s=DEADLINE_S,
        )
        wait_for(
            lambda: group_offsets_caught_up(stub, group, topic),
            "every ack recorded",
            deadline_s=DEADLINE_S,
        )
    deliveries = listener.snapshot()
    assert sorted(m.message_id for m in deliveries) == sorted(sent), "each message once"
    assert all(m.body == sent[m.message_id] for m in deliveries)
    assert {m.delivery_attempt for m in deliveries} == {1}


def test_failed_consumption_is_redelivered_with_a_higher_attempt(config, group):
    topic = "interop-push-retry"
    with started_producer(config, topic) as client:
        message_id = client.send(message(topic, b"fail once")).message_id

    listener = RecordingListener(fail_when=lambda m: m.delivery_attempt == 1)
    with push_consumer(config, group, topic, listener):
        wait_for(
            lambda: len(listener.attempts(message_id)) >= 2, "the redelivery", deadline_s=DEADLINE_S
        )
    assert listener.attempts(message_id) == [1, 2]
    assert all(m.body == b"fail once" for m in listener.snapshot())


def topic_exists(stub: MessagingServiceStub, topic: str) -> bool:
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=10)
    return route.status.code == pb.Code.OK


def test_message_failing_every_attempt_lands_in_the_dead_letter_topic(config, group, stub):
    topic = "interop-push-dlq"
    with started_producer(config, topic) as client:
        poison = message(topic, b"\x00poison\xff", tag="Poison")
        poison.add_property("origin", "dlq-test")
        message_id = client.send(poison).message_id

    listener = RecordingListener(fail_when=lambda _: True)
    dead_letter_topic = f"%DLQ%{group}"
    with push_consumer(config, group, topic, listener):
        wait_for(
            lambda: len(listener.attempts(message_id)) >= MAX_ATTEMPTS,
            "every attempt",
            deadline_s=DEADLINE_S,
        )
        # The broker creates the dead-letter topic when it moves the first message there.
        wait_for(
            lambda: topic_exists(stub, dead_letter_topic),
            f"{dead_letter_topic} to exist",
            deadline_s=DEADLINE_S,
        )
        with started_simple_consumer(config, f"{group}-dlq", dead_letter_topic) as dlq:
            (dead,) = receive_all(dlq, 1)
        assert listener.attempts(message_id) == list(range(1, MAX_ATTEMPTS + 1))
    assert dead.message_id == message_id
    assert dead.body == b"\x00poison\xff"
    assert dead.tag == "Poison"
    assert dead.properties == {"origin": "dlq-test"}


# -- FIFO ----------------------------------------------------------------------


def send_fifo(config: ClientConfiguration, topic: str, groups: list[str], per_group: int):
    """Interleaved sends; returns each message group's message ids in send order."""
    order: dict[str, list[str]] = {g: [] for g in groups}
    with started_producer(config, topic) as client:
        for i in range(per_group):
            for g in groups:
                receipt = client.send(message(topic, f"{g}:{i}".encode(), group=g))
                order[g].append(receipt.message_id)
    return order


def test_fifo_messages_of_a_group_come_back_in_send_order(config, group):
    topic = "interop-fifo"
    order = send_fifo(config, topic, ["order-1", "order-2", "order-3"], 8)

    with started_simple_consumer(config, group, topic) as consumer:
        received = receive_all(consumer, 24)
    for message_group, ids in order.items():
        got = [m for m in received if m.message_group == message_group]
        assert [m.message_id for m in got] == ids
        assert [m.body for m in got] == [f"{message_group}:{i}".encode() for i in range(8)]


def test_fifo_group_waits_for_an_unacked_message_and_gets_it_again_first(config, group):
    topic = "interop-fifo-redeliver"
    first_id, second_id = send_fifo(config, topic, ["only"], 2)["only"]

    with started_simple_consumer(config, group, topic, await_s=20) as consumer:
        (first,) = consumer.receive(1, SHORT_INVISIBLE_S)
        assert first.message_id == first_id
        # Not acked: the next receive must not skip ahead to the second message,
        # it waits until the first becomes visible again and reads on from it.
        again, second = receive_all(consumer, 2, SHORT_INVISIBLE_S, ack=False)
        assert again.message_id == first_id
        assert again.delivery_attempt == 2
        consumer.ack(again)
        consumer.ack(second)
    assert second.message_id == second_id
    assert second.body == b"only:1"
    assert second.delivery_attempt == 1


def test_fifo_push_consumer_consumes_each_group_in_order(config, group):
    topic = "interop-fifo-push"
    groups = [f"fifo-{i}" for i in range(4)]
    order = send_fifo(config, topic, groups, 10)

    listener = RecordingListener()
    with push_consumer(config, group, topic, listener):
        wait_for(
            lambda: len(listener.snapshot()) >= 40, "40 messages consumed", deadline_s=DEADLINE_S
        )
    deliveries = listener.snapshot()
    for message_group, ids in order.items():
        assert [m.message_id for m in deliveries if m.message_group == message_group] == ids


def test_fifo_push_consumer_moves_a_failing_message_aside_and_goes_on(config, group, stub):
    """A FIFO consumer retries locally, then forwards the message to the dead-letter
    topic itself; the rest of its message group follows, still in order."""
    topic = "interop-fifo-dlq"
    first, poison, last = send_fifo(config, topic, ["orders"], 3)["orders"]

    listener = RecordingListener(fail_when=lambda m: m.message_id == poison)
    dead_letter_topic = f"%DLQ%{group}"
    with push_consumer(config, group, topic, listener):
        wait_for(
            lambda: last in listener.message_ids(),
            "the message after the poison one",
            deadline_s=DEADLINE_S,
        )
    # Each local retry calls the listener again; the group waits for all of them.
    expected = [first] + [poison] * MAX_ATTEMPTS + [last]
    assert [m.message_id for m in listener.snapshot()] == expected
    wait_for(
        lambda: topic_exists(stub, dead_letter_topic),
        f"{dead_letter_topic} to exist",
        deadline_s=DEADLINE_S,
    )
    with started_simple_consumer(config, f"{group}-dlq", dead_letter_topic) as dlq:
        (dead,) = receive_all(dlq, 1)
    assert dead.message_id == poison
    assert dead.body == b"orders:1"


# -- refusals ------------------------------------------------------------------


def test_sending_to_an_unknown_topic_fails_naming_the_topic(config, stub):
    topic = "interop-no-such-topic"
    with started_producer(config, topic) as client, pytest.raises(Exception, match=topic):
        client.send(message(topic, b"lost"))

    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=10)
    assert route.status.code == pb.Code.TOPIC_NOT_FOUND
    assert topic in route.status.message
    send = stub.SendMessage(
        spb.SendMessageRequest(
            messages=[
                pb.Message(
                    topic=pb.Resource(name=topic),
                    body=b"lost",
                    system_properties=pb.SystemProperties(
                        message_id=uuid.uuid4().hex, body_encoding=pb.Encoding.IDENTITY
                    ),
                )
            ]
        ),
        timeout=10,
    )
    assert send.status.code == pb.Code.TOPIC_NOT_FOUND
    assert topic in send.status.message


def sql_consumer(config: ClientConfiguration, group: str, topic: str, sql: str):
    return started_simple_consumer(config, group, topic, FilterExpression(sql, FilterType.SQL))


@pytest.mark.parametrize("topic", ["interop-sql", "interop-fifo-sql"])
def test_sql92_filter_delivers_only_the_matching_messages(config, group, topic):
    # a, b as a producer sets them; missing properties, and one a that is no number.
    cases = [
        ({"a": "6", "b": "x"}, True),
        ({"a": "9", "b": "x"}, True),
        ({"a": "5", "b": "x"}, False),  # not greater than 5
        ({"a": "7", "b": "y"}, False),  # b differs
        ({"b": "x"}, False),  # a missing: unknown, not delivered
        ({"a": "seven", "b": "x"}, False),  # not a number: RocketMQ's evaluator refuses it
        ({}, False),
    ]
    fifo = "fifo" in topic
    with started_producer(config, topic) as client:
        ids = []
        for i, (properties, _) in enumerate(cases):
            sent = message(topic, b"sql-%d" % i, group="g1" if fifo else "")
            for key, value in properties.items():
                sent.add_property(key, value)
            ids.append(client.send(sent).message_id)
    wanted = {ids[i] for i, (_, match) in enumerate(cases) if match}

    with sql_consumer(config, group, topic, "a > 5 AND b = 'x'") as consumer:
        filtered = receive_all(consumer, len(wanted))
        assert consumer.receive(32, 30) == [], "messages that do not match must not come"
    assert sorted(m.message_id for m in filtered) == sorted(wanted)
    if fifo:
        assert [m.message_id for m in filtered] == [i for i in ids if i in wanted]
    # The rest was stored: a group subscribing by property presence gets every message with b.
    with sql_consumer(config, f"{group}-b", topic, "b IS NOT NULL") as consumer:
        with_b = receive_all(consumer, 6)
    assert sorted(m.message_id for m in with_b) == sorted(ids[:6])


def test_sql92_filter_matches_tags_and_keys(config, group):
    topic = "interop-sql"
    with started_producer(config, topic) as client:
        tagged = message(topic, b"tagged", tag="TagA")
        tagged.keys = "order-1"
        wanted = client.send(tagged).message_id
        client.send(message(topic, b"other", tag="TagB"))
    with sql_consumer(config, group, topic, "TAGS = 'TagA' AND KEYS = 'order-1'") as consumer:
        got = receive_all(consumer, 1)
        assert consumer.receive(32, 30) == []
    assert [m.message_id for m in got] == [wanted]


def test_a_sql92_filter_that_does_not_parse_is_refused_with_its_position(config, group, stub):
    topic = "interop-sql"
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.SQL, expression="a > > 1"),
        batch_size=16,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=1),
    )
    statuses = [f.status for f in receive_frames(stub, request) if f.HasField("status")]
    assert [s.code for s in statuses] == [pb.Code.ILLEGAL_FILTER_EXPRESSION]
    assert "position 5" in statuses[0].message

    with (
        sql_consumer(config, group, topic, "a = 1 AND") as consumer,
        pytest.raises(BadRequestException, match="position 10"),
    ):
        consumer.receive(16, 30)
