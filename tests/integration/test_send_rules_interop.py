"""RocketMQ's send rules for keys, tags, user properties and message groups, seen from the
official Python client: a message at each limit is stored and read back unchanged, one
past it is refused with the proxy's status code, and nothing refused is stored.

Each topic has one queue, so what the broker stored is read back in full by pulling it.

With ``SKIFF_COMPARE_ROCKETMQ=1`` the module also sends each of those messages to Apache
RocketMQ 5.3.3 (tests/support/rocketmq_peer.py) and asserts that both accept the same
ones and refuse the others with the same status code and the proxy's words.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator

import pytest
from rocketmq import ClientConfiguration, Credentials, Message
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.v5.exception import ClientException
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess
from tests.support.official_client import receive_all, started_producer, started_simple_consumer
from tests.support.rocketmq_peer import COMPARE, COMPARE_REASON, rocketmq_peer

from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.metadata.topic_table import MessageType, TopicConfig

NORMAL_TOPIC = "rules-normal"
FIFO_TOPIC = "rules-fifo"
LIMIT_BYTES = 16 * 1024
LIMIT_PROPERTIES = 128

broker = module_broker(
    "send-rules",
    topics=(
        TopicConfig(NORMAL_TOPIC, 1, 1),
        TopicConfig(FIFO_TOPIC, 1, 1, message_type=MessageType.FIFO),
    ),
)

rocketmq = rocketmq_peer({NORMAL_TOPIC: "NORMAL", FIFO_TOPIC: "FIFO"})


@pytest.fixture(scope="module")
def config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def no_broker_errors(broker: BrokerProcess) -> Iterator[None]:
    before = len(broker.log_lines())
    yield
    assert [r for r in broker.log_lines()[before:] if r.get("level") == "error"] == []


def new_message(topic: str, body: bytes) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def at_the_size_limit(topic: str, extra_bytes: int = 0) -> Message:
    """128 user properties, a tag and two keys: 16 KiB of UTF-8 together (plus ``extra_bytes``),
    with characters just outside RocketMQ's control ranges."""
    msg = new_message(topic, b"at the limit")
    msg.tag = "tag-\xa0-~"  # 8 bytes
    msg.keys = "order-é"  # 8 bytes
    msg.keys = "k" * 8
    used = 8 + 8 + 8
    for i in range(LIMIT_PROPERTIES - 1):
        msg.add_property(f"p{i:03d}", "ü" * 50)  # 4 + 100 bytes
        used += 104
    last_value = LIMIT_BYTES - used - len("last") + extra_bytes
    msg.add_property("last", "v" * last_value)
    return msg


def stored_ids(broker: BrokerProcess, topic: str) -> list[str]:
    with PullConsumer(broker.endpoint) as consumer:
        pulled = consumer.pull(topic, 0, 0, max_messages=64, wait_s=1).messages
    return [m.message_id for m in pulled]


def refused_code(config: ClientConfiguration, topic: str, msg: Message) -> tuple[int, str]:
    with started_producer(config, topic) as client, pytest.raises(ClientException) as refused:
        client.send(msg)
    return refused.value.code, str(refused.value)


def with_key(key: str) -> Callable[[Message], None]:
    def apply(msg: Message) -> None:
        msg.keys = key

    return apply


def with_tag(tag: str) -> Callable[[Message], None]:
    def apply(msg: Message) -> None:
        msg.tag = tag

    return apply


def with_property(name: str, value: str) -> Callable[[Message], None]:
    def apply(msg: Message) -> None:
        msg.add_property(name, value)

    return apply


def test_messages_at_the_limits_are_stored_and_read_back_unchanged(
    config: ClientConfiguration, broker: BrokerProcess, group: str
) -> None:
    msg = at_the_size_limit(NORMAL_TOPIC)
    with started_producer(config, NORMAL_TOPIC) as client:
        message_id = client.send(msg).message_id
    with started_simple_consumer(config, group, NORMAL_TOPIC) as consumer:
        [got] = receive_all(consumer, 1)
    assert got.message_id == message_id
    assert got.body == msg.body
    assert got.tag == msg.tag
    assert got.keys == msg.keys
    assert got.properties == msg.properties
    assert len(got.properties) == LIMIT_PROPERTIES
    assert message_id in stored_ids(broker, NORMAL_TOPIC)


def test_a_message_group_of_63_bytes_is_kept(
    config: ClientConfiguration, broker: BrokerProcess, group: str
) -> None:
    message_group = "é" * 31 + "g"  # 63 bytes of UTF-8
    msg = new_message(FIFO_TOPIC, b"in order")
    msg.message_group = message_group
    with started_producer(config, FIFO_TOPIC) as client:
        message_id = client.send(msg).message_id
    with started_simple_consumer(config, group, FIFO_TOPIC) as consumer:
        [got] = receive_all(consumer, 1)
    assert (got.message_id, got.message_group) == (message_id, message_group)


PAST_THE_LIMITS = {
    "129 user properties": (
        lambda msg: [msg.add_property(f"q{i}", "v") for i in range(LIMIT_PROPERTIES + 1)],
        pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
        "too many user properties, max is 128",
    ),
    "a key over 16 KiB": (
        with_key("k" * (LIMIT_BYTES + 1)),
        pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
        "the total size of user property is too large, max is 16384",
    ),
    "a tag over 16 KiB": (
        with_tag("t" * (LIMIT_BYTES + 1)),
        pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
        "the total size of user property is too large, max is 16384",
    ),
    "a NUL in a key": (
        with_key("order\x00"),
        pb.Code.ILLEGAL_MESSAGE_KEY,
        "key cannot contain control character",
    ),
    "a DEL in a tag": (
        with_tag("tag\x7f"),
        pb.Code.ILLEGAL_MESSAGE_TAG,
        "tag cannot contain control character",
    ),
    "a NUL property name": (
        with_property("\x00", "v"),
        pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
        "the key of property cannot contain control character",
    ),
    "a U+009F in a property value": (
        with_property("name", "v\x9f"),
        pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
        "the value of property cannot contain control character",
    ),
    "a system property name": (
        with_property("DELAY", "3"),
        pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
        "property is used by system",
    ),
}


@pytest.mark.parametrize("case", PAST_THE_LIMITS, ids=list(PAST_THE_LIMITS))
def test_a_message_past_a_limit_is_refused_and_not_stored(
    config: ClientConfiguration, broker: BrokerProcess, case: str
) -> None:
    change, code, words = PAST_THE_LIMITS[case]
    msg = new_message(NORMAL_TOPIC, f"refused: {case}".encode())
    change(msg)
    before = stored_ids(broker, NORMAL_TOPIC)
    got_code, text = refused_code(config, NORMAL_TOPIC, msg)
    assert (got_code, words in text) == (code, True), text
    assert stored_ids(broker, NORMAL_TOPIC) == before


def test_properties_tag_and_keys_one_byte_over_16_kib_are_refused(
    config: ClientConfiguration, broker: BrokerProcess
) -> None:
    before = stored_ids(broker, NORMAL_TOPIC)
    got_code, text = refused_code(config, NORMAL_TOPIC, at_the_size_limit(NORMAL_TOPIC, 1))
    assert got_code == pb.Code.MESSAGE_PROPERTIES_TOO_LARGE, text
    assert "max is 16384" in text and "16385 bytes" in text
    assert stored_ids(broker, NORMAL_TOPIC) == before


@pytest.mark.parametrize(
    ("message_group", "words"),
    [("é" * 32, "message group exceed the max size 64"), ("g\x1f", "control character")],
)
def test_a_message_group_of_64_bytes_or_with_a_control_character_is_refused(
    config: ClientConfiguration, broker: BrokerProcess, message_group: str, words: str
) -> None:
    msg = new_message(FIFO_TOPIC, b"refused group")
    msg.message_group = message_group
    before = stored_ids(broker, FIFO_TOPIC)
    got_code, text = refused_code(config, FIFO_TOPIC, msg)
    assert got_code == pb.Code.ILLEGAL_MESSAGE_GROUP, text
    assert words in text
    assert stored_ids(broker, FIFO_TOPIC) == before


def grouped(message_group: str) -> Message:
    msg = new_message(FIFO_TOPIC, b"grouped")
    msg.message_group = message_group
    return msg


def past_a_limit(case: str) -> Message:
    msg = new_message(NORMAL_TOPIC, f"refused: {case}".encode())
    PAST_THE_LIMITS[case][0](msg)
    return msg


# Each message both systems are sent, and the proxy's words for a refusal (None: stored).
COMPARED: dict[str, tuple[Callable[[], Message], str | None]] = {
    "at the size limit": (lambda: at_the_size_limit(NORMAL_TOPIC), None),
    "one byte over 16 KiB": (
        lambda: at_the_size_limit(NORMAL_TOPIC, 1),
        "the total size of user property is too large, max is 16384",
    ),
    "a message group of 63 bytes": (lambda: grouped("é" * 31 + "g"), None),
    "a message group of 64 bytes": (
        lambda: grouped("é" * 32),
        "message group exceed the max size 64",
    ),
    "a message group with a control character": (
        lambda: grouped("g\x1f"),
        "message group cannot contain control character",
    ),
    **{
        case: (lambda case=case: past_a_limit(case), words)
        for case, (_, _, words) in PAST_THE_LIMITS.items()
    },
}


def send_outcome(config: ClientConfiguration, msg: Message) -> tuple[str, str]:
    """("OK", "") if the message was stored, else its status code's name and the error."""
    with started_producer(config, msg.topic) as client:
        try:
            client.send(msg)
        except ClientException as refused:
            return pb.Code.Name(refused.code), str(refused)
    return "OK", ""


@pytest.mark.skipif(not COMPARE, reason=COMPARE_REASON)
def test_rocketmq_stores_and_refuses_the_same_messages_with_the_same_codes(
    config: ClientConfiguration, rocketmq
) -> None:
    theirs = ClientConfiguration(rocketmq.endpoint, Credentials())
    answers = {
        case: {"skiff": send_outcome(config, make()), "rocketmq": send_outcome(theirs, make())}
        for case, (make, _) in COMPARED.items()
    }
    text = json.dumps(answers, indent=2, ensure_ascii=False)
    print(text)
    for case, (_, words) in COMPARED.items():
        ours, their = answers[case]["skiff"], answers[case]["rocketmq"]
        assert ours[0] == their[0], (case, text)
        if words is None:
            assert ours[0] == "OK", (case, text)
        else:
            assert words in ours[1] and words in their[1], (case, text)
