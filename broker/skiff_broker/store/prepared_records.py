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
# QUEUEID .. PREPARED TRANSACTION OFFSET with IPv4 hosts, written in one go: FLAG and
# SYSFLAG as read, QUEUEOFFSET and PHYSICALOFFSET zero (the commit log fills them in).
_BROKER_FIELDS = struct.Struct(">ii16xiq8sq8siq")
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
    # TOPICLENGTH and TOPIC: one comparison checks both, without cutting bytes out.
    topic_field = bytes((len(topic_bytes),)) + topic_bytes if len(topic_bytes) < 256 else None
    topic_length = len(topic_bytes)
    id_only_at = len(ID_ONLY_PREFIX)
    in_place = len(born_host) == 8 and len(store_host) == 8
    blob = bytearray(data) if in_place else bytearray()
    layout: list[tuple[int, int, bool, DispatchRequest]] = []
    body_sizes: list[int] = []
    unpack = _DOOR_FIELDS.unpack_from
    pack_broker_fields = _BROKER_FIELDS.pack_into
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
        if topic_field is None or not data.startswith(topic_field, topic_at):
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
        properties_at = topic_at + 3 + topic_length
        if record_end - properties_at > MAX_PROPERTIES_LENGTH:
            raise _refused(
                index,
                position,
                f"properties take {record_end - properties_at} bytes; the limit is "
                f"{MAX_PROPERTIES_LENGTH}",
                AppendStatus.PROPERTIES_SIZE_EXCEEDED,
            )
        if (
            data.startswith(ID_ONLY_PREFIX, properties_at)
            and data.find(b"\x02", properties_at, record_end) == record_end - 1
        ):
            # The usual record: nothing but the message ID (the validator saw one pair).
            unique_key = data[properties_at + id_only_at : record_end - 1].decode()
            properties = {Property.UNIQ_KEY: unique_key}
            problem = check_properties(properties)
            tags = ""
            keys = [unique_key] if unique_key else []
        else:
            properties = decode_properties(data[properties_at:record_end])
            problem = check_properties(properties)
            tags = properties.get(Property.TAGS, "")
            keys = index_keys(properties.get(Property.KEYS, ""), properties.get(Property.UNIQ_KEY))
        if problem is not None:
            raise _refused(index, position, problem)

        born = born_timestamp or born_default
        if in_place:
            start = position
            pack_broker_fields(
                blob,
                start + QUEUE_ID_OFFSET,
                queue_id,
                flag,
                sys_flag,
                born,
                born_host,
                0,
                store_host,
                0,
                0,
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
                    tags,
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
