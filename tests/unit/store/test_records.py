"""Raw records out of a real store (get_records) and back into messages (decode_records)."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from tests.unit.store.conftest import SMALL_STORE

from skiff_broker.client.records import CorruptRecords, decode_records
from skiff_broker.store import reading
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.hashing import tag_hash
from skiff_broker.store.message import Message, SysFlag
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.results import GetStatus, RecordsResult
from skiff_broker.wire import record_check
from skiff_broker.wire.record_layout import PHYSICAL_OFFSET_OFFSET


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


@pytest.fixture(scope="module")
def laid_out_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessageStore]:
    """Three queues written in batches of uneven size (runs of every length, 64 KiB
    segments rolling under them), then three records damaged on disk."""
    config = StoreConfig(
        **{
            **SMALL_STORE,
            "data_dir": str(tmp_path_factory.mktemp("laid-out") / "store"),
            "flush_type": FlushType.SYNC_FLUSH,
            "consume_queue_units_per_file": 400,
            "clean_resource_interval": 3600,
        }
    )
    config.validate()
    with MessageStore(config) as s:
        sizes = [1, 40, 7, 90, 3, 25, 60, 2, 33, 80, 15, 50] * 4
        written = 0
        for index, count in enumerate(sizes):
            queue = index % 3
            offsets = put(
                s,
                [
                    message(i, queue_id=queue, pad="p" * ((i * 37) % 300))
                    for i in range(written, written + count)
                ],
            )
            written += count
        assert s.wait_dispatched()
        segments = s.commit_log.queue.files
        # A body byte of one record, bytes of another, the size field of a third, the
        # offset a fourth claims (segments start with a record).
        first = offsets[0] - segments[-1].file_from_offset
        segments[-1].mapping[first + 120] ^= 0x5A
        segments[1].mapping[300:304] = b"\0\0\0\0"
        segments[2].mapping[0:4] = b"\x7f\0\0\0"
        segments[3].mapping[PHYSICAL_OFFSET_OFFSET + 7] ^= 1
        yield s


@pytest.mark.parametrize("queue", [0, 1, 2])
@pytest.mark.parametrize("max_count", [1, 16, 100, 1000])
@pytest.mark.parametrize("max_kib", [1, 20, 4096])
def test_a_long_read_finds_its_runs_at_once_as_unit_by_unit(
    laid_out_store: MessageStore,
    monkeypatch: pytest.MonkeyPatch,
    queue: int,
    max_count: int,
    max_kib: int,
) -> None:
    """Every fetch from every offset answers the same whether its units are taken as one
    array or one at a time: records, counts, where the next fetch starts, and the damaged
    records left out."""
    store = laid_out_store
    end = store.max_offset("T", queue)

    def fetches() -> list[RecordsResult]:
        return [
            store.get_records("T", queue, offset, max_count, max_bytes=max_kib * 1024)
            for offset in range(0, end + 1, 7)
        ]

    # Arrays and the check over every record at once for any length, then for none.
    monkeypatch.setattr(reading, "_ARRAY_MIN_UNITS", 1)
    monkeypatch.setattr(record_check, "_VECTOR_MIN_RECORDS", 1)
    at_once = fetches()
    monkeypatch.setattr(reading, "_ARRAY_MIN_UNITS", 1 << 30)
    monkeypatch.setattr(record_check, "_VECTOR_MIN_RECORDS", 1 << 30)
    assert at_once == fetches()


def test_short_and_long_runs_are_checked_alike(store: MessageStore) -> None:
    # A run of fewer than _ARRAY_CHECK_MIN_RECORDS records is checked one record at a
    # time, a longer one with numpy: both find the same first record that disagrees with
    # its unit, whichever field disagrees.
    count = 2 * reading._ARRAY_CHECK_MIN_RECORDS
    physical = put(store, [message(i) for i in range(count)])
    assert store.wait_dispatched()
    cq = store.consume_queues.get("T", 0)
    assert cq is not None
    first = physical[0]
    whole = store.commit_log.read(first, store.commit_log.max_offset - first)
    assert whole is not None
    starts = np.array([p - first for p in physical], dtype=np.int64)
    last_size = int.from_bytes(whole[int(starts[-1]) : int(starts[-1]) + 4], "big")

    def both(chunk: bytes, starts: np.ndarray, first_offset: int = 0) -> tuple:
        few = reading._first_disagreeing_of_few(chunk, first, starts.tolist(), cq, first_offset)
        # The numpy path on the same run, whatever its length.
        many = reading._first_disagreeing(chunk, first, starts, cq, first_offset)
        return few, many

    chunk = bytes(whole[: int(starts[-1]) + last_size])
    assert both(chunk, starts) == (None, None)
    for field in (4, 12, 20, PHYSICAL_OFFSET_OFFSET):  # magic, queue id, queue offset, offset
        for victim in (0, 3, count - 1):
            damaged = bytearray(chunk)
            damaged[int(starts[victim]) + field + 3] ^= 0x01
            assert both(bytes(damaged), starts) == (victim, victim)
    # A size the units disagree with, a queue offset the read did not expect, a start
    # past the chunk's end.
    shifted = starts.copy()
    shifted[2] += 1
    assert both(chunk, shifted) == (1, 1)
    assert both(chunk, starts, first_offset=5) == (0, 0)
    assert both(chunk[: int(starts[-1]) + 10], starts) == (count - 1, count - 1)
