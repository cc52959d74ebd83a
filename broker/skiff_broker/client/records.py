"""Messages out of the raw records a fetch returns (skiff.records.v1).

The broker sends records exactly as its commit log holds them (RocketMQ's
layout, see ``skiff_broker.store.message``); decoding them here, in one tight
loop, is what lets a consumer read hundreds of thousands of messages a second.
Properties are decoded only when a message's properties, ID, tag, keys or group
are first asked for: a consumer that only needs bodies never pays for them.
"""

from __future__ import annotations

import gzip
import logging
import struct
import zlib

from ..delivery import properties as prop
from ..store.message import (
    MESSAGE_MAGIC,
    SIZE_MAGIC,
    decode_properties,
    header_struct,
    offset_message_id,
)

__all__ = ["CorruptRecords", "PulledMessage", "decode_records", "encode_record", "topic_field"]

log = logging.getLogger(__name__)

_COMPRESSED = 0x1
_HOST_V6_BITS = 0x30
_PLAIN_HEADER = header_struct(0)
# The same header with IPv4 hosts, skipping what a consumer never sees (FLAG,
# BORNHOST, RECONSUMETIMES, PREPARED TRANSACTION OFFSET): fewer objects per record.
_WANTED = struct.Struct(">iIii4xqqiq8xq8s4x8xi")
assert _WANTED.size == _PLAIN_HEADER.size
# TOTALSIZE .. BODYLENGTH, then at least the topic length and properties length.
_MIN_RECORD = _PLAIN_HEADER.size + 3


_NO_HOST = bytes(8)


def topic_field(topic: str) -> bytes:
    """TOPICLENGTH and TOPIC of a record, to pass to :func:`encode_record`."""
    raw = topic.encode()
    return bytes((len(raw),)) + raw


def encode_record(topic: bytes, body: bytes, properties: bytes, born_timestamp: int) -> bytes:
    """One record for an append: ``topic`` from :func:`topic_field`, ``properties``
    from ``encode_properties``. The broker fills in queue, offsets and hosts."""
    return b"".join(
        (
            _PLAIN_HEADER.pack(
                _PLAIN_HEADER.size + len(body) + len(topic) + 2 + len(properties),
                MESSAGE_MAGIC,
                zlib.crc32(body) & 0x7FFFFFFF,
                0,
                0,
                0,
                0,
                0,
                born_timestamp,
                _NO_HOST,
                0,
                _NO_HOST,
                0,
                0,
                len(body),
            ),
            body,
            topic,
            len(properties).to_bytes(2, "big"),
            properties,
        )
    )


class CorruptRecords(ValueError):
    """A record whose framing is broken: nothing after it in the batch can be read.

    ``messages`` holds the messages decoded before it.
    """

    def __init__(self, reason: str, messages: list[PulledMessage]) -> None:
        super().__init__(reason)
        self.messages = messages


class PulledMessage:
    """A message read from a queue, with the offsets the broker gave it.

    ``properties`` holds the user's properties; the broker's own (ID, tag, keys,
    message group) have attributes of their own.
    """

    __slots__ = (
        "_physical_offset",
        "_properties",
        "_store_host",
        "body",
        "born_timestamp",
        "queue_id",
        "queue_offset",
        "store_timestamp",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        body: bytes,
        born_timestamp: int,  # ms since the epoch, as the producer stamped it
        store_timestamp: int,  # ms since the epoch, when the broker stored it
        raw_properties: bytes,
        physical_offset: int,
        store_host: bytes,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.body = body
        self.born_timestamp = born_timestamp
        self.store_timestamp = store_timestamp
        # The record's raw properties until first asked for, then decoded.
        self._properties: bytes | dict[str, str] = raw_properties
        self._physical_offset = physical_offset
        self._store_host = store_host

    def _stored_properties(self) -> dict[str, str]:
        properties = self._properties
        if isinstance(properties, bytes):
            properties = self._properties = decode_properties(properties)
        return properties

    @property
    def message_id(self) -> str:
        # Records written without a client ID have RocketMQ's offset message ID.
        return self._stored_properties().get(prop.UNIQ_KEY) or offset_message_id(
            self._store_host, self._physical_offset
        )

    @property
    def tag(self) -> str:
        return self._stored_properties().get(prop.TAGS, "")

    @property
    def keys(self) -> tuple[str, ...]:
        keys = self._stored_properties().get(prop.KEYS, "")
        return tuple(keys.split(" ")) if keys else ()

    @property
    def message_group(self) -> str:
        return self._stored_properties().get(prop.MESSAGE_GROUP, "")

    @property
    def properties(self) -> dict[str, str]:
        return {k: v for k, v in self._stored_properties().items() if k not in prop.RESERVED}

    def _fields(self) -> tuple:
        return (
            self.topic,
            self.queue_id,
            self.queue_offset,
            self.message_id,
            self.tag,
            self.keys,
            self.message_group,
            self.properties,
            self.body,
            self.born_timestamp,
            self.store_timestamp,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PulledMessage):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # equal messages may differ in identity only

    def __repr__(self) -> str:
        return (
            f"PulledMessage(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, message_id={self.message_id!r}, "
            f"tag={self.tag!r}, body={self.body[:32]!r}{'...' if len(self.body) > 32 else ''})"
        )


def decode_records(
    data: bytes, *, topic: str | None = None, check_crc: bool = True
) -> list[PulledMessage]:
    """The messages in ``data``, records back to back.

    ``topic``, when the caller knows every record belongs to it (a fetch reads
    one queue), saves decoding each record's own. A record whose body fails its
    CRC is logged and left out, as the broker does with what it decodes itself.
    Broken framing (a size or magic that cannot be) raises :class:`CorruptRecords`.
    """
    messages: list[PulledMessage] = []
    append = messages.append
    unpack = _WANTED.unpack_from
    header_size = _WANTED.size
    crc32 = zlib.crc32
    magic_ok = MESSAGE_MAGIC
    unusual = _HOST_V6_BITS | _COMPRESSED
    topics: dict[bytes, str] = {}
    end = len(data)
    last_header = end - _MIN_RECORD
    position = 0
    # The loop body runs once per message: every operation in it is paid for
    # hundreds of thousands of times a second.
    while position < end:
        if position > last_header:
            raise CorruptRecords(f"a record at byte {position} is cut short", messages)
        (
            size,
            magic,
            crc,
            queue_id,
            queue_offset,
            physical_offset,
            sys_flag,
            born_timestamp,
            store_timestamp,
            store_host,
            body_length,
        ) = unpack(data, position)
        if sys_flag & unusual:
            message = _decode_unusual(data, position, end, check_crc, topic, messages)
            position += size
            if message is not None:
                append(message)
            continue
        record_end = position + size
        topic_at = position + header_size + body_length
        if (
            magic != magic_ok
            or record_end > end
            or body_length < 0
            or topic_at + 3 > record_end
            or topic_at + 3 + data[topic_at] > record_end
        ):
            raise CorruptRecords(_framing_problem(data, position, end), messages)
        properties_at = topic_at + 3 + data[topic_at]
        if properties_at + ((data[properties_at - 2] << 8) | data[properties_at - 1]) != record_end:
            raise CorruptRecords(
                f"the record at byte {position} has inconsistent field lengths", messages
            )
        body = data[position + header_size : topic_at]
        position = record_end
        if check_crc and crc32(body) & 0x7FFFFFFF != crc:
            _log_bad_crc(queue_offset)
            continue
        if topic is None:
            raw_topic = data[topic_at + 1 : properties_at - 2]
            record_topic = topics.get(raw_topic)
            if record_topic is None:
                record_topic = topics[raw_topic] = raw_topic.decode("utf-8", "replace")
        else:
            record_topic = topic
        append(
            PulledMessage(
                record_topic,
                queue_id,
                queue_offset,
                body,
                born_timestamp,
                store_timestamp,
                data[properties_at:record_end],
                physical_offset,
                store_host,
            )
        )
    return messages


def _decode_unusual(
    data: bytes,
    position: int,
    end: int,
    check_crc: bool,
    topic: str | None,
    before: list[PulledMessage],
) -> PulledMessage | None:
    """A record with IPv6 hosts or a compressed body (None if its CRC fails)."""
    size, magic = SIZE_MAGIC.unpack_from(data, position)
    sys_flag = int.from_bytes(data[position + 36 : position + 40], "big", signed=True)
    header = header_struct(sys_flag)
    record_end = position + size
    if position + header.size + 3 > end:
        raise CorruptRecords(f"a record at byte {position} is cut short", before)
    if magic != MESSAGE_MAGIC or size < header.size + 3 or record_end > end:
        raise CorruptRecords(_framing_problem(data, position, end), before)
    (
        _,
        _,
        crc,
        queue_id,
        _,
        queue_offset,
        physical_offset,
        _,
        born_timestamp,
        _,
        store_timestamp,
        store_host,
        _,
        _,
        body_length,
    ) = header.unpack_from(data, position)
    topic_at = position + header.size + body_length
    if body_length < 0 or topic_at + 3 + data[topic_at] > record_end:
        raise CorruptRecords(f"the record at byte {position} has impossible lengths", before)
    properties_at = topic_at + 3 + data[topic_at]
    if properties_at + int.from_bytes(data[properties_at - 2 : properties_at]) != record_end:
        raise CorruptRecords(
            f"the record at byte {position} has inconsistent field lengths", before
        )
    body = data[position + header.size : topic_at]
    if check_crc and zlib.crc32(body) & 0x7FFFFFFF != crc:
        _log_bad_crc(queue_offset)
        return None
    if sys_flag & _COMPRESSED:
        body = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else zlib.decompress(body)
    return PulledMessage(
        topic or data[topic_at + 1 : properties_at - 2].decode("utf-8", "replace"),
        queue_id,
        queue_offset,
        body,
        born_timestamp,
        store_timestamp,
        data[properties_at:record_end],
        physical_offset,
        store_host,
    )


def _framing_problem(data: bytes, position: int, end: int) -> str:
    size, magic = SIZE_MAGIC.unpack_from(data, position)
    if magic != MESSAGE_MAGIC:
        return f"the record at byte {position} has magic {magic:#x}, not a message's"
    if position + size > end:
        return f"the record at byte {position} claims {size} bytes; only {end - position} remain"
    return f"the record at byte {position} has impossible field lengths"


def _log_bad_crc(queue_offset: int) -> None:
    log.error("skipping message at queue offset %d: its body fails the CRC check", queue_offset)
