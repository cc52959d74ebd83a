"""Batch and streaming writes into topics, without duplicates when Spark repeats work.

Columns used (by name; others are ignored): ``body`` (binary or string, required),
``topic`` (string; else the ``topic`` option), ``keys`` (array of strings, or one
string), ``tag`` (string), ``properties`` (map of strings), ``message_group``
(string; FIFO topics).

How a repeated write is recognised. Every task sends its rows in chunks (up to
256 messages, 1 MiB) in the order Spark gives them, each chunk in one
SendMessage request, which the broker appends as one contiguous batch. Every
message of a chunk carries the key

    skiff-write:<write ID>:<batch ID>:<partition>:<chunk number>

where the write ID is the streaming query's ID (kept in its checkpoint, so the
same after a restart) and the batch ID Spark's micro-batch number; a batch
write uses a fresh ID per job and batch ID 0. Before sending a chunk, a task
asks the broker's key index whether a message with that key exists, and skips
the chunk if so. A micro-batch that Spark runs again after a restart (it
does so for the last batch it had not committed) reads the same offsets,
so its partitions hold the same rows in the same chunks: what the first run
already stored is skipped and only the rest is sent. A retried task of a batch
job is recognised the same way. Before its first look-up a task waits until
the broker has indexed everything it stored, so a chunk acknowledged just
before a crash is found too.

In a cluster the endpoint's route names every group that takes the topic; each
chunk goes to the group its key (or its message group) picks among them, by
name, so a repeated chunk is looked up where the first attempt stored it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
import zlib
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

from ..client.admin import AdminClient
from ..client.credentials import Credentials
from ..client.errors import BrokerUnavailable
from ..client.messaging import MessagingClient, OutgoingMessage
from .options import OptionError, parse_credentials, parse_endpoints

log = logging.getLogger(__name__)

CHUNK_MAX_MESSAGES = 256
CHUNK_MAX_BYTES = 1024 * 1024
KEY_PREFIX = "skiff-write"
# How long a task waits for the broker's index to catch up before it looks chunks up.
INDEX_WAIT_S = 30.0
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclasses.dataclass
class ChunksWritten(WriterCommitMessage):
    sent_messages: int
    skipped_messages: int  # stored by an earlier attempt


@dataclasses.dataclass(frozen=True, slots=True)
class WriteTarget:
    endpoints: tuple[str, ...]
    default_topic: str | None
    columns: frozenset[str]
    credentials: Credentials | None = None


def write_target(options: dict[str, str], schema: StructType) -> WriteTarget:
    """Check the data's schema against what a write needs (on the driver)."""
    lowered = {k.lower(): v for k, v in options.items()}
    fields = {f.name: f.dataType for f in schema.fields}
    expected = {
        "body": (BinaryType(), StringType()),
        "topic": (StringType(),),
        "keys": (ArrayType(StringType(), True), ArrayType(StringType(), False), StringType()),
        "tag": (StringType(),),
        "properties": (MapType(StringType(), StringType(), True),),
        "message_group": (StringType(),),
    }
    if "body" not in fields:
        raise OptionError(
            'writing to Skiff needs a "body" column (binary or string); '
            f"the data has {sorted(fields)}"
        )
    for name, types in expected.items():
        if name in fields and fields[name] not in types and name != "properties":
            raise OptionError(
                f'column "{name}" is {fields[name].simpleString()}; expected '
                + " or ".join(t.simpleString() for t in types)
            )
    if "properties" in fields and not (
        isinstance(fields["properties"], MapType)
        and fields["properties"].keyType == StringType()
        and fields["properties"].valueType == StringType()
    ):
        raise OptionError('column "properties" must be a map<string,string>')
    topic = lowered.get("topic")
    if "topic" not in fields and not topic:
        raise OptionError(
            'no topic to write to: add a "topic" column or set .option("topic", "orders")'
        )
    return WriteTarget(
        parse_endpoints(options),
        topic,
        frozenset(fields) & set(expected),
        parse_credentials(options),
    )


def chunk_key(write_id: str, batch_id: int, partition: int, chunk: int) -> str:
    return f"{KEY_PREFIX}:{write_id}:{batch_id}:{partition}:{chunk}"


def _messages(batch: pa.RecordBatch, target: WriteTarget) -> Iterator[OutgoingMessage]:
    columns = {name: batch.column(name).to_pylist() for name in target.columns}
    bodies = columns["body"]
    for row, body in enumerate(bodies):
        topic = columns["topic"][row] if "topic" in columns else None
        topic = topic or target.default_topic
        if not topic:
            raise ValueError(f"row {row} has no topic; fill the topic column or set the option")
        keys = columns["keys"][row] if "keys" in columns else None
        if isinstance(keys, str):
            keys = [keys]
        properties = columns["properties"][row] if "properties" in columns else None
        yield OutgoingMessage(
            topic=topic,
            body=body.encode() if isinstance(body, str) else (body or b""),
            tag=(columns["tag"][row] if "tag" in columns else None) or "",
            keys=tuple(k for k in keys or () if k),
            properties=dict(properties or ()),
            message_group=(columns["message_group"][row] if "message_group" in columns else None)
            or "",
        )


class _ChunkSender:
    """Sends one task's messages in keyed chunks, skipping chunks already stored."""

    def __init__(self, target: WriteTarget, write_id: str, batch_id: int, partition: int) -> None:
        self._target = target
        self._write_id = write_id
        self._batch_id = batch_id
        self._partition = partition
        self._bootstrap = MessagingClient(
            self._reachable_endpoint(), credentials=target.credentials
        )
        # Per topic, the groups that take its messages (every group of a cluster).
        self._topic_groups: dict[str, list[str]] = {}
        self._endpoints: dict[str, str] = {}
        self._messaging: dict[str, MessagingClient] = {}
        self._admin: dict[str, AdminClient] = {}
        self._open: dict[tuple[str, str], list[OutgoingMessage]] = {}
        self._sizes: dict[tuple[str, str], int] = {}
        self._chunks: dict[tuple[str, str], int] = {}
        self._index_ready: set[str] = set()
        self.sent = 0
        self.skipped = 0

    def _reachable_endpoint(self) -> str:
        failures = []
        for endpoint in self._target.endpoints:
            try:
                with AdminClient(
                    endpoint, timeout=5, credentials=self._target.credentials
                ) as admin:
                    admin.broker_info()
                return endpoint
            except BrokerUnavailable as exc:
                failures.append(exc.message)
        raise BrokerUnavailable("; ".join(failures))

    def close(self) -> None:
        for client in (self._bootstrap, *self._messaging.values(), *self._admin.values()):
            client.close()

    def _groups_of(self, topic: str) -> list[str]:
        groups = self._topic_groups.get(topic)
        if groups is None:
            found = self._bootstrap.writable_groups(topic) or {"": self._bootstrap.endpoint}
            for group, endpoint in found.items():
                if group not in self._messaging:
                    self._endpoints[group] = endpoint
                    credentials = self._target.credentials
                    self._messaging[group] = MessagingClient(endpoint, credentials=credentials)
                    self._admin[group] = AdminClient(endpoint, credentials=credentials)
            groups = self._topic_groups[topic] = sorted(found)
        return groups

    def add(self, message: OutgoingMessage) -> None:
        # A chunk is one request: one topic, and one message group (the broker puts a
        # request into one queue, which a group must stay in).
        stream = (message.topic, message.message_group)
        chunk = self._open.setdefault(stream, [])
        chunk.append(message)
        self._sizes[stream] = self._sizes.get(stream, 0) + len(message.body) + 256
        if len(chunk) >= CHUNK_MAX_MESSAGES or self._sizes[stream] >= CHUNK_MAX_BYTES:
            self._send(stream)

    def finish(self) -> None:
        for stream in list(self._open):
            self._send(stream)

    def _wait_for_index(self, group: str) -> None:
        """Wait until the group's broker indexed every message it had stored when we started."""
        admin = self._admin[group]
        stored = admin.broker_info().commit_log_max_offset
        deadline = time.monotonic() + INDEX_WAIT_S
        while admin.broker_info().dispatched_offset < stored:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"the broker at {self._endpoints[group]} did not index its messages within "
                    f"{INDEX_WAIT_S:.0f} s; retry the write once it has caught up"
                )
            time.sleep(0.05)
        self._index_ready.add(group)

    def _send(self, stream: tuple[str, str]) -> None:
        messages = self._open.pop(stream, [])
        self._sizes.pop(stream, None)
        if not messages:
            return
        topic, message_group = stream
        number = self._chunks.get(stream, 0)
        self._chunks[stream] = number + 1
        key = chunk_key(self._write_id, self._batch_id, self._partition, number)
        # A message group stays in one broker group (one queue keeps its order).
        # A chunk's group follows from its key, so a retried task checks the same one.
        groups = self._groups_of(topic)
        group = groups[zlib.crc32((message_group or key).encode()) % len(groups)]
        # Chunks of different message groups of one topic must not share a key.
        if message_group:
            key += f":{message_group}"
        if group not in self._index_ready:
            self._wait_for_index(group)
        if self._admin[group].query_messages_by_key(topic, key, max_messages=1):
            self.skipped += len(messages)
            return
        keyed = [dataclasses.replace(m, keys=(*m.keys, key)) for m in messages]
        self._messaging[group].send(keyed)
        self.sent += len(messages)


def write_task(
    iterator: Iterator[pa.RecordBatch], target: WriteTarget, write_id: str, batch_id: int
) -> ChunksWritten:
    """Runs on an executor: send one partition's rows."""
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    sender = _ChunkSender(target, write_id, batch_id, partition)
    try:
        for batch in iterator:
            for message in _messages(batch, target):
                sender.add(message)
        sender.finish()
    finally:
        sender.close()
    if sender.skipped:
        log.info(
            "write %s batch %s partition %s: %d messages were stored by an earlier attempt",
            write_id,
            batch_id,
            partition,
            sender.skipped,
        )
    return ChunksWritten(sender.sent, sender.skipped)


class SkiffBatchWriter(DataSourceArrowWriter):
    def __init__(self, target: WriteTarget) -> None:
        self._target = target
        # Made on the driver: every task (and retry) of this job shares it.
        self._write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ChunksWritten:
        return write_task(iterator, self._target, self._write_id, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.sent_messages for m in messages if isinstance(m, ChunksWritten))
        log.info("wrote %d messages to Skiff", sent)


class SkiffStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, target: WriteTarget) -> None:
        self._target = target

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ChunksWritten:
        context = TaskContext.get()
        query_id = context.getLocalProperty(_QUERY_ID_PROPERTY) if context else None
        batch_id = context.getLocalProperty(_BATCH_ID_PROPERTY) if context else None
        if not query_id or batch_id is None:
            raise RuntimeError(
                "a streaming write to Skiff must run inside a streaming query (Spark did not "
                "give the task its query and batch IDs)"
            )
        return write_task(iterator, self._target, query_id, int(batch_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = [m for m in messages if isinstance(m, ChunksWritten)]
        log.info(
            "micro-batch %d: %d messages sent, %d already stored",
            batchId,
            sum(m.sent_messages for m in written),
            sum(m.skipped_messages for m in written),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # What was sent stays; the rerun of this batch skips it (see the module docstring).
        log.warning("micro-batch %d failed; its rerun will skip what was already stored", batchId)
