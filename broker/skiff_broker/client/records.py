"""Messages out of the raw records a fetch returns (skiff.records.v1).

The broker sends records exactly as its commit log holds them (RocketMQ's
layout, see ``skiff_broker.wire.record_layout``). ``wire.record_check`` checks
the whole batch in one tight loop first, with the same verdict recovery and
the broker's doors reach; the messages are then cut out of the checked
records without further checks, which is what lets a consumer read hundreds
of thousands of messages a second. Properties are decoded only when a
message's properties, ID, tag, keys or group are first asked for.

Invariants: a record the validator refuses is never returned (one whose
framing still holds is skipped with an ERROR, broken framing ends the batch
with :class:`CorruptRecords`); a body flagged compressed that does not inflate
within ``MAX_INFLATED_BODY`` is skipped with a WARNING, and the messages after
it are still returned: nothing stored can make a consumer stall or raise.
"""

from __future__ import annotations

import logging
import struct

from ..wire import property_names as prop
from ..wire.compressed_body import CompressedBodyError, inflate
from ..wire.properties import decode_properties
from ..wire.record_check import check_run
from ..wire.record_codec import encode_client_record, offset_message_id, topic_field
from ..wire.record_layout import (
    COMPRESSED,
    HOST_V6_BITS,
    INT,
    LONG,
    PLAIN_HEADER,
    QUEUE_OFFSET_OFFSET,
    SYSFLAG_OFFSET,
    header_struct,
)

__all__ = [
    "MAX_INFLATED_BODY",
    "CorruptRecords",
    "PulledMessage",
    "decode_records",
    "encode_record",
    "topic_field",
]

log = logging.getLogger(__name__)

# The most a client inflates one compressed body to. A broker refuses bodies
# that inflate past its maximum message size (4 MiB by default, RocketMQ's);
# this leaves room for brokers configured larger while bounding what a bad
# stored body can cost a consumer.
MAX_INFLATED_BODY = 64 * 1024 * 1024

# The header with IPv4 hosts, skipping what a consumer never sees (FLAG,
# BORNHOST, RECONSUMETIMES, PREPARED TRANSACTION OFFSET): fewer objects per record.
_WANTED = struct.Struct(">iIii4xqqiq8xq8s4x8xi")
assert _WANTED.size == PLAIN_HEADER.size


def encode_record(topic: bytes, body: bytes, properties: bytes, born_timestamp: int) -> bytes:
    """One record for an append: ``topic`` from :func:`topic_field`, ``properties``
    from ``encode_properties``. The broker fills in queue, offsets and hosts."""
    return encode_client_record(topic, body, properties, born_timestamp)


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
    one queue), saves decoding each record's own. A record the validator
    refuses whose framing holds (a body failing its CRC, damaged properties) is
    logged and left out, as the broker does with what it reads itself. Broken
    framing (a size or magic that cannot be) raises :class:`CorruptRecords`.
    """
    messages: list[PulledMessage] = []
    topics: dict[bytes, str] = {}
    end = len(data)
    position = 0
    while position < end:
        # The broker sent records its own log holds, whose text it checked on the way
        # in; here framing and CRC suffice, and text is decoded leniently.
        checked = check_run(data, position, end, check_crc=check_crc, text=False)
        _cut_messages(data, position, checked.stop, topic, topics, messages)
        problem = checked.problem
        if problem is None:
            break
        if not problem.framing_holds:
            raise CorruptRecords(
                f"the record at byte {problem.position}: {problem.reason}", messages
            )
        position = checked.stop
        log.error(
            "skipping the message at queue offset %d: %s",
            LONG.unpack_from(data, position + QUEUE_OFFSET_OFFSET)[0],
            problem.reason,
        )
        position += INT.unpack_from(data, position)[0]
    return messages


def _cut_messages(
    data: bytes,
    position: int,
    end: int,
    topic: str | None,
    topics: dict[bytes, str],
    messages: list[PulledMessage],
) -> None:
    """Append to ``messages`` those of the records in ``data[position:end]``, all checked."""
    append = messages.append
    unpack = _WANTED.unpack_from
    header_size = _WANTED.size
    unusual = HOST_V6_BITS | COMPRESSED
    # The loop body runs once per message: every operation in it is paid for
    # hundreds of thousands of times a second.
    while position < end:
        (
            size,
            _magic,
            _crc,
            queue_id,
            queue_offset,
            physical_offset,
            sys_flag,
            born_timestamp,
            store_timestamp,
            store_host,
            body_length,
        ) = unpack(data, position)
        record_end = position + size
        if sys_flag & unusual:
            message = _cut_unusual(data, position, record_end, topic)
            position = record_end
            if message is not None:
                append(message)
            continue
        topic_at = position + header_size + body_length
        properties_at = topic_at + 3 + data[topic_at]
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
                data[position + header_size : topic_at],
                born_timestamp,
                store_timestamp,
                data[properties_at:record_end],
                physical_offset,
                store_host,
            )
        )
        position = record_end


def _cut_unusual(
    data: bytes, position: int, record_end: int, topic: str | None
) -> PulledMessage | None:
    """A checked record with IPv6 hosts or a compressed body (None if it cannot be read)."""
    sys_flag = INT.unpack_from(data, position + SYSFLAG_OFFSET)[0]
    header = header_struct(sys_flag)
    (
        _,
        _,
        _,
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
    properties_at = topic_at + 3 + data[topic_at]
    record_topic = topic or data[topic_at + 1 : properties_at - 2].decode("utf-8", "replace")
    body = data[position + header.size : topic_at]
    if sys_flag & COMPRESSED:
        try:
            body = inflate(body, MAX_INFLATED_BODY)
        except CompressedBodyError as exc:
            log.warning(
                "skipping the message of topic %s, queue %d at offset %d: %s; the messages "
                "after it are delivered",
                record_topic,
                queue_id,
                queue_offset,
                exc,
            )
            return None
    return PulledMessage(
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
