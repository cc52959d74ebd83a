"""Fetched records straight into the source's Arrow columns, without an object per message.

Invariant: :func:`record_batch_of_records` returns the record batch that
``schema.record_batch`` builds from the same records' decoded messages, cell for cell,
or None when the records need the per-message decoder (``client.records``): a record
the validator refuses, IPv6 hosts, a compressed body, properties that are not UTF-8 or
that name one property twice. The caller then decodes those records message by message,
so every record reads the same either way; only the cost differs.

How: one Python pass over the record sizes finds where each record starts; the one
validator checks the framing from there, each rule over every record at once; numpy
reads each fixed header field of every row in one gather (``wire.field_arrays``) and
finds the properties' pairs; Arrow copies bodies, names and values out of the records
in place. The per-message work runs in C, which is what lets a Spark task read a queue
at several hundred thousand messages a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..wire import property_names as prop
from ..wire.field_arrays import fields_at
from ..wire.record_check import check_run, record_starts
from ..wire.record_codec import offset_message_id
from ..wire.record_layout import (
    BORN_TIMESTAMP_OFFSET,
    COMPRESSED,
    HOST_V6_BITS,
    PLAIN_HEADER,
    QUEUE_ID_OFFSET,
    QUEUE_OFFSET_OFFSET,
    STORE_TIMESTAMP_OFFSET,
    SYSFLAG_OFFSET,
)

if TYPE_CHECKING:
    import pyarrow as pa

# Where the IPv4 header keeps what a row needs besides the offsets named in record_layout.
_PHYSICAL_OFFSET_OFFSET = QUEUE_OFFSET_OFFSET + 8
_STORE_HOST_OFFSET = STORE_TIMESTAMP_OFFSET + 8
_BODY_LENGTH_OFFSET = PLAIN_HEADER.size - 4
_RESERVED = sorted(prop.RESERVED)


def _cut(records: bytes, begins: np.ndarray, ends: np.ndarray, kind: pa.DataType) -> pa.Array:
    """The byte ranges ``[begins[i], ends[i])`` of ``records`` (in order, not overlapping) as
    one Arrow binary or string array."""
    import pyarrow as pa

    # Over the records in place, the ranges alternate with what lies between them: every
    # other element is one wanted, and ``take`` copies those out in C.
    bounds = np.empty(2 * len(begins), dtype=np.int64)
    bounds[0::2], bounds[1::2] = begins, ends
    large = pa.large_binary() if kind == pa.binary() else pa.large_string()
    alternating = pa.Array.from_buffers(
        large, max(len(bounds) - 1, 0), [None, pa.py_buffer(bounds), pa.py_buffer(records)]
    )
    wanted = alternating.take(np.arange(0, len(bounds), 2, dtype=np.int64))
    return wanted.cast(kind)


def _pairs(
    text: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty ``name\x01value`` pairs of every row's properties, as the decoder
    reads them: split at ``\x02`` and at the row's end, the name up to the first ``\x01``
    (all of the pair without one), the value after it.

    ``text`` holds the rows' properties back to back, row ``i`` from ``offsets[i]`` to
    ``offsets[i + 1]``. Returns, per pair in order: its row, where its name ends, where its
    value starts, where it ends and where it starts.
    """
    separators = np.flatnonzero(text == 2)
    row_ends = offsets[1:].astype(np.int64)
    # Each pair ends at a separator or at its row's end; the next begins after it. A row's
    # end sorts before a separator at the same place, which is the next row's first byte.
    ends = np.concatenate([row_ends, separators])
    after = np.concatenate([row_ends, separators + 1])
    order = np.argsort(ends, kind="stable")
    ends, after = ends[order], after[order]
    starts = np.empty_like(ends)
    starts[:1] = offsets[:1]
    starts[1:] = after[:-1]
    present = ends > starts
    starts, ends = starts[present], ends[present]
    rows = np.searchsorted(offsets, starts, side="right") - 1
    marks = np.flatnonzero(text == 1)
    first = np.searchsorted(marks, starts)
    mark = marks[np.minimum(first, len(marks) - 1)] if len(marks) else np.full_like(ends, -1)
    named = (first < len(marks)) & (mark < ends)
    name_ends = np.where(named, mark, ends)
    return rows, name_ends, np.where(named, mark + 1, ends), ends, starts


def record_batch_of_records(
    records: bytes,
    *,
    topic: str,
    group: str,
    end: int,
    schema: pa.Schema,
    check_crc: bool,
) -> pa.RecordBatch | None:
    """The rows of ``records`` (one queue of ``topic`` on ``group``) before queue offset
    ``end``, or None when they need the per-message decoder (see the module's invariant)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # Once the validator accepts the whole run, the starts its check began from are the
    # records' own.
    starts = record_starts(records, 0, len(records))
    checked = check_run(records, 0, len(records), check_crc=check_crc, text=False, starts=starts)
    if checked.problem is not None:
        return None
    end_of_records = len(records)

    def field(at: int, dtype: str) -> np.ndarray:
        """Field ``at`` bytes into every row's record."""
        return fields_at(records, end_of_records, starts + at, dtype)

    queue_offsets = field(QUEUE_OFFSET_OFFSET, ">i8")
    before_end = int(np.searchsorted(queue_offsets, end))  # a queue's offsets ascend
    starts, queue_offsets = starts[:before_end], queue_offsets[:before_end]
    if np.any(field(SYSFLAG_OFFSET, ">i4") & (HOST_V6_BITS | COMPRESSED)):
        return None
    rows = len(starts)
    body_at = starts + PLAIN_HEADER.size
    topic_at = body_at + field(_BODY_LENGTH_OFFSET, ">i4")
    properties_at = topic_at + 3 + fields_at(records, end_of_records, topic_at, ">u1")
    record_end = starts + field(0, ">i4")

    properties = _cut(records, properties_at, record_end, pa.string())
    try:
        properties.validate(full=True)
    except pa.ArrowInvalid:
        return None  # not UTF-8: the decoder shows replacement marks
    _, offsets, text = properties.buffers()
    row_offsets = np.frombuffer(offsets, dtype=np.int32)[
        properties.offset : properties.offset + rows + 1
    ]
    pair_rows, name_ends, values_at, pair_ends, pair_starts = _pairs(
        np.frombuffer(text, dtype=np.uint8), row_offsets
    )
    names = _cut(text, pair_starts, name_ends, pa.string())
    values = _cut(text, values_at, pair_ends, pa.string())
    # Parent rows come in order: a row with two pairs or more stands next to itself.
    if len(pair_rows) > 1 and np.any(pair_rows[1:] == pair_rows[:-1]):
        # A name given twice in one record: the decoder keeps its first place and last value.
        named = pc.binary_join_element_wise(pa.array(pair_rows).cast(pa.string()), names, "\x01")
        if pc.count_distinct(named).as_py() != len(named):
            return None

    def value_of(name: str) -> pa.Array:
        """Each row's value of property ``name``, null where the row has none."""
        at = np.flatnonzero(pc.equal(names, name).to_numpy(zero_copy_only=False))
        where = np.full(rows, -1, dtype=np.int64)
        where[pair_rows[at]] = at
        return values.take(pa.array(where, mask=where < 0))

    message_ids = value_of(prop.UNIQ_KEY)
    without_id = np.flatnonzero(
        pc.fill_null(pc.equal(message_ids, ""), True).to_numpy(zero_copy_only=False)
    )
    if len(without_id):
        # Records written without a client ID have RocketMQ's offset message ID.
        physical = field(_PHYSICAL_OFFSET_OFFSET, ">i8")[without_id]
        ids = message_ids.to_pylist()
        for row, physical_offset in zip(without_id.tolist(), physical.tolist(), strict=True):
            host_at = int(starts[row]) + _STORE_HOST_OFFSET
            ids[row] = offset_message_id(records[host_at : host_at + 8], physical_offset)
        message_ids = pa.array(ids, pa.string())

    tags = value_of(prop.TAGS)
    tags = pc.if_else(pc.equal(tags, ""), pa.scalar(None, pa.string()), tags)
    keys = value_of(prop.KEYS)
    keys = pc.split_pattern(pc.if_else(pc.equal(keys, ""), pa.scalar(None, pa.string()), keys), " ")
    # Rows without keys have an empty list, not a null one.
    keys = pa.ListArray.from_arrays(keys.offsets, keys.values, type=schema.field("keys").type)

    users = pc.invert(pc.is_in(names, value_set=pa.array(_RESERVED, pa.string())))
    user_offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(
        np.bincount(pair_rows[users.to_numpy(zero_copy_only=False)], minlength=rows),
        out=user_offsets[1:],
    )
    user_properties = pa.MapArray.from_arrays(
        pa.array(user_offsets),
        names.filter(users),
        values.filter(users),
        type=schema.field("properties").type,
    )

    # Spark's timestamps are microseconds; the broker's are milliseconds.
    microseconds = schema.field("born_timestamp").type
    columns = [
        pa.array([topic], pa.string()).take(np.zeros(rows, dtype=np.int32)),
        pa.array(field(QUEUE_ID_OFFSET, ">i4"), pa.int32()),
        pa.array(queue_offsets, pa.int64()),
        message_ids,
        keys,
        tags,
        _cut(records, body_at, topic_at, pa.binary()),
        user_properties,
        pa.array(field(BORN_TIMESTAMP_OFFSET, ">i8") * 1000, microseconds),
        pa.array(field(STORE_TIMESTAMP_OFFSET, ">i8") * 1000, microseconds),
        pa.array([group], pa.string()).take(np.zeros(rows, dtype=np.int32)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
