"""The commit-log record layout, byte by byte, and Java-compatible string hashing."""

from __future__ import annotations

import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skiff_broker.store.commit_log import AppendResult, CommitLog
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.hashing import index_key_hash, java_string_hash, tag_hash
from skiff_broker.store.message import (
    CorruptRecordError,
    Message,
    SysFlag,
    decode_record,
    record_length,
)

MAGIC = 0xDAA320A7
BORN_TS = 1_700_000_000_123
BODY = b"body \x00\xff bytes of the record under test"
PROPS = {"TAGS": "TagA", "KEYS": "order-1 order-2", "UNIQ_KEY": "AC110001"}
PROPS_RAW = b"TAGS\x01TagA\x02KEYS\x01order-1 order-2\x02UNIQ_KEY\x01AC110001\x02"


def segment_bytes(config: StoreConfig, start: int = 0) -> bytes:
    return (Path(config.commit_log_dir) / f"{start:020d}").read_bytes()


def v4(host: str, port: int) -> bytes:
    return socket.inet_pton(socket.AF_INET, host) + struct.pack(">i", port)


def v6(host: str, port: int) -> bytes:
    return socket.inet_pton(socket.AF_INET6, host) + struct.pack(">i", port)


@pytest.fixture
def open_log(store_config: Callable[..., StoreConfig]) -> Iterator[Callable[..., CommitLog]]:
    logs: list[CommitLog] = []

    def make(**overrides: object) -> CommitLog:
        log = CommitLog(store_config(**overrides), allocator=None, pool=None)
        logs.append(log)
        return log

    yield make
    for log in logs:
        log.close()


def sample(**changes: object) -> Message:
    fields: dict = {
        "topic": "TopicA",
        "body": BODY,
        "queue_id": 3,
        "properties": dict(PROPS),
        "flag": 7,
        "born_timestamp": BORN_TS,
        "born_host": "192.168.0.9:54321",
        "reconsume_times": 2,
        "prepared_transaction_offset": 4242,
    }
    fields.update(changes)
    return Message(**fields)


def append_second(log: CommitLog, message: Message) -> tuple[AppendResult, int]:
    """Append a first record, then ``message``: the record under test is not at offset 0."""
    log.append([sample(body=b"first")])
    before = int(time.time() * 1000)
    result = log.append([message])
    return result, before


# -- layout -----------------------------------------------------------------


def test_ipv4_record_has_every_field_at_its_offset(open_log) -> None:
    log = open_log(store_host="10.1.2.3:10911")
    result, before = append_second(log, sample())
    at = result.physical_offsets[0]
    raw = segment_bytes(log.config)[at : at + result.sizes[0]]

    topic = b"TopicA"
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4
    total += len(BODY) + 1 + len(topic) + 2 + len(PROPS_RAW)
    assert len(raw) == total == result.sizes[0] == result.wrote_bytes
    assert at > 0

    def field(fmt: str, offset: int) -> object:
        return struct.unpack_from(fmt, raw, offset)[0]

    assert field(">i", 0) == total  # TOTALSIZE
    assert field(">I", 4) == MAGIC
    assert field(">i", 8) == zlib.crc32(BODY) & 0x7FFFFFFF  # BODYCRC
    assert field(">i", 12) == 3  # QUEUEID
    assert field(">i", 16) == 7  # FLAG
    assert field(">q", 20) == 1  # QUEUEOFFSET: second message of TopicA/3
    assert field(">q", 28) == at  # PHYSICALOFFSET
    assert field(">i", 36) == 0  # SYSFLAG: both hosts IPv4, no transaction
    assert field(">q", 40) == BORN_TS
    assert raw[48:56] == v4("192.168.0.9", 54321)  # BORNHOST
    store_ts = field(">q", 56)
    assert store_ts == result.store_timestamp
    assert before <= store_ts <= int(time.time() * 1000)
    assert raw[64:72] == v4("10.1.2.3", 10911)  # STOREHOST
    assert field(">i", 72) == 2  # RECONSUMETIMES
    assert field(">q", 76) == 4242  # PREPARED TRANSACTION OFFSET
    assert field(">i", 84) == len(BODY)
    assert raw[88 : 88 + len(BODY)] == BODY
    p = 88 + len(BODY)
    assert raw[p] == len(topic)
    assert raw[p + 1 : p + 1 + len(topic)] == topic
    p += 1 + len(topic)
    assert field(">h", p) == len(PROPS_RAW)
    assert raw[p + 2 :] == PROPS_RAW
    assert record_length(len(BODY), len(topic), len(PROPS_RAW)) == total


def test_ipv6_born_host_sets_sysflag_and_takes_20_bytes(open_log) -> None:
    log = open_log(store_host="10.1.2.3:10911")
    result, _ = append_second(log, sample(born_host="[2001:db8::17]:8080"))
    at = result.physical_offsets[0]
    raw = segment_bytes(log.config)[at : at + result.sizes[0]]

    assert (
        struct.unpack_from(">i", raw, 0)[0]
        == len(raw)
        == 88 + 12 + len(BODY) + 7 + 2 + len(PROPS_RAW)
    )
    assert struct.unpack_from(">i", raw, 36)[0] == SysFlag.BORNHOST_V6 == 0x10
    assert raw[48:68] == v6("2001:db8::17", 8080)
    # Every later field moves by the 12 extra bytes.
    assert struct.unpack_from(">q", raw, 68)[0] == result.store_timestamp
    assert raw[76:84] == v4("10.1.2.3", 10911)
    assert struct.unpack_from(">iqi", raw, 84) == (2, 4242, len(BODY))
    assert raw[100 : 100 + len(BODY)] == BODY
    assert log.store_timestamp_at(at) == result.store_timestamp


def test_ipv6_store_host_sets_its_own_sysflag_bit(open_log) -> None:
    log = open_log(store_host="[::1]:10911")
    result, _ = append_second(log, sample(born_host="[fe80::1]:1"))
    at = result.physical_offsets[0]
    raw = segment_bytes(log.config)[at : at + result.sizes[0]]

    assert struct.unpack_from(">i", raw, 36)[0] == 0x10 | 0x20
    assert raw[48:68] == v6("fe80::1", 1)
    assert struct.unpack_from(">q", raw, 68)[0] == result.store_timestamp
    assert raw[76:96] == v6("::1", 10911)
    assert struct.unpack_from(">i", raw, 108)[0] == len(BODY)
    assert raw[112 : 112 + len(BODY)] == BODY
    stored = decode_record(raw)
    assert (stored.born_host, stored.store_host) == ("[fe80::1]:1", "[::1]:10911")


def test_host_bits_in_the_callers_sysflag_are_recomputed(open_log) -> None:
    # A wrong host bit would make every reader parse the record at the wrong offsets.
    log = open_log()
    flags = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6 | SysFlag.MULTI_TAGS
    result = log.append([sample(sys_flag=flags)])
    raw = segment_bytes(log.config)[: result.sizes[0]]
    assert struct.unpack_from(">i", raw, 36)[0] == SysFlag.MULTI_TAGS
    assert decode_record(raw).body == BODY


# -- decode_record ---------------------------------------------------------


@pytest.mark.parametrize(
    ("born_host", "store_host"),
    [
        ("192.168.0.9:54321", "10.1.2.3:10911"),
        ("[2001:db8::17]:8080", "10.1.2.3:10911"),
        ("192.168.0.9:54321", "[2001:db8::1]:10911"),
    ],
)
def test_decode_record_round_trips_every_field(open_log, born_host: str, store_host: str) -> None:
    log = open_log(store_host=store_host)
    message = sample(born_host=born_host, sys_flag=SysFlag.MULTI_TAGS)
    result, _ = append_second(log, message)
    at = result.physical_offsets[0]
    segment = segment_bytes(log.config)

    stored = decode_record(segment, at)

    assert stored.topic == "TopicA"
    assert stored.body == BODY
    assert stored.queue_id == 3
    assert stored.queue_offset == 1
    assert stored.physical_offset == at
    assert stored.store_size == result.sizes[0]
    assert stored.properties == PROPS
    assert stored.flag == 7
    assert stored.sys_flag & SysFlag.MULTI_TAGS
    assert stored.born_timestamp == BORN_TS
    assert stored.born_host == born_host
    assert stored.store_timestamp == result.store_timestamp
    assert stored.store_host == store_host
    assert stored.reconsume_times == 2
    assert stored.prepared_transaction_offset == 4242
    assert stored.body_crc == zlib.crc32(BODY) & 0x7FFFFFFF
    assert (stored.tags, stored.keys, stored.unique_id) == (
        "TagA",
        ["order-1", "order-2"],
        "AC110001",
    )
    assert log.get_message(at, result.sizes[0]) == stored


def test_decode_record_handles_empty_body_and_no_properties(open_log) -> None:
    log = open_log()
    result = log.append([Message(topic="t", body=b"")])
    raw = segment_bytes(log.config)[: result.sizes[0]]
    assert len(raw) == 88 + 0 + 1 + 1 + 2
    stored = decode_record(raw)
    assert (stored.topic, stored.body, stored.properties) == ("t", b"", {})


@pytest.fixture
def one_record(open_log) -> bytes:
    log = open_log()
    result = log.append([sample()])
    return segment_bytes(log.config)[: result.sizes[0]]


def test_decode_record_rejects_a_flipped_body_byte(one_record: bytes) -> None:
    raw = bytearray(one_record)
    raw[88 + 5] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_record(bytes(raw))
    # The CRC is the only thing that notices: the same bytes decode without the check.
    assert decode_record(bytes(raw), check_crc=False).body[5] == BODY[5] ^ 0x01


def test_decode_record_rejects_a_wrong_magic(one_record: bytes) -> None:
    raw = bytearray(one_record)
    struct.pack_into(">I", raw, 4, 0xDAA320A8)
    with pytest.raises(CorruptRecordError, match="magic 0xdaa320a8"):
        decode_record(bytes(raw))


def test_decode_record_rejects_a_blank_record() -> None:
    blank = struct.pack(">iI", 100, 0xCBD43194) + bytes(92)
    with pytest.raises(CorruptRecordError, match="not a message"):
        decode_record(blank)


@pytest.mark.parametrize("keep", [0, 7, 30, 88, -1])
def test_decode_record_rejects_a_truncated_record(one_record: bytes, keep: int) -> None:
    with pytest.raises(CorruptRecordError, match=r"cut short|impossible size"):
        decode_record(one_record[:keep])


def test_decode_record_rejects_inconsistent_topic_length(one_record: bytes) -> None:
    # Only the body is under the CRC: a damaged length byte must still be caught.
    topic_len_at = 88 + len(BODY)
    for bad in (255, 0, 5):
        raw = bytearray(one_record)
        raw[topic_len_at] = bad
        with pytest.raises(CorruptRecordError):
            decode_record(bytes(raw))


def test_decode_record_rejects_a_topic_that_is_not_utf8(one_record: bytes) -> None:
    raw = bytearray(one_record)
    raw[88 + len(BODY) + 1] = 0xFF
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(raw))


def test_decode_record_reads_at_an_offset_inside_a_larger_buffer(open_log) -> None:
    log = open_log()
    first = log.append([sample(body=b"one")])
    second = log.append([sample(body=b"two", queue_id=4)])
    segment = segment_bytes(log.config)
    assert decode_record(segment, 0).body == b"one"
    stored = decode_record(segment, first.next_offset)
    assert (stored.body, stored.queue_id, stored.physical_offset) == (
        b"two",
        4,
        second.wrote_offset,
    )


# -- hashing ----------------------------------------------------------------


def java_hash_by_definition(s: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a signed 32-bit int."""
    raw = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (h * 31 + int.from_bytes(raw[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("TagA", 2598919),
        ("é", 233),
        ("日本語", 25921943),
        ("😀", 1772899),  # a surrogate pair: two code units, not one code point
        ("polygenelubricants", -(2**31)),
        ("Hello, World!", 1498789909),
    ],
)
def test_java_string_hash_matches_java(text: str, expected: int) -> None:
    assert java_hash_by_definition(text) == expected
    assert java_string_hash(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "x" * 511,
        "x" * 512,
        "x" * 513,  # past the table of precomputed powers
        "Grüße aus Köln " * 50,
        "mixed 😀 and ascii " * 40,
        "\ud800 lone surrogate",  # Java hashes any UTF-16 sequence, well-formed or not
    ],
)
def test_java_string_hash_of_long_and_non_ascii_strings(text: str) -> None:
    assert java_string_hash(text) == java_hash_by_definition(text)
    assert -(2**31) <= java_string_hash(text) < 2**31


def test_tag_and_index_key_hashes() -> None:
    assert tag_hash("") == 0
    assert tag_hash("TagA") == 2598919
    assert index_key_hash("hello") == 99162322
    negative = "TopicTest"
    assert java_string_hash(negative) < 0
    assert index_key_hash(negative) == -java_string_hash(negative)
    # abs(Integer.MIN_VALUE) overflows in Java; RocketMQ maps it to slot hash 0.
    assert index_key_hash("polygenelubricants") == 0
