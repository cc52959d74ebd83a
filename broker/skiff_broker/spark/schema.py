"""The rows of the ``skiff`` data source: one per message, as Spark and as Arrow sees them.

A message is identified by ``broker`` (its group's name, RocketMQ's broker name),
``topic``, ``queue`` and ``offset``: every group of a cluster has the same queue IDs.
``broker`` comes last so that columns read by position before it existed keep theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..client.pull_consumer import PulledMessage

if TYPE_CHECKING:
    import pyarrow as pa

# What a read returns. Writes take the same names (see writer.py for which are used).
SCHEMA_DDL = (
    "topic STRING NOT NULL, queue INT NOT NULL, offset BIGINT NOT NULL, "
    "message_id STRING, keys ARRAY<STRING>, tag STRING, body BINARY, "
    "properties MAP<STRING, STRING>, born_timestamp TIMESTAMP, store_timestamp TIMESTAMP, "
    "broker STRING NOT NULL"
)


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("topic", pa.string(), nullable=False),
            pa.field("queue", pa.int32(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("message_id", pa.string()),
            pa.field("keys", pa.list_(pa.field("element", pa.string()))),
            pa.field("tag", pa.string()),
            pa.field("body", pa.binary()),
            pa.field("properties", pa.map_(pa.string(), pa.string())),
            pa.field("born_timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("store_timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("broker", pa.string(), nullable=False),
        ]
    )


def record_batch(
    messages: Sequence[PulledMessage], schema: pa.Schema, group: str
) -> pa.RecordBatch:
    """The messages of one queue of ``group`` as one Arrow record batch of ``schema``."""
    import pyarrow as pa

    columns = [
        [m.topic for m in messages],
        [m.queue_id for m in messages],
        [m.queue_offset for m in messages],
        [m.message_id for m in messages],
        [list(m.keys) for m in messages],
        [m.tag or None for m in messages],
        [m.body for m in messages],
        [list(m.properties.items()) for m in messages],
        # Spark's timestamps are microseconds; the broker's are milliseconds.
        [m.born_timestamp * 1000 for m in messages],
        [m.store_timestamp * 1000 for m in messages],
        [group] * len(messages),
    ]
    arrays = [
        pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
