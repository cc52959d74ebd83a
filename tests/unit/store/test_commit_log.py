"""CommitLog appends on real segment files: contiguity, queue offsets, rolling, rejection."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skiff_broker.store.commit_log import AppendRejected, AppendResult, AppendStatus, CommitLog
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CorruptRecordError,
    Message,
    decode_record,
)

SEGMENT = 64 * 1024
BLANK_MAGIC = 0xCBD43194
# Header (88) + topic length byte + 1-byte topic "T" + properties length, no properties.
OVERHEAD = 88 + 1 + 1 + 2


def msg(size: int | None = None, *, body: bytes | None = None, **fields: object) -> Message:
    """A message on topic T whose record is exactly ``size`` bytes (when given)."""
    if body is None:
        body = bytes((i * 7) % 251 for i in range((size or OVERHEAD + 10) - OVERHEAD))
    return Message(topic=str(fields.pop("topic", "T")), body=body, **fields)  # type: ignore[arg-type]


def segment_path(config: StoreConfig, start: int) -> Path:
    return Path(config.commit_log_dir) / f"{start:020d}"


def raw(config: StoreConfig, offset: int, size: int) -> bytes:
    start = offset - offset % SEGMENT
    data = segment_path(config, start).read_bytes()
    return data[offset - start : offset - start + size]


@pytest.fixture
def config(store_config: Callable[..., StoreConfig]) -> StoreConfig:
    return store_config(commit_log_file_size=SEGMENT, max_message_size=16 * 1024)


@pytest.fixture
def log(config: StoreConfig) -> Iterator[CommitLog]:
    commit_log = CommitLog(config, allocator=None, pool=None)
    commit_log.queue.load()
    yield commit_log
    commit_log.close()


def fill_to(log: CommitLog, remaining: int) -> None:
    """Append records until exactly ``remaining`` bytes are left in the current segment."""
    mf = log.queue.last_file_for_append()
    need = mf.remaining - remaining
    assert need >= 0
    while need > 0:
        chunk = min(need, 16 * 1024 + OVERHEAD)
        if 0 < need - chunk < OVERHEAD:
            chunk = need - OVERHEAD
        log.append([msg(chunk, queue_id=9)])
        need -= chunk
    assert log.queue.last_file.remaining == remaining


def assert_blank(config: StoreConfig, offset: int, size: int) -> None:
    assert struct.unpack(">iI", raw(config, offset, 8)) == (size, BLANK_MAGIC)


def positions(log: CommitLog) -> tuple[int, int, dict[tuple[str, int], int], list[str]]:
    return (
        log.max_offset,
        log.queue.max_wrote_offset,
        dict(log.queue_offsets),
        sorted(os.listdir(log.config.commit_log_dir)),
    )


# -- batches and queue offsets ------------------------------------------------


def test_batch_is_contiguous_with_consecutive_queue_offsets_per_queue(
    log: CommitLog, config: StoreConfig
) -> None:
    batch = [
        msg(body=b"a0", queue_id=0),
        msg(body=b"a1", queue_id=0),
        msg(body=b"b0", queue_id=1),
        msg(body=b"a2-longer", queue_id=0),
        msg(body=b"b1", queue_id=1),
        msg(body=b"other topic", queue_id=0, topic="U"),
    ]
    first = log.append(batch)

    assert first.wrote_offset == 0
    assert first.queue_offsets == [0, 1, 0, 2, 1, 0]
    assert first.sizes == [OVERHEAD + 2] * 3 + [OVERHEAD + 9, OVERHEAD + 2, OVERHEAD + 11]
    expected_offsets = [sum(first.sizes[:i]) for i in range(len(batch))]
    assert first.physical_offsets == expected_offsets
    assert first.wrote_bytes == sum(first.sizes) == log.max_offset

    second = log.append([msg(body=b"a3", queue_id=0), msg(body=b"u1", topic="U")])
    assert second.wrote_offset == first.next_offset
    assert second.queue_offsets == [3, 1]
    assert log.queue_offsets == {("T", 0): 4, ("T", 1): 2, ("U", 0): 2}

    # Every record sits on disk where the result says, back to back.
    for result, messages in ((first, batch), (second, None)):
        for i, (at, size) in enumerate(zip(result.physical_offsets, result.sizes, strict=True)):
            stored = decode_record(raw(config, at, size))
            assert (stored.physical_offset, stored.store_size) == (at, size)
            assert stored.queue_offset == result.queue_offsets[i]
            if messages is not None:
                assert (stored.topic, stored.queue_id, stored.body) == (
                    messages[i].topic,
                    messages[i].queue_id,
                    messages[i].body,
                )


def test_read_by_physical_offset_returns_the_exact_message(log: CommitLog) -> None:
    results = [log.append([msg(body=f"message {i}".encode(), queue_id=i % 3)]) for i in range(20)]
    for i, result in enumerate(results):
        at, size = result.physical_offsets[0], result.sizes[0]
        stored = log.get_message(at, size)
        assert stored is not None
        assert (stored.body, stored.queue_id, stored.queue_offset) == (
            f"message {i}".encode(),
            i % 3,
            i // 3,
        )
        assert log.read(at, size) == raw(log.config, at, size)
        assert log.store_timestamp_at(at) == result.store_timestamp == stored.store_timestamp

    # Past the end there is nothing; in the middle of a record there is no record.
    end = results[-1].next_offset
    assert log.read(end, 10) is None
    assert log.get_message(end, 10) is None
    assert log.store_timestamp_at(end) == -1
    with pytest.raises(CorruptRecordError):
        log.get_message(results[3].physical_offsets[0] + 1, results[3].sizes[0])


# -- segment ends ----------------------------------------------------------------


def test_batch_that_does_not_fit_pads_with_blank_and_goes_whole_to_next_segment(
    log: CommitLog, config: StoreConfig
) -> None:
    fill_to(log, 1000)
    assert log.queue_offsets[("T", 9)] > 0
    pad_at = SEGMENT - 1000
    before = log.queue_offsets[("T", 9)]
    # Each record fits by itself; the batch as a whole does not.
    batch = [msg(400, queue_id=9), msg(400, queue_id=9), msg(400, queue_id=9)]

    result = log.append(batch)

    assert_blank(config, pad_at, 1000)
    assert raw(config, pad_at + 8, 1000 - 8) == bytes(1000 - 8)
    assert result.wrote_offset == SEGMENT
    assert result.physical_offsets == [SEGMENT, SEGMENT + 400, SEGMENT + 800]
    assert result.queue_offsets == [before, before + 1, before + 2]
    assert sorted(os.listdir(config.commit_log_dir)) == [
        "00000000000000000000",
        "00000000000000065536",
    ]
    assert os.path.getsize(segment_path(config, SEGMENT)) == SEGMENT
    for at in result.physical_offsets:
        assert decode_record(raw(config, at, 400)).physical_offset == at
    assert log.max_offset == SEGMENT + 1200


@pytest.mark.parametrize(
    ("leftover", "fits"),
    [(9, True), (8, True), (7, False), (1, False), (0, False)],
)
def test_record_fits_only_if_it_leaves_room_for_a_blank_header(
    log: CommitLog, config: StoreConfig, leftover: int, fits: bool
) -> None:
    remaining = 500
    fill_to(log, remaining)
    at = SEGMENT - remaining

    result = log.append([msg(remaining - leftover, body=None)])

    if fits:
        assert result.physical_offsets == [at]
        assert log.queue.last_file.remaining == leftover
        # The next record, however small, pads those few bytes and rolls.
        after = log.append([msg(OVERHEAD)])
        assert_blank(config, SEGMENT - leftover, leftover)
        assert after.physical_offsets == [SEGMENT]
    else:
        assert result.physical_offsets == [SEGMENT]
        assert_blank(config, at, remaining)
    stored = decode_record(raw(config, result.physical_offsets[0], remaining - leftover))
    assert stored.store_size == remaining - leftover


def test_batch_of_exactly_segment_minus_eight_bytes_fits_an_empty_segment(
    log: CommitLog, config: StoreConfig
) -> None:
    sizes = [16 * 1024 + OVERHEAD] * 3
    sizes.append(SEGMENT - 8 - sum(sizes))
    result = log.append([msg(size) for size in sizes])
    assert result.wrote_offset == 0
    assert result.wrote_bytes == SEGMENT - 8
    log.append([msg(OVERHEAD)])
    assert_blank(config, SEGMENT - 8, 8)


def test_batch_larger_than_a_segment_is_rejected_and_nothing_is_written(
    log: CommitLog, config: StoreConfig
) -> None:
    log.append([msg(1000)])
    before = positions(log)
    sizes = [16 * 1024 + OVERHEAD] * 3
    sizes.append(SEGMENT - 7 - sum(sizes))  # one byte too many

    with pytest.raises(AppendRejected) as caught:
        log.append([msg(size) for size in sizes])

    assert caught.value.status is AppendStatus.MESSAGE_ILLEGAL
    assert f"{SEGMENT - 7} bytes cannot fit" in caught.value.reason
    assert positions(log) == before
    assert raw(config, 1000, SEGMENT - 1000) == bytes(SEGMENT - 1000)


# -- rejected messages ----------------------------------------------------------


def _props_of_length(n: int) -> dict[str, str]:
    return {"k": "v" * (n - 3)}  # encoded as k \x01 v... \x02


REJECTED = {
    "body one byte over the limit": (
        msg(body=bytes(16 * 1024 + 1)),
        AppendStatus.MESSAGE_ILLEGAL,
        "message body is 16385 bytes; the limit is 16384",
    ),
    "properties over 32767 bytes": (
        msg(body=b"x", properties=_props_of_length(32768)),
        AppendStatus.PROPERTIES_SIZE_EXCEEDED,
        "properties take 32768 bytes; the limit is 32767",
    ),
    "property value with \\x01": (
        msg(body=b"x", properties={"k": "a\x01b"}),
        AppendStatus.MESSAGE_ILLEGAL,
        "reserved separator",
    ),
    "property name with \\x02": (
        msg(body=b"x", properties={"k\x02": "v"}),
        AppendStatus.MESSAGE_ILLEGAL,
        "reserved separator",
    ),
    "empty topic": (
        msg(body=b"x", topic=""),
        AppendStatus.MESSAGE_ILLEGAL,
        "topic name must be 1 to 127 bytes, got 0",
    ),
    "topic of 128 bytes": (
        msg(body=b"x", topic="t" * 128),
        AppendStatus.MESSAGE_ILLEGAL,
        "topic name must be 1 to 127 bytes, got 128",
    ),
    "topic of 64 characters in 128 UTF-8 bytes": (
        msg(body=b"x", topic="é" * 64),
        AppendStatus.MESSAGE_ILLEGAL,
        "got 128",
    ),
    "topic with a slash": (
        msg(body=b"x", topic="a/b"),
        AppendStatus.MESSAGE_ILLEGAL,
        "must not contain '/'",
    ),
    "topic ending in NUL": (
        msg(body=b"x", topic="a\x00"),
        AppendStatus.MESSAGE_ILLEGAL,
        "must not contain '/' or NUL",
    ),
    "topic '..'": (
        msg(body=b"x", topic=".."),
        AppendStatus.MESSAGE_ILLEGAL,
        "nor be '.' or '..'",
    ),
    "born host without a port": (
        msg(body=b"x", born_host="10.0.0.1"),
        AppendStatus.MESSAGE_ILLEGAL,
        "ip:port",
    ),
    "born host that is not an address": (
        msg(body=b"x", born_host="broker-a:10911"),
        AppendStatus.MESSAGE_ILLEGAL,
        "invalid IP address",
    ),
    "born host with an impossible port": (
        msg(body=b"x", born_host="10.0.0.1:99999999999"),
        AppendStatus.MESSAGE_ILLEGAL,
        "port",
    ),
    "negative queue id": (
        msg(body=b"x", queue_id=-1),
        AppendStatus.MESSAGE_ILLEGAL,
        "queue id",
    ),
    "queue id beyond 32 bits": (
        msg(body=b"x", queue_id=2**31),
        AppendStatus.MESSAGE_ILLEGAL,
        "queue id",
    ),
    "flag beyond 32 bits": (
        msg(body=b"x", flag=2**31),
        AppendStatus.MESSAGE_ILLEGAL,
        "flag",
    ),
    "born timestamp beyond 64 bits": (
        msg(body=b"x", born_timestamp=2**63),
        AppendStatus.MESSAGE_ILLEGAL,
        "born_timestamp",
    ),
}


@pytest.mark.parametrize("case", list(REJECTED))
def test_bad_message_is_rejected_with_a_reason_and_positions_unchanged(
    log: CommitLog, config: StoreConfig, case: str
) -> None:
    bad, status, reason = REJECTED[case]
    first = log.append([msg(body=b"before", queue_id=0)])
    before = positions(log)

    # A good message ahead of the bad one in the same batch must not be written either.
    with pytest.raises(AppendRejected) as caught:
        log.append([msg(body=b"good", queue_id=0), bad])

    assert caught.value.status is status
    assert reason in caught.value.reason
    assert str(caught.value) == caught.value.reason
    assert positions(log) == before
    end = first.next_offset
    assert raw(config, end, 4096) == bytes(4096)

    after = log.append([msg(body=b"after", queue_id=0)])
    assert after.physical_offsets == [end]
    assert after.queue_offsets == [1]


def test_limits_themselves_are_accepted(log: CommitLog) -> None:
    accepted = [
        msg(body=bytes(16 * 1024)),
        msg(body=b"x", properties=_props_of_length(32767)),
        msg(body=b"x", topic="t" * 127),
        msg(body=b"x", topic="é" * 63 + "t"),
        msg(body=b"x", queue_id=2**31 - 1),
        msg(body=b"x", born_host="[::ffff:10.0.0.1]:65535"),
    ]
    for message in accepted:
        result = log.append([message])
        stored = log.get_message(result.physical_offsets[0], result.sizes[0])
        assert stored is not None
        assert (stored.topic, stored.body, stored.properties, stored.queue_id) == (
            message.topic,
            message.body,
            message.properties,
            message.queue_id,
        )


def test_empty_batch_is_rejected(log: CommitLog) -> None:
    with pytest.raises(AppendRejected) as caught:
        log.append([])
    assert caught.value.status is AppendStatus.MESSAGE_ILLEGAL
    assert log.max_offset == 0
    assert os.listdir(log.config.commit_log_dir) == []


# -- transactions ------------------------------------------------------------------


def test_prepared_and_rolled_back_messages_take_no_queue_offset(
    log: CommitLog, config: StoreConfig
) -> None:
    batch = [
        msg(body=b"normal 0"),
        msg(body=b"half", sys_flag=TRANSACTION_PREPARED_TYPE),
        msg(body=b"rolled back", sys_flag=TRANSACTION_ROLLBACK_TYPE),
        msg(body=b"normal 1"),
        msg(body=b"committed", sys_flag=TRANSACTION_COMMIT_TYPE, prepared_transaction_offset=99),
    ]
    result: AppendResult = log.append(batch)

    assert result.queue_offsets == [0, 0, 0, 1, 2]
    assert log.queue_offsets == {("T", 0): 3}
    for at, size, message, queue_offset in zip(
        result.physical_offsets, result.sizes, batch, [0, 0, 0, 1, 2], strict=True
    ):
        record = raw(config, at, size)
        assert struct.unpack_from(">q", record, 20)[0] == queue_offset
        assert struct.unpack_from(">i", record, 36)[0] & 0xC == message.sys_flag
        assert decode_record(record).body == message.body
    assert log.append([msg(body=b"next")]).queue_offsets == [3]
