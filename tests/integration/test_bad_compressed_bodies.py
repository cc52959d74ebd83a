"""Readers never stall behind a stored body flagged compressed that does not inflate.

Such bodies can no longer come in through the write doors, but a data
directory may hold them from before the check, or from replication. The test
writes one directly with the store (the doors would refuse it): a body that
is not zlib or gzip data, and a "zlib bomb" that inflates far past the
broker's maximum message size, ahead of good messages, plain and compressed.
Then a real broker process serves that directory, and every v2 reader must get
all of them: the good ones as sent, the bad ones as their stored bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import (
    COMMIT_LOG_FILE_SIZE,
    SMALL_FILES_ENV,
    BrokerProcess,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
)

from skiff_broker.client.messaging import MessagingClient
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.store.config import MiB, StoreConfig
from skiff_broker.store.message import Message, SysFlag
from skiff_broker.store.message_store import MessageStore
from skiff_broker.wire.property_names import UNINFLATABLE_BODY

TOPIC = "bad-bodies"
MAX_MESSAGE_SIZE = 64 * 1024
# Starts like zlib data would not: the official client fails with "incorrect header check".
NOT_ZLIB = b"this body is flagged compressed but was never compressed"
# 1 KiB that inflates to 16 MiB: far past the 64 KiB limit.
BOMB = zlib.compress(bytes(16 * MiB), 9)
# What a consumer is told about each.
REASONS = {NOT_ZLIB: "is not zlib or gzip data", BOMB: f"inflates to more than {MAX_MESSAGE_SIZE}"}
GOOD_PLAIN = [b"plain message %d" % i for i in range(10)]
GOOD_COMPRESSED = [b"compressed message %d " % i * 200 for i in range(10)]
GOOD = GOOD_PLAIN + GOOD_COMPRESSED
DEADLINE_S = 60.0


def digests(bodies: dict[str, bytes]) -> dict[str, str]:
    """Bodies by message ID, as digests: a failure shows them short, not 16 MiB long."""
    return {message_id: hashlib.sha256(body).hexdigest() for message_id, body in bodies.items()}


def _stored_message(body: bytes, *, compressed: bool) -> tuple[str, Message]:
    message_id = uuid.uuid4().hex.upper()
    return message_id, Message(
        TOPIC,
        body,
        queue_id=0,
        properties={"UNIQ_KEY": message_id, "TAGS": "t"},
        sys_flag=int(SysFlag.COMPRESSED) if compressed else 0,
    )


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """A data directory holding the two bad bodies first, then the good messages in order.

    Returns it with each message's ID mapped to the body a consumer must see.
    """
    tmp_path = tmp_path_factory.mktemp("bad-bodies")
    data_dir = data_dir_of(tmp_path)
    create_topics(data_dir, TopicConfig(TOPIC, 1, 1))
    expected: dict[str, bytes] = {}
    messages = []
    for body in (NOT_ZLIB, BOMB):
        message_id, message = _stored_message(body, compressed=True)
        expected[message_id] = body  # its stored bytes, as they are
        messages.append(message)
    for body in GOOD_PLAIN:
        message_id, message = _stored_message(body, compressed=False)
        expected[message_id] = body
        messages.append(message)
    for body in GOOD_COMPRESSED:
        message_id, message = _stored_message(zlib.compress(body), compressed=True)
        expected[message_id] = body  # inflated by the consumer
        messages.append(message)
    config = StoreConfig(
        str(data_dir),
        commit_log_file_size=8 * MiB,
        max_message_size=MAX_MESSAGE_SIZE,
        consume_queue_units_per_file=int(SMALL_FILES_ENV["SKIFF_CONSUME_QUEUE_FILE_ENTRIES"]),
        max_index_num=int(SMALL_FILES_ENV["SKIFF_INDEX_FILE_ENTRIES"]),
        max_hash_slot_num=int(SMALL_FILES_ENV["SKIFF_INDEX_FILE_ENTRIES"]) // 4,
    )
    assert COMMIT_LOG_FILE_SIZE == "8m"
    with MessageStore(config) as store:
        for message in messages:
            result = store.put_messages([message])
            assert result.append is not None, result
    return tmp_path, expected


@pytest.fixture(scope="module")
def broker(stored: tuple[Path, dict[str, bytes]]) -> Iterator[BrokerProcess]:
    tmp_path, _ = stored
    with running_broker(tmp_path, "--max-message-size", str(MAX_MESSAGE_SIZE)) as process:
        yield process


@pytest.fixture
def expected(stored: tuple[Path, dict[str, bytes]]) -> dict[str, bytes]:
    return stored[1]


@pytest.fixture
def reasons(expected: dict[str, bytes]) -> dict[str, str]:
    """What a consumer is told about each bad message, by its ID."""
    return {i: REASONS[body] for i, body in expected.items() if body in (NOT_ZLIB, BOMB)}


@pytest.fixture
def bad_ids(reasons: dict[str, str]) -> set[str]:
    return set(reasons)


@pytest.fixture(autouse=True)
def no_broker_errors(broker: BrokerProcess) -> Iterator[None]:
    before = len(broker.log_lines())
    yield
    errors = [r for r in broker.log_lines()[before:] if r.get("level") == "error"]
    assert errors == []


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


def warnings_about(broker: BrokerProcess, message_ids: set[str]) -> dict[str, str]:
    """The broker's WARNING lines that name one of ``message_ids``, by ID."""
    found = {}
    for record in broker.log_lines():
        if record.get("level") != "warning":
            continue
        for message_id in message_ids:
            if message_id in record["msg"]:
                found[message_id] = record["msg"]
    return found


def test_official_simple_consumer_gets_every_message_and_acks_the_bad_ones(
    broker, expected, reasons, bad_ids, group
):
    config = ClientConfiguration(broker.endpoint, Credentials())
    consumer = SimpleConsumer(config, group, {TOPIC: FilterExpression("*")}, 2)
    consumer.startup()
    try:
        received = {}
        end = time.monotonic() + DEADLINE_S
        while len(received) < len(expected) and time.monotonic() < end:
            for message in consumer.receive(32, 30):
                received[message.message_id] = message
                consumer.ack(message)
        assert digests({i: m.body for i, m in received.items()}) == digests(expected)
        for message_id in bad_ids:
            assert reasons[message_id] in received[message_id].properties[UNINFLATABLE_BODY]
        for message_id in set(expected) - bad_ids:
            assert UNINFLATABLE_BODY not in received[message_id].properties
        # Everything was acknowledged, the bad ones too: nothing comes again.
        assert consumer.receive(32, 30) == []
    finally:
        consumer.shutdown()
    warned = warnings_about(broker, bad_ids)
    assert set(warned) == bad_ids
    for text in warned.values():
        assert f"{TOPIC} queue 0 offset" in text


def test_skiff_consume_prints_every_message_and_warns_about_the_bad_ones(
    broker, expected, reasons, bad_ids, group
):
    result = subprocess.run(
        [
            *(sys.executable, "-m", "skiff_broker"),
            "consume",
            "--endpoint",
            broker.endpoint,
            "--group",
            group,
            "--topic",
            TOPIC,
            "--wait",
            "2",
            "--json",
        ],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    bodies = {}
    for message in printed:
        raw = message["body"].encode()
        if message["body_encoding"] == "base64":
            raw = base64.b64decode(message["body"])
        bodies[message["message_id"]] = raw
        assert reasons.get(message["message_id"], "") in message["body_problem"]
        assert bool(message["body_problem"]) == (message["message_id"] in bad_ids)
        assert UNINFLATABLE_BODY not in message["properties"]
    assert digests(bodies) == digests(expected)
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    warned = [record for record in logged if record["level"] == "warning"]
    assert {i for i in bad_ids if any(i in w["msg"] for w in warned)} == bad_ids
    assert f"consumed {len(expected)} messages" in result.stderr


def test_skiff_messaging_client_gets_every_message_with_the_reason_for_the_bad_ones(
    broker, expected, reasons, bad_ids, group
):
    received = {}
    with MessagingClient(broker.endpoint) as client:
        end = time.monotonic() + DEADLINE_S
        while len(received) < len(expected) and time.monotonic() < end:
            batch = client.receive(group, TOPIC, wait_s=2)
            client.ack(group, TOPIC, batch)
            received.update({m.message_id: m for m in batch})
    assert digests({i: m.body for i, m in received.items()}) == digests(expected)
    for message_id, message in received.items():
        assert reasons.get(message_id, "") in message.body_problem
        assert bool(message.body_problem) == (message_id in bad_ids)
    assert all(UNINFLATABLE_BODY not in m.properties for m in received.values())


def test_pull_message_returns_every_message_in_queue_order(
    broker, expected, reasons, bad_ids, group
):
    with grpc.insecure_channel(broker.endpoint) as channel:
        frames = list(
            MessagingServiceStub(channel).PullMessage(
                spb.PullMessageRequest(
                    group=pb.Resource(name=group),
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0),
                    offset=0,
                    batch_size=64,
                    filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                ),
                timeout=30,
            )
        )
    messages = [f.message for f in frames if f.HasField("message")]
    assert [f.next_offset for f in frames if f.HasField("next_offset")] == [len(expected)]
    assert [m.system_properties.queue_offset for m in messages] == list(range(len(expected)))
    bodies = {}
    for message in messages:
        message_id = message.system_properties.message_id
        encoding = message.system_properties.body_encoding
        if message_id in bad_ids:
            assert encoding == pb.Encoding.IDENTITY, message_id
            assert reasons[message_id] in message.user_properties[UNINFLATABLE_BODY]
        if encoding == pb.Encoding.GZIP:
            # Good compressed bodies go out as stored, for the consumer to inflate.
            bodies[message_id] = zlib.decompress(message.body)
        else:
            bodies[message_id] = message.body
    assert digests(bodies) == digests(expected)
    compressed = {
        m.system_properties.message_id
        for m in messages
        if m.system_properties.body_encoding == pb.Encoding.GZIP
    }
    assert len(compressed) == len(GOOD_COMPRESSED)
