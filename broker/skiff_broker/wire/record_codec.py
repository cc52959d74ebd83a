"""Writing a record and reading one back.

Invariant: ``encode_record_into`` writes only records ``record_check`` accepts
(given a topic from ``topic_field`` and properties from ``encode_properties``),
and ``decode_record`` returns only records it accepts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .body_crc import body_crc, crc32
from .hosts import decode_host
from .properties import Property, decode_properties
from .record_check import check_record
from .record_layout import (
    BORNHOST_V6,
    HOST_V6_BITS,
    INT,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC,
    SHORT,
    STOREHOST_V6,
    SYSFLAG_OFFSET,
    header_struct,
)

_NO_HOST = bytes(8)


class CorruptRecordError(ValueError):
    """A record the validator refuses: it is never returned."""


def topic_problem(topic: bytes) -> str | None:
    """Why a topic's bytes cannot be a record's TOPIC; None if they can."""
    if not 0 < len(topic) <= MAX_TOPIC_LENGTH:
        return f"topic name must be 1 to {MAX_TOPIC_LENGTH} bytes, got {len(topic)}"
    if topic[-1] == 0:
        return "topic name must not end in NUL"
    try:
        topic.decode()
    except UnicodeDecodeError:
        return "topic name must be UTF-8 text"
    return None


def topic_field(topic: str) -> bytes:
    """TOPICLENGTH and TOPIC of a record; ValueError if the name cannot be one."""
    raw = topic.encode()
    problem = topic_problem(raw)
    if problem is not None:
        raise ValueError(problem)
    return bytes((len(raw),)) + raw


def encode_record_into(
    blob: bytearray,
    topic_field: bytes,
    body: bytes | bytearray | memoryview,
    properties: bytes,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    /,
) -> int:
    """Append one record to ``blob``; returns its length.

    ``topic_field`` comes from :func:`topic_field`, ``properties`` from
    ``encode_properties``; hosts are ``encode_host`` fields (8 or 20 bytes) and
    SYSFLAG's host bits follow them. QUEUEOFFSET, PHYSICALOFFSET and
    STORETIMESTAMP are written as 0: the commit log fills them in under its
    lock. Positional only: this runs once per message appended.
    """
    sys_flag = (
        (sys_flag & ~HOST_V6_BITS)
        | (BORNHOST_V6 if len(born_host) == 20 else 0)
        | (STOREHOST_V6 if len(store_host) == 20 else 0)
    )
    header = header_struct(sys_flag)
    length = header.size + len(body) + len(topic_field) + 2 + len(properties)
    blob += header.pack(
        length,
        MESSAGE_MAGIC,
        body_crc(body),
        queue_id,
        flag,
        0,
        0,
        sys_flag,
        born_timestamp,
        born_host,
        0,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    blob += body
    blob += topic_field
    blob += SHORT.pack(len(properties))
    blob += properties
    return length


def encode_client_record(
    topic_field: bytes, body: bytes, properties: bytes, born_timestamp: int, sys_flag: int = 0
) -> bytes:
    """One record as a client sends it to Append: the broker's fields left 0 and hosts empty."""
    pieces: list[bytes] = []
    client_record_pieces(pieces, topic_field, [(body, properties)], born_timestamp, sys_flag)
    return b"".join(pieces)


def client_record_pieces(
    pieces: list[bytes],
    topic_field: bytes,
    messages: Iterable[tuple[bytes, bytes]],
    born_timestamp: int,
    sys_flag: int = 0,
) -> int:
    """Append to ``pieces`` the records of ``messages`` (body, properties) as a client sends
    them: the broker's fields left 0, hosts empty (IPv4-sized), ``sys_flag`` on each.

    Bodies are referenced, not copied, so the one join of ``pieces`` is the only copy of
    a batch. Returns the bytes appended.
    """
    sys_flag &= ~HOST_V6_BITS
    header = header_struct(sys_flag)
    pack = header.pack
    fixed = header.size + len(topic_field) + 2
    magic = MESSAGE_MAGIC
    crc_of = crc32
    short = SHORT.pack
    no_host = _NO_HOST
    append = pieces.append
    total = 0
    for body, properties in messages:
        length = fixed + len(body) + len(properties)
        append(
            pack(
                length,
                magic,
                crc_of(body) & 0x7FFFFFFF,
                0,
                0,
                0,
                0,
                sys_flag,
                born_timestamp,
                no_host,
                0,
                no_host,
                0,
                0,
                len(body),
            )
        )
        append(body)
        append(topic_field + short(len(properties)) + properties)
        total += length
    return total


@dataclasses.dataclass(slots=True)
class StoredMessage:
    """A message read back from the commit log, with what the store added."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_size: int
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int

    @property
    def tags(self) -> str:
        return self.properties.get(Property.TAGS, "")

    @property
    def keys(self) -> list[str]:
        return self.properties.get(Property.KEYS, "").split()

    @property
    def unique_id(self) -> str:
        return self.properties.get(Property.UNIQ_KEY, "")


def decode_record(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True
) -> StoredMessage:
    """The record at ``pos``; CorruptRecordError (naming its byte) if the validator refuses it."""
    checked = check_record(buf, pos, len(buf), check_crc=check_crc)
    if not isinstance(checked, int):
        raise CorruptRecordError(str(checked))
    size = checked
    header = header_struct(INT.unpack_from(buf, pos + SYSFLAG_OFFSET)[0])
    (
        _,
        _,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_offset,
        body_len,
    ) = header.unpack_from(buf, pos)
    p = pos + header.size
    body = bytes(buf[p : p + body_len])
    p += body_len
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
    p += 3 + topic_len
    return StoredMessage(
        topic=topic,
        body=body,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        store_size=size,
        properties=decode_properties(buf[p : pos + size]),
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=decode_host(born_host),
        store_timestamp=store_timestamp,
        store_host=decode_host(store_host),
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_offset,
        body_crc=crc,
    )


def offset_message_id(store_host: bytes, physical_offset: int) -> str:
    """RocketMQ's offset message ID: store host and physical offset, upper-case hex."""
    return (store_host + physical_offset.to_bytes(8, "big", signed=True)).hex().upper()
