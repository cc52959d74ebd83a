"""skiff.records.v1 Append, and BatchingProducer.send_batch, against a real broker process.

A refused append must say which record is wrong and why, leave the queues
exactly as they were, and leave the broker serving.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import BrokerProcess

from skiff_broker.client.errors import InvalidArgument
from skiff_broker.client.producer import BatchingProducer
from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.client.records import encode_record, topic_field
from skiff_broker.metadata.topic_table import MessageType, TopicConfig
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc
from skiff_broker.store.message import encode_properties

MAX_MESSAGE_SIZE = 64 * 1024
TOPIC = "append-normal"
FIFO = "append-fifo"
QUEUES = 2


broker = module_broker(
    "append",
    "--max-message-size",
    str(MAX_MESSAGE_SIZE),
    topics=(
        TopicConfig(TOPIC, QUEUES, QUEUES),
        TopicConfig(FIFO, QUEUES, QUEUES, message_type=MessageType.FIFO),
    ),
)


@pytest.fixture(scope="module")
def stub(broker: BrokerProcess) -> Iterator[records_pb2_grpc.RecordServiceStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield records_pb2_grpc.RecordServiceStub(channel)


def record(
    body: bytes,
    message_id: str,
    *,
    topic: str = TOPIC,
    properties: dict[str, str] | None = None,
    born: int = 1_700_000_000_000,
) -> bytes:
    stored = {**(properties or {}), "UNIQ_KEY": message_id}
    return encode_record(topic_field(topic), body, encode_properties(stored), born)


GOOD = record(b"fine", "ID-good")
PROPERTIES = {"TAGS": "t", "KEYS": "a b", "u": "1"}


def read_back(endpoint: str, answer: rpb.AppendResponse) -> list:
    """The appended messages, once the broker's queues show them all."""
    end = answer.first_offset + answer.record_count
    deadline = time.monotonic() + 30
    with PullConsumer(endpoint) as consumer:
        while consumer.max_offset(TOPIC, answer.queue_id) < end and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(consumer.read_range(TOPIC, answer.queue_id, answer.first_offset, end))


def queue_ends(endpoint: str, topic: str = TOPIC) -> list[int]:
    with PullConsumer(endpoint) as consumer:
        return [r.max_offset for r in consumer.queue_ranges(topic)]


def test_appended_records_come_back_with_the_brokers_fields(broker, stub):
    records = [
        record(
            f"body {i}".encode() * 20, f"ID-{i}", properties={"TAGS": "t", "KEYS": "a b", "u": "1"}
        )
        for i in range(50)
    ]
    answer = stub.Append(rpb.AppendRequest(topic=TOPIC, records=b"".join(records)), timeout=10)
    assert answer.status == rpb.AppendResponse.STORED
    assert answer.record_count == 50
    assert 0 <= answer.queue_id < QUEUES

    got = read_back(broker.endpoint, answer)
    assert [m.queue_offset for m in got] == list(
        range(answer.first_offset, answer.first_offset + 50)
    )
    assert [m.body for m in got] == [f"body {i}".encode() * 20 for i in range(50)]
    assert [m.message_id for m in got] == [f"ID-{i}" for i in range(50)]
    first = got[0]
    assert (first.tag, first.keys, first.properties) == ("t", ("a", "b"), {"u": "1"})
    assert first.born_timestamp == 1_700_000_000_000
    assert first.store_timestamp > first.born_timestamp


def _flip_body(data: bytes) -> bytes:
    broken = bytearray(data)
    broken[100] ^= 0x55
    return bytes(broken)


def _set_int(data: bytes, at: int, value: int) -> bytes:
    broken = bytearray(data)
    struct.pack_into(">i", broken, at, value)
    return bytes(broken)


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        (GOOD[:50], "cut short"),
        (GOOD[:-1], "record 1 (byte"),
        (_set_int(GOOD, 4, 0x12345678), "magic"),
        (_set_int(GOOD, 36, 0x4), "SYSFLAG"),
        (_flip_body(record(b"x" * 200, "ID-crc")), "CRC"),
        (record(b"other topic", "ID-topic", topic="elsewhere"), "one append holds one topic"),
        (record(b"", "ID-empty"), "must not be empty"),
        (record(b"x" * (MAX_MESSAGE_SIZE + 1), "ID-big"), f"1 to {MAX_MESSAGE_SIZE}"),
        (record(b"reserved", "ID-reserved", properties={"DELAY": "3"}), "reserved"),
        (record(b"tag", "ID-tag", properties={"TAGS": "a|b"}), "tag"),
        (encode_record(topic_field(TOPIC), b"no id", b"", 1), "UNIQ_KEY"),
    ],
)
def test_bad_appends_store_nothing_and_say_why(broker, stub, records, problem):
    before = queue_ends(broker.endpoint)
    with pytest.raises(grpc.RpcError) as refused:
        # A good record first: the refusal names the bad one, and the good one is not stored.
        stub.Append(rpb.AppendRequest(topic=TOPIC, records=GOOD + records), timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "nothing was stored" in refused.value.details()
    assert problem in refused.value.details()
    assert queue_ends(broker.endpoint) == before
    assert stub.Append(rpb.AppendRequest(topic=TOPIC, records=GOOD), timeout=10).record_count == 1


def test_an_empty_append_is_refused(stub):
    with pytest.raises(grpc.RpcError) as refused:
        stub.Append(rpb.AppendRequest(topic=TOPIC, records=b""), timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "at least one record" in refused.value.details()


@pytest.mark.parametrize(
    ("topic", "code", "problem"),
    [
        ("append-missing", grpc.StatusCode.NOT_FOUND, "does not exist"),
        ("bad/name", grpc.StatusCode.INVALID_ARGUMENT, "contains illegal characters"),
        ("rmq_sys_mine", grpc.StatusCode.INVALID_ARGUMENT, "cannot access system topic"),
        ("TBW102", grpc.StatusCode.INVALID_ARGUMENT, "cannot access system topic"),
        (FIFO, grpc.StatusCode.FAILED_PRECONDITION, "NORMAL messages only"),
    ],
)
def test_appends_to_topics_that_take_none_are_refused(stub, topic, code, problem):
    with pytest.raises(grpc.RpcError) as refused:
        stub.Append(
            rpb.AppendRequest(topic=topic, records=record(b"x", "ID-x", topic=topic)), timeout=10
        )
    assert refused.value.code() is code
    assert problem in refused.value.details()


def test_random_damage_is_refused_or_stored_intact(broker, stub):
    records = b"".join(record(f"fuzz {i}".encode() * 7, f"ID-fuzz-{i}") for i in range(4))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        damage=st.lists(
            st.tuples(st.integers(0, len(records) - 1), st.integers(0, 255)), min_size=1, max_size=4
        ),
        cut=st.integers(1, len(records)),
    )
    def check(damage: list[tuple[int, int]], cut: int) -> None:
        broken = bytearray(records[:cut])
        for at, value in damage:
            if at < len(broken):
                broken[at] = value
        try:
            answer = stub.Append(rpb.AppendRequest(topic=TOPIC, records=bytes(broken)), timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT, exc.details()
            return
        # Accepted: every record in it must read back whole.
        assert len(read_back(broker.endpoint, answer)) == answer.record_count

    check()
    assert stub.Append(rpb.AppendRequest(topic=TOPIC, records=GOOD), timeout=10).record_count == 1


def test_send_batch_returns_receipts_in_order(broker):
    async def produce() -> tuple[list, list]:
        async with BatchingProducer(broker.endpoint, batch_max_messages=64) as producer:
            receipts = await producer.send_batch(
                TOPIC, [f"batch {i}".encode() for i in range(300)], tag="b", properties={"k": "v"}
            )
            mixed = await producer.send_batch(
                TOPIC,
                [b"ok", b"x" * (MAX_MESSAGE_SIZE + 1), b"ok too"],
                return_exceptions=True,
            )
            with pytest.raises(InvalidArgument, match="must not be empty"):
                await producer.send_batch(TOPIC, [b"fine", b""])
            return receipts, mixed

    receipts, mixed = asyncio.run(produce())
    assert len({r.message_id for r in receipts}) == 300
    # Each receipt's offset, in one of the queues, holds its message.
    stored = {}
    with PullConsumer(broker.endpoint) as consumer:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(r.message_id in stored for r in receipts):
            for queue in range(QUEUES):
                for message in consumer.read_range(TOPIC, queue, 0, 10**9):
                    stored[message.message_id] = message
    for receipt, i in zip(receipts, range(300), strict=True):
        message = stored[receipt.message_id]
        assert message.queue_offset == receipt.offset
        assert (message.body, message.tag, message.properties) == (
            f"batch {i}".encode(),
            "b",
            {"k": "v"},
        )
    assert [type(r).__name__ for r in mixed] == ["SendReceipt", "MessagingError", "SendReceipt"]
    assert mixed[1].code == "MESSAGE_BODY_TOO_LARGE"
