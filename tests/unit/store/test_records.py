"""Raw records out of a real store (get_records) and back into messages (decode_records)."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator

import pytest

from skiff_broker.client.records import CorruptRecords, decode_records
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.hashing import tag_hash
from skiff_broker.store.message import Message, SysFlag
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.results import GetStatus


@pytest.fixture
def store(store_config: Callable[..., StoreConfig]) -> Iterator[MessageStore]:
    config = store_config(
        flush_type=FlushType.SYNC_FLUSH,
        consume_queue_units_per_file=50,
        clean_resource_interval=3600,  # retention runs only when the test calls it
    )
    with MessageStore(config) as s:
        yield s


def put(store: MessageStore, messages: list[Message]) -> list[int]:
    """Store ``messages``; their commit-log offsets."""
    result = store.put_messages(messages)
    assert result.ok and result.append is not None, result.reason
    return result.append.physical_offsets


def message(i: int, queue_id: int = 0, **properties: str) -> Message:
    return Message(
        "T",
        f"body {i:05d} ".encode() * 8,
        queue_id,
        properties={
            "UNIQ_KEY": f"ID{i:05d}",
            "TAGS": f"Tag{i % 3}",
            "KEYS": f"k{i} x{i}",
            "u": str(i),
            **properties,
        },
        born_timestamp=1_700_000_000_000 + i,
        born_host="10.0.0.7:0",
    )


def test_records_decode_to_the_messages_that_were_put(store: MessageStore) -> None:
    # Two queues written in alternating batches: each queue's records lie in runs.
    for start in range(0, 120, 20):
        put(store, [message(i, queue_id=(start // 20) % 2) for i in range(start, start + 20)])
    assert store.wait_dispatched()

    got = store.get_records("T", 0, 0, 1000)
    assert (got.status, got.count, got.next_offset, got.max_offset) == (GetStatus.FOUND, 60, 60, 60)
    decoded = decode_records(got.data)
    expected = [i for i in range(120) if (i // 20) % 2 == 0]
    assert [m.body for m in decoded] == [f"body {i:05d} ".encode() * 8 for i in expected]
    assert [m.queue_offset for m in decoded] == list(range(60))
    first = decoded[0]
    assert (first.topic, first.queue_id, first.message_id, first.tag, first.keys) == (
        "T",
        0,
        "ID00000",
        "Tag0",
        ("k0", "x0"),
    )
    # Only the user's own properties; the broker's have attributes of their own.
    assert first.properties == {"u": "0"}
    assert first.born_timestamp == 1_700_000_000_000
    assert first.store_timestamp >= first.born_timestamp

    # Count and byte limits end a fetch; the next one starts where it ended.
    size = len(got.data) // 60
    got = store.get_records("T", 1, 5, 7)
    assert (got.count, got.next_offset) == (7, 12)
    assert [m.queue_offset for m in decode_records(got.data)] == list(range(5, 12))
    got = store.get_records("T", 1, 0, 1000, max_bytes=3 * size)
    assert (got.count, got.next_offset) == (3, 3)

    # Tag hashes filter on the broker; the scan still moves past what did not match.
    got = store.get_records("T", 0, 0, 4, tag_codes={tag_hash("Tag1")})
    assert {m.tag for m in decode_records(got.data)} == {"Tag1"}
    assert got.count == 4

    got = store.get_records("T", 0, 60, 10)
    assert (got.status, got.data, got.next_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, b"", 60)
    assert store.get_records("T", 0, 99, 10).status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert store.get_records("Nope", 0, 0, 10).status is GetStatus.NO_MATCHED_LOGIC_QUEUE


def test_a_record_failing_its_crc_on_arrival_is_left_out(store: MessageStore) -> None:
    put(store, [message(i) for i in range(5)])
    assert store.wait_dispatched()
    data = bytearray(store.get_records("T", 0, 0, 10).data)
    size = len(data) // 5
    data[2 * size + 100] ^= 0xFF  # inside the third body
    decoded = decode_records(bytes(data))
    assert [m.queue_offset for m in decoded] == [0, 1, 3, 4]
    assert [m.queue_offset for m in decode_records(bytes(data), check_crc=False)] == list(range(5))


def test_broken_framing_keeps_what_came_before(store: MessageStore) -> None:
    put(store, [message(i) for i in range(4)])
    assert store.wait_dispatched()
    data = bytearray(store.get_records("T", 0, 0, 10).data)
    size = len(data) // 4
    data[2 * size + 4 : 2 * size + 8] = b"\x00\x00\x00\x00"  # the third record's magic
    with pytest.raises(CorruptRecords, match="magic") as caught:
        decode_records(bytes(data))
    assert [m.queue_offset for m in caught.value.messages] == [0, 1]
    with pytest.raises(CorruptRecords, match="cut short"):
        decode_records(bytes(data[: size + 10]))


def test_compressed_bodies_and_offset_ids(store: MessageStore) -> None:
    plain = b"squeeze me " * 50
    _, anonymous_at = put(
        store,
        [
            Message("T", gzip.compress(plain), 0, sys_flag=int(SysFlag.COMPRESSED)),
            Message("T", b"no id", 0),
        ],
    )
    assert store.wait_dispatched()
    compressed, anonymous = decode_records(store.get_records("T", 0, 0, 10).data)
    assert compressed.body == plain
    # Without a client ID the message ID is RocketMQ's offset ID: store host and offset.
    assert len(anonymous.message_id) == 32 and anonymous.message_id.isupper()
    assert anonymous.message_id.endswith(f"{anonymous_at:016X}")


def test_corrupt_records_on_disk_are_left_out_of_fetches(store: MessageStore) -> None:
    put(store, [message(i) for i in range(10)])
    assert store.wait_dispatched()
    whole = store.get_records("T", 0, 0, 100).data
    size = len(whole) // 10
    # A fresh store: its first segment starts at offset 0, with these records.
    segment = store.commit_log.queue.files[0].mapping
    start = 0
    # A body byte of record 2 flipped: only that record goes.
    segment[start + 2 * size + 100] ^= 0xFF
    got = store.get_records("T", 0, 0, 100)
    assert [m.queue_offset for m in decode_records(got.data)] == [0, 1, 3, 4, 5, 6, 7, 8, 9]
    assert (got.count, got.next_offset) == (9, 10)
    # Record 6's magic destroyed: nothing after it in the run can be trusted, so the
    # fetch ends before it and the next one starts after it.
    segment[start + 6 * size + 4 : start + 6 * size + 8] = b"\0\0\0\0"
    got = store.get_records("T", 0, 0, 100)
    assert [m.queue_offset for m in decode_records(got.data)] == [0, 1, 3, 4, 5]
    assert (got.count, got.next_offset) == (5, 7)
    rest = store.get_records("T", 0, 7, 100)
    assert [m.queue_offset for m in decode_records(rest.data)] == [7, 8, 9]
