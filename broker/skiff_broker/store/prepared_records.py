"""Records a client encoded itself, checked and made ready for the commit log.

Skiff's own producer sends messages already in the record layout (see
``wire.record_layout``), so the broker need not build each record from a
protobuf. Nothing a client wrote is trusted: the run is first checked by
``wire.record_check`` (what it accepts, recovery keeps), then by this door's
own rules (topic, sizes, SYSFLAG bits, properties, compressed bodies), and the
fields that are the broker's to set (queue, born and store hosts, reconsume
count, transaction offset) are overwritten. The queue offset, physical offset
and store timestamp are filled in under the commit log's lock, as for any
other append. Every property set must pass the producer's rules
(``wire.message_rules.producer_property_problem``).

A long append of usual records (plain, IPv4-sized hosts, nothing but a message ID
of one length for properties: what ``BatchingProducer`` sends) is first checked
and filled in with numpy expressions over every record at once. That path only
ever accepts: anything it does not recognise, a refusal included, is decided by
the record-by-record loop, so both give the same bytes, layout and verdict.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from ..wire.body_crc import crc32
from ..wire.compressed_body import compressed_body_problem
from ..wire.field_arrays import fields_at
from ..wire.hosts import host_flags
from ..wire.message_rules import producer_property_problem
from ..wire.properties import ID_ONLY_PREFIX, Property, decode_properties
from ..wire.property_names import message_id_problem
from ..wire.record_check import check_run, record_starts
from ..wire.record_codec import topic_problem
from ..wire.record_layout import (
    BODY_CRC_OFFSET,
    BORN_HOST_OFFSET,
    BORN_TIMESTAMP_OFFSET,
    COMPRESSED,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    PLAIN_HEADER,
    QUEUE_ID_OFFSET,
    STORE_TIMESTAMP_OFFSET,
    SYSFLAG_OFFSET,
    header_struct,
    store_timestamp_offset,
)
from .commit_log import AppendRejected, AppendStatus
from .dispatch_request import DispatchRequest, QueueRun, index_keys

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
    # Per record, as CommitLog.append_encoded takes it; empty for a usual run.
    layout: list[tuple[int, int, bool, DispatchRequest]]
    # Per record, its body's length as stored (compressed if its SYSFLAG says so); an
    # array for a usual run, which is how the message size histogram takes it best.
    body_sizes: list[int] | np.ndarray
    # A usual run instead of a layout, as CommitLog.append_run takes it: the records
    # start in ``blob`` at ``starts``.
    run: QueueRun | None = None
    starts: np.ndarray | None = None

    @property
    def count(self) -> int:
        return len(self.body_sizes)


def prepare_records(
    data: bytes,
    topic: str,
    queue_id: int,
    *,
    born_host: bytes,
    store_host: bytes,
    max_message_size: int,
    born_default: int,
) -> PreparedRecords:
    """Check ``data`` (records back to back, all of ``topic``) and ready it for ``queue_id``.

    Raises AppendRejected naming the first bad record; then nothing is appended.
    """
    if not data:
        raise AppendRejected(AppendStatus.MESSAGE_ILLEGAL, "an append needs at least one record")
    if (
        len(data) >= _RUN_MIN_RECORDS * MIN_RECORD_SIZE
        and len(born_host) == 8
        and len(store_host) == 8
        and topic_problem(topic.encode()) is None
    ):
        starts = record_starts(data, 0, len(data))
        if len(starts) >= _RUN_MIN_RECORDS:
            prepared = _usual_run(
                data, starts, topic, queue_id, born_host, store_host, max_message_size, born_default
            )
            if prepared is not None:
                return prepared
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
            problem = message_id_problem(unique_key)
            tags = ""
            keys = [unique_key] if unique_key else []
        else:
            properties = decode_properties(data[properties_at:record_end])
            problem = producer_property_problem(properties)
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


# Records from which an append is first tried as a usual run: below it numpy's fixed cost
# per call outweighs the loop's per record.
_RUN_MIN_RECORDS = 48
# The 32-bit fields a run's check reads, by offset: TOTALSIZE, MAGIC, BODYCRC, SYSFLAG and
# BODYLENGTH, read unsigned (a negative length fails as a huge one).
_RUN_FIELDS = np.array([0, 4, BODY_CRC_OFFSET, SYSFLAG_OFFSET, PLAIN_HEADER.size - 4])
# The bytes a message ID may hold in a usual record: ASCII but the two separators, as
# record_check's inline pattern allows in a property value.
_ID_BYTES = np.array([byte == 0 or 3 <= byte < 0x80 for byte in range(256)])
# Of those, the white space ``message_id_problem`` strips: an ID of these alone is blank.
_BLANK_ID_BYTES = np.array([byte < 0x80 and chr(byte).isspace() for byte in range(256)])
# Between a run's IDs when they are cut apart: a byte no ID of a usual record holds.
_ID_SEPARATOR = 1
assert not _ID_BYTES[_ID_SEPARATOR]
# The broker's fields of a run's records, by offset: QUEUEID, BORNHOST (IPv4-sized), then
# STOREHOST, RECONSUMETIMES and PREPARED TRANSACTION OFFSET, up to BODYLENGTH.
_RUN_BROKER_COLUMNS = np.concatenate(
    [
        np.arange(QUEUE_ID_OFFSET, QUEUE_ID_OFFSET + 4),
        np.arange(BORN_HOST_OFFSET, BORN_HOST_OFFSET + 8),
        np.arange(STORE_TIMESTAMP_OFFSET + 8, PLAIN_HEADER.size - 4),
    ]
)
assert len(_RUN_BROKER_COLUMNS) == 4 + 8 + 8 + 4 + 8


def _usual_run(
    data: bytes,
    starts: np.ndarray,
    topic: str,
    queue_id: int,
    born_host: bytes,
    store_host: bytes,
    max_message_size: int,
    born_default: int,
) -> PreparedRecords | None:
    """The loop's result for a run of usual records, with one numpy expression per rule
    instead of one Python step per record; None unless every record is usual and passes.

    Usual: plain SYSFLAG (0), a body of 1 to ``max_message_size`` bytes, ``topic``, and
    for properties ``UNIQ_KEY\\x01<id>\\x02`` with ids of one length, in ASCII without
    ``\\x01`` or ``\\x02``. ``record_check`` then takes the inline path for each record,
    and the door the ID-only one. ``starts`` come from the sizes: only a guess, shown
    true by each record ending where the next starts.
    """
    end = len(data)
    bytes_at = np.frombuffer(data, dtype=np.uint8)
    # ``record_starts`` leaves room for a whole minimal record after every start.
    size, magic, crc, sys_flag, body_length = fields_at(
        data, end, starts[:, None] + _RUN_FIELDS, ">u4"
    ).T
    record_end = starts + size
    encoded = topic.encode()
    # After the body: TOPICLENGTH, TOPIC, PROPERTIESLENGTH, UNIQ_KEY\x01, the ID, \x02.
    fixed = bytes((len(encoded),)) + encoded
    tail_at = starts + PLAIN_HEADER.size + body_length
    tail_size = int(record_end[0] - tail_at[0])
    properties_size = tail_size - len(fixed) - 2
    id_at = len(fixed) + 2 + len(ID_ONLY_PREFIX)
    id_size = tail_size - id_at - 1
    if not (
        record_end[-1] == end
        and (record_end[:-1] == starts[1:]).all()
        and (magic == MESSAGE_MAGIC).all()
        and not sys_flag.any()
        and (body_length > 0).all()
        and (body_length <= max_message_size).all()
        and id_size > 0
        and properties_size <= MAX_PROPERTIES_LENGTH
        and (record_end - tail_at == tail_size).all()
    ):
        return None
    # From here every record is whole, and its tail lies inside it.
    fixed += properties_size.to_bytes(2, "big") + ID_ONLY_PREFIX
    tails = bytes_at[tail_at[:, None] + np.arange(tail_size)]
    ids = tails[:, id_at:-1]
    if not (
        (tails[:, :id_at] == np.frombuffer(fixed, dtype=np.uint8)).all()
        and (tails[:, -1] == 2).all()
        and _ID_BYTES[ids].all()
    ):
        return None
    with memoryview(data) as view:
        crcs = np.array(
            [
                crc32(view[body_at:body_end])
                for body_at, body_end in zip(
                    (starts + PLAIN_HEADER.size).tolist(), tail_at.tolist(), strict=True
                )
            ]
        )
    if not ((crcs & 0x7FFFFFFF) == crc).all():
        return None
    # message_id_problem for each ID at once: some byte of it is not white space.
    if not (~_BLANK_ID_BYTES[ids]).any(axis=1).all():
        return None
    separated = np.empty((len(ids), id_size + 1), dtype=np.uint8)
    separated[:, :id_size] = ids
    separated[:, id_size] = _ID_SEPARATOR
    keys = separated.tobytes().decode("ascii").split(chr(_ID_SEPARATOR))
    keys.pop()  # after the last separator

    # The broker's fields, written in place. QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP
    # are left as they came: the commit log writes them when it appends the run.
    blob = bytearray(data)
    writable = np.frombuffer(blob, dtype=np.uint8)
    writable[starts[:, None] + _RUN_BROKER_COLUMNS] = np.frombuffer(
        queue_id.to_bytes(4, "big", signed=True) + born_host + store_host + bytes(12),
        dtype=np.uint8,
    )
    born = fields_at(data, end, starts + BORN_TIMESTAMP_OFFSET, ">i8")
    if not born.all():
        unborn = starts[born == 0] + BORN_TIMESTAMP_OFFSET
        writable[unborn[:, None] + np.arange(8)] = np.frombuffer(
            born_default.to_bytes(8, "big", signed=True), dtype=np.uint8
        )
    run = QueueRun(topic, queue_id, keys, size.tolist())
    return PreparedRecords(topic, queue_id, blob, [], body_length, run, starts)


def _refused(
    index: int, position: int, reason: str, status: AppendStatus = AppendStatus.MESSAGE_ILLEGAL
) -> AppendRejected:
    return AppendRejected(status, f"record {index} (byte {position}): {reason}")
