"""Records a client encoded itself, checked and made ready for the commit log.

Skiff's own producer sends messages already in the record layout (see
``wire.record_layout``), so the broker need not build each record from a
protobuf. Nothing a client wrote is trusted: the run is first checked by
``wire.record_check`` (what it accepts, recovery keeps), then by this door's
own rules (topic, sizes, SYSFLAG bits, properties, compressed bodies), and the
fields that are the broker's to set (queue, born and store hosts, reconsume
count, transaction offset) are overwritten. The queue offset, physical offset
and store timestamp are filled in under the commit log's lock, as for any
other append.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

from ..wire.compressed_body import compressed_body_problem
from ..wire.hosts import host_flags
from ..wire.properties import ID_ONLY_PREFIX, Property, decode_properties
from ..wire.record_check import check_run
from ..wire.record_layout import (
    BORN_TIMESTAMP_OFFSET,
    COMPRESSED,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC,
    PLAIN_HEADER,
    QUEUE_ID_OFFSET,
    STORE_TIMESTAMP_OFFSET,
    header_struct,
    store_timestamp_offset,
)
from .commit_log import AppendRejected, AppendStatus
from .dispatch_request import DispatchRequest, index_keys

# Bits a client may set in SYSFLAG; hosts and transaction state are the broker's.
_CLIENT_SYS_FLAGS = COMPRESSED
# BORNTIMESTAMP .. PREPARED TRANSACTION OFFSET with IPv4 hosts, written in one go.
_BROKER_FIELDS = struct.Struct(">q8sq8siq")
_QUEUE_ID = struct.Struct(">i")
# What this door reads of a checked record: SYSFLAG, BORNTIMESTAMP, BODYLENGTH.
_DOOR_FIELDS = struct.Struct(">iIi4xi16xiq36xi")
assert _DOOR_FIELDS.size == PLAIN_HEADER.size


@dataclasses.dataclass(slots=True)
class PreparedRecords:
    topic: str
    queue_id: int
    blob: bytearray
    # Per record, as CommitLog.append_encoded takes it.
    layout: list[tuple[int, int, bool, DispatchRequest]]
    # Per record, its body's length as stored (compressed if its SYSFLAG says so).
    body_sizes: list[int]


def prepare_records(
    data: bytes,
    topic: str,
    queue_id: int,
    *,
    born_host: bytes,
    store_host: bytes,
    max_message_size: int,
    born_default: int,
    check_properties: Callable[[dict[str, str]], str | None] = lambda properties: None,
) -> PreparedRecords:
    """Check ``data`` (records back to back, all of ``topic``) and ready it for ``queue_id``.

    Raises AppendRejected naming the first bad record; then nothing is appended.
    ``check_properties`` returns why a record's properties are refused, or None.
    """
    if not data:
        raise AppendRejected(AppendStatus.MESSAGE_ILLEGAL, "an append needs at least one record")
    checked = check_run(data, 0, len(data))
    if checked.problem is not None:
        raise _refused(
            checked.records,
            checked.stop,
            f"{checked.problem.reason}; it is not a valid record, so nothing of this append "
            "was stored (encode records as skiff_broker.wire.record_codec does)",
        )
    topic_bytes = topic.encode()
    in_place = len(born_host) == 8 and len(store_host) == 8
    blob = bytearray(data) if in_place else bytearray()
    layout: list[tuple[int, int, bool, DispatchRequest]] = []
    body_sizes: list[int] = []
    unpack = _DOOR_FIELDS.unpack_from
    header_size = PLAIN_HEADER.size
    end = len(data)
    position = 0
    index = 0
    while position < end:
        size, _magic, crc, flag, sys_flag, born_timestamp, body_length = unpack(data, position)
        if sys_flag & ~_CLIENT_SYS_FLAGS:
            raise _refused(
                index,
                position,
                f"SYSFLAG {sys_flag:#x}: only the compressed bit is the client's to set",
            )
        record_end = position + size
        if not 0 < body_length <= max_message_size:
            raise _refused(
                index,
                position,
                f"body is {body_length} bytes; it must be 1 to {max_message_size}"
                if body_length
                else "message body must not be empty",
            )
        body_at = position + header_size
        topic_at = body_at + body_length
        topic_length = data[topic_at]
        properties_at = topic_at + 3 + topic_length
        if data[topic_at + 1 : topic_at + 1 + topic_length] != topic_bytes:
            raise _refused(
                index, position, f"its topic is not {topic!r}; one append holds one topic"
            )
        if sys_flag & COMPRESSED:
            problem = compressed_body_problem(data[body_at:topic_at], max_message_size)
            if problem is not None:
                raise _refused(
                    index,
                    position,
                    f"{problem}; send the body uncompressed or clear SYSFLAG's compressed bit",
                )
        raw_properties = data[properties_at:record_end]
        if len(raw_properties) > MAX_PROPERTIES_LENGTH:
            raise _refused(
                index,
                position,
                f"properties take {len(raw_properties)} bytes; the limit is "
                f"{MAX_PROPERTIES_LENGTH}",
                AppendStatus.PROPERTIES_SIZE_EXCEEDED,
            )
        if (
            raw_properties.startswith(ID_ONLY_PREFIX)
            and raw_properties.find(b"\x02") == len(raw_properties) - 1
        ):
            # The usual record: nothing but the message ID (the validator saw one pair).
            properties = {Property.UNIQ_KEY: raw_properties[len(ID_ONLY_PREFIX) : -1].decode()}
        else:
            properties = decode_properties(raw_properties)
        problem = check_properties(properties)
        if problem is not None:
            raise _refused(index, position, problem)

        born = born_timestamp or born_default
        if in_place:
            start = position
            _QUEUE_ID.pack_into(blob, start + QUEUE_ID_OFFSET, queue_id)
            _BROKER_FIELDS.pack_into(
                blob, start + BORN_TIMESTAMP_OFFSET, born, born_host, 0, store_host, 0, 0
            )
            timestamp_at = STORE_TIMESTAMP_OFFSET
            length = size
        else:
            # A host needs 16 address bytes: the record grows, so it is written anew.
            start = len(blob)
            flags = sys_flag | host_flags(born_host, store_host)
            header = header_struct(flags)
            length = header.size + (record_end - body_at)
            blob += header.pack(
                length,
                MESSAGE_MAGIC,
                crc,
                queue_id,
                flag,
                0,
                0,
                flags,
                born,
                born_host,
                0,
                store_host,
                0,
                0,
                body_length,
            )
            blob += data[body_at:record_end]
            timestamp_at = store_timestamp_offset(flags)
            sys_flag = flags
        keys = index_keys(properties.get(Property.KEYS, ""), properties.get(Property.UNIQ_KEY))
        layout.append(
            (
                start,
                timestamp_at,
                True,
                DispatchRequest(
                    topic,
                    queue_id,
                    0,
                    0,
                    length,
                    sys_flag,
                    0,
                    properties.get(Property.TAGS, ""),
                    keys,
                ),
            )
        )
        body_sizes.append(body_length)
        position = record_end
        index += 1
    return PreparedRecords(topic, queue_id, blob, layout, body_sizes)


def _refused(
    index: int, position: int, reason: str, status: AppendStatus = AppendStatus.MESSAGE_ILLEGAL
) -> AppendRejected:
    return AppendRejected(status, f"record {index} (byte {position}): {reason}")
