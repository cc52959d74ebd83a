"""The commit log: every message of every topic, appended in arrival order.

A batch is encoded outside the lock, then written contiguously under one lock
hold, with queue offsets assigned per topic/queue at that moment. When a batch
does not fit in what is left of a segment, a BLANK record pads the segment's end
and the batch goes whole into the next one.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from ..wire.hosts import encode_host, host_flags
from ..wire.properties import Property, encode_properties
from ..wire.record_codec import (
    CorruptRecordError,
    StoredMessage,
    decode_record,
    encode_record_into,
    topic_problem,
)
from ..wire.record_layout import (
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    HOST_V6_BITS,
    INT,
    LONG,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC,
    PHYSICAL_OFFSET_OFFSET,
    QUEUE_OFFSET_OFFSET,
    SIZE_MAGIC,
    STORE_TIMESTAMP_OFFSET,
    SYSFLAG_OFFSET,
    TRANSACTION_MASK,
    UNQUEUED_TRANSACTION_TYPES,
    store_timestamp_offset,
)
from .config import StoreConfig
from .dispatch_request import DispatchRequest, QueueRun, index_keys
from .errors import DiskFullError
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .message import Message
from .segment_allocator import SegmentAllocator
from .transient_store_pool import TransientStorePool

# QUEUEOFFSET and PHYSICALOFFSET are adjacent in every record.
_QUEUE_AND_PHYSICAL_OFFSET = struct.Struct(">qq")
assert PHYSICAL_OFFSET_OFFSET == QUEUE_OFFSET_OFFSET + 8
_TOPIC_CACHE_SIZE = 65536
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class AppendStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    DISK_FULL = "DISK_FULL"


class AppendRejected(Exception):
    """The batch was not appended; nothing of it is in the log."""

    def __init__(self, status: AppendStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclasses.dataclass(slots=True)
class AppendResult:
    wrote_offset: int
    wrote_bytes: int
    store_timestamp: int
    physical_offsets: list[int]
    queue_offsets: list[int]
    sizes: list[int]

    @property
    def next_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes


def _check_fixed_fields(m: Message) -> None:
    """Reject values the record's fixed-width fields cannot hold.

    Checked before the lock: a failure while writing would leave queue offsets
    assigned to a batch that is not in the log.
    """
    if (
        0 <= m.queue_id <= _INT32_MAX
        and -_INT32_MAX - 1 <= m.flag <= _INT32_MAX
        and -_INT32_MAX - 1 <= m.sys_flag <= _INT32_MAX
        and -_INT32_MAX - 1 <= m.reconsume_times <= _INT32_MAX
        and -_INT64_MAX - 1 <= m.born_timestamp <= _INT64_MAX
        and -_INT64_MAX - 1 <= m.prepared_transaction_offset <= _INT64_MAX
    ):
        return
    if not 0 <= m.queue_id <= _INT32_MAX:
        raise AppendRejected(
            AppendStatus.MESSAGE_ILLEGAL, f"queue id must be 0 to {_INT32_MAX}, got {m.queue_id}"
        )
    for name, value, limit in (
        ("flag", m.flag, _INT32_MAX),
        ("sys_flag", m.sys_flag, _INT32_MAX),
        ("reconsume_times", m.reconsume_times, _INT32_MAX),
        ("born_timestamp", m.born_timestamp, _INT64_MAX),
        ("prepared_transaction_offset", m.prepared_transaction_offset, _INT64_MAX),
    ):
        if not -limit - 1 <= value <= limit:
            raise AppendRejected(
                AppendStatus.MESSAGE_ILLEGAL, f"{name} {value} does not fit its record field"
            )


def _first_store_timestamp(data: bytes | memoryview) -> int:
    """STORETIMESTAMP of the first message record in ``data``, or -1 if it starts with none."""
    if len(data) < SYSFLAG_OFFSET + 4 or SIZE_MAGIC.unpack_from(data, 0)[1] != MESSAGE_MAGIC:
        return -1
    sys_flag = int.from_bytes(data[SYSFLAG_OFFSET : SYSFLAG_OFFSET + 4], "big", signed=True)
    at = store_timestamp_offset(sys_flag)
    if len(data) < at + 8:
        return -1
    return LONG.unpack_from(data, at)[0]


def _record_starts(run: bytes | memoryview) -> list[int]:
    """Where each record of a run of whole, checked records begins (zeros are one piece)."""
    starts = []
    pos = 0
    end = len(run) - 8
    while pos <= end:
        starts.append(pos)
        size = INT.unpack_from(run, pos)[0]
        if size < 8:
            break  # zero padding, which the replica writes after a BLANK's head
        pos += size
    return starts or [0]


class CommitLog:
    def __init__(
        self,
        config: StoreConfig,
        *,
        allocator: SegmentAllocator | None,
        pool: TransientStorePool | None,
    ) -> None:
        self.config = config
        self.queue = MappedFileQueue(
            config.commit_log_dir, config.commit_log_file_size, allocator=allocator, pool=pool
        )
        self._lock = threading.Lock()
        self.store_host = encode_host(config.store_host)
        # Next queue offset per (topic, queue id): RocketMQ's topicQueueTable.
        self.queue_offsets: dict[tuple[str, int], int] = {}
        # Store timestamp of the newest record, for the checkpoint.
        self.last_store_timestamp = 0
        # Gets each appended batch's dispatch requests (or run), in log order.
        self.on_append: Callable[[list[DispatchRequest] | QueueRun], None] = lambda batch: None
        self._valid_topics: dict[str, bytes] = {}

    # -- appending ----------------------------------------------------------

    def append(self, messages: Sequence[Message]) -> AppendResult:
        """Append a batch contiguously; raises AppendRejected and writes nothing on bad input."""
        if not messages:
            raise AppendRejected(AppendStatus.MESSAGE_ILLEGAL, "a batch needs at least one message")
        # Records are built whole outside the lock; under it only the queue
        # offset, physical offset and store timestamp are patched in, and the
        # batch is copied into the segment with one slice assignment.
        born_default = int(time.time() * 1000)
        blob = bytearray()
        layout = []
        for m in messages:
            start = len(blob)
            timestamp_at, counted, request = self._encode_into(blob, m, born_default)
            layout.append((start, timestamp_at, counted, request))
        return self.append_encoded(blob, layout)

    def append_encoded(
        self, blob: bytearray, layout: list[tuple[int, int, bool, DispatchRequest]]
    ) -> AppendResult:
        """Append records already encoded into ``blob``, as one contiguous batch.

        ``layout`` has per record: its start in ``blob``, where its STORETIMESTAMP
        is, whether it takes a queue offset, and what the dispatcher needs of it.
        """
        with self._lock:
            result = self._append_locked(blob, layout)
            # Under the lock, so the dispatcher receives batches in log order.
            self.on_append([entry[3] for entry in layout])
        return result

    def append_run(self, blob: bytearray, starts: np.ndarray, run: QueueRun) -> AppendResult:
        """Append ``run``'s records, encoded into ``blob`` at ``starts`` with IPv4-sized hosts,
        as one contiguous batch: ``append_encoded``'s bytes and offsets, with the fields
        under the lock written for every record at once."""
        count = len(starts)
        with self._lock:
            mf = self._segment_for(len(blob))
            base = mf.file_from_offset + mf.wrote_position
            now = int(time.time() * 1000)
            key = (run.topic, run.queue_id)
            first = self.queue_offsets.get(key, 0)
            self.queue_offsets[key] = first + count
            physical = starts + base
            offsets = np.empty((count, 2), dtype=">i8")
            offsets[:, 0] = np.arange(first, first + count)
            offsets[:, 1] = physical
            writable = np.frombuffer(blob, dtype=np.uint8)
            writable[(starts + QUEUE_OFFSET_OFFSET)[:, None] + np.arange(16)] = offsets.view(
                np.uint8
            ).reshape(count, 16)
            writable[(starts + STORE_TIMESTAMP_OFFSET)[:, None] + np.arange(8)] = np.frombuffer(
                LONG.pack(now), dtype=np.uint8
            )
            run.queue_offset = first
            run.physical_offsets = physical.tolist()
            run.store_timestamp = now
            # Every record's TOTALSIZE and MAGIC land last, as append_encoded's do.
            mf.append(blob, heads=starts.tolist())
            self.last_store_timestamp = now
            # Under the lock, so the dispatcher receives batches in log order.
            self.on_append(run)
        return AppendResult(
            base,
            len(blob),
            now,
            run.physical_offsets,
            list(range(first, first + count)),
            run.sizes,
        )

    def append_raw(self, offset: int, data: bytes | memoryview, notify: Callable[[], None]) -> int:
        """Copy records another log already holds at ``offset`` (replication); returns the end.

        ``offset`` must be where this log ends, and the bytes must fit in the
        segment holding it (a sender sends one segment at a time).
        """
        with self._lock:
            queue = self.queue
            if queue.last_file is None:
                mf = queue.last_file_for_append(offset)
                if mf.wrote_position == 0 and offset != mf.file_from_offset:
                    mf.set_positions(offset - mf.file_from_offset)
            else:
                end = queue.max_wrote_offset
                if offset != end:
                    raise ValueError(
                        f"replicated bytes start at {offset}, but the log ends at {end}"
                    )
                mf = queue.last_file_for_append()
            position = offset - mf.file_from_offset
            if position != mf.wrote_position or len(data) > mf.remaining:
                raise ValueError(
                    f"{len(data)} replicated bytes at {offset} do not fit segment "
                    f"{mf.file_from_offset} (written to {mf.wrote_position})"
                )
            mf.append(data, heads=_record_starts(data))
            end = mf.file_from_offset + mf.wrote_position
            # The checkpoint's flush stamp: the run's first record is old enough a bound.
            stamp = _first_store_timestamp(data)
            if stamp > self.last_store_timestamp:
                self.last_store_timestamp = stamp
        notify()
        return end

    def topic_field(self, topic: str) -> bytes:
        """TOPICLENGTH and TOPIC for ``topic``; AppendRejected if it cannot name a topic."""
        field = self._valid_topics.get(topic)
        if field is not None:
            return field
        try:
            encoded = topic.encode()
        except UnicodeEncodeError:
            raise AppendRejected(
                AppendStatus.MESSAGE_ILLEGAL, "topic name must be valid Unicode text"
            ) from None
        if "/" in topic or "\x00" in topic or topic in (".", ".."):
            # The topic names a consume-queue directory, and recovery takes a NUL
            # at a topic's end for a torn write.
            raise AppendRejected(
                AppendStatus.MESSAGE_ILLEGAL,
                f"topic name {topic!r} must not contain '/' or NUL, nor be '.' or '..'",
            )
        problem = topic_problem(encoded)
        if problem is not None:
            raise AppendRejected(AppendStatus.MESSAGE_ILLEGAL, problem)
        field = bytes((len(encoded),)) + encoded
        if len(self._valid_topics) < _TOPIC_CACHE_SIZE:
            self._valid_topics[topic] = field
        return field

    def _encode_into(
        self, blob: bytearray, m: Message, born_default: int
    ) -> tuple[int, bool, DispatchRequest]:
        """Append one record to ``blob``.

        Returns where its STORETIMESTAMP sits, whether it takes a queue offset, and
        what the dispatcher needs of it (offsets and timestamp filled in later).
        """
        topic = self.topic_field(m.topic)
        try:
            props = encode_properties(m.properties)
        except ValueError as exc:
            raise AppendRejected(AppendStatus.MESSAGE_ILLEGAL, str(exc)) from exc
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise AppendRejected(
                AppendStatus.PROPERTIES_SIZE_EXCEEDED,
                f"properties take {len(props)} bytes; the limit is {MAX_PROPERTIES_LENGTH}",
            )
        body = m.body
        if len(body) > self.config.max_message_size:
            raise AppendRejected(
                AppendStatus.MESSAGE_ILLEGAL,
                f"message body is {len(body)} bytes; the limit is {self.config.max_message_size}",
            )
        try:
            born = encode_host(m.born_host)
        except ValueError as exc:
            raise AppendRejected(AppendStatus.MESSAGE_ILLEGAL, str(exc)) from exc
        _check_fixed_fields(m)
        sys_flag = (m.sys_flag & ~HOST_V6_BITS) | host_flags(born, self.store_host)
        length = encode_record_into(
            blob,
            topic,
            body,
            props,
            m.queue_id,
            m.flag,
            sys_flag,
            m.born_timestamp or born_default,
            born,
            self.store_host,
            m.reconsume_times,
            m.prepared_transaction_offset,
        )
        # Half and rolled-back transaction messages never reach a consume queue.
        counted = (sys_flag & TRANSACTION_MASK) not in UNQUEUED_TRANSACTION_TYPES
        properties = m.properties
        keys = index_keys(properties.get(Property.KEYS, ""), properties.get(Property.UNIQ_KEY))
        request = DispatchRequest(
            m.topic, m.queue_id, 0, 0, length, sys_flag, 0, properties.get(Property.TAGS, ""), keys
        )
        return store_timestamp_offset(sys_flag), counted, request

    def _append_locked(self, blob: bytearray, layout: list) -> AppendResult:
        mf = self._segment_for(len(blob))
        base = mf.file_from_offset + mf.wrote_position
        now = int(time.time() * 1000)
        offsets_table = self.queue_offsets
        physical_offsets = []
        queue_offsets = []
        sizes = []
        for start, timestamp_at, counted, request in layout:
            if counted:
                key = (request.topic, request.queue_id)
                queue_offset = offsets_table.get(key, 0)
                offsets_table[key] = queue_offset + 1
            else:
                queue_offset = 0
            _QUEUE_AND_PHYSICAL_OFFSET.pack_into(
                blob, start + QUEUE_OFFSET_OFFSET, queue_offset, base + start
            )
            LONG.pack_into(blob, start + timestamp_at, now)
            request.queue_offset = queue_offset
            request.physical_offset = base + start
            request.store_timestamp = now
            physical_offsets.append(base + start)
            queue_offsets.append(queue_offset)
            sizes.append(request.size)
        # Every record's TOTALSIZE and MAGIC land last, in order: a torn copy
        # leaves a prefix of the batch, then zeros where a record belongs.
        mf.append(blob, heads=[entry[0] for entry in layout])
        self.last_store_timestamp = now
        return AppendResult(base, len(blob), now, physical_offsets, queue_offsets, sizes)

    def _segment_for(self, total: int) -> MappedFile:
        """The segment that takes ``total`` bytes, padding and rolling if needed."""
        limit = self.queue.file_size - END_FILE_MIN_BLANK_LENGTH
        if total > limit:
            raise AppendRejected(
                AppendStatus.MESSAGE_ILLEGAL,
                f"a batch of {total} bytes cannot fit in a {self.queue.file_size}-byte segment",
            )
        try:
            mf = self.queue.last_file_for_append()
            if total + END_FILE_MIN_BLANK_LENGTH > mf.remaining:
                self._pad(mf)
                mf = self.queue.last_file_for_append()
        except DiskFullError as exc:
            raise AppendRejected(AppendStatus.DISK_FULL, str(exc)) from exc
        return mf

    @staticmethod
    def _pad(mf: MappedFile) -> None:
        """Fill the rest of a segment with a BLANK record: readers skip to the next one."""
        pos = mf.wrote_position
        SIZE_MAGIC.pack_into(mf.write_target, pos, mf.file_size - pos, BLANK_MAGIC)
        mf.wrote_position = mf.file_size

    # -- reading ------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """Offset of the first record still on disk."""
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        """End of readable data (committed to the file)."""
        return self.queue.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_where

    def read(self, offset: int, size: int) -> bytes | None:
        """Raw bytes of one record or run of records, or None if that offset is gone."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        try:
            data = mf.read(offset - mf.file_from_offset, size)
        except ValueError:
            # Deleted by retention while we were looking.
            return None
        return data if len(data) == size else None

    def read_segment_tail(self, offset: int, max_bytes: int) -> tuple[MappedFile, bytes] | None:
        """Readable bytes from ``offset`` to the end of its segment's data (at most max_bytes)."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        position = offset - mf.file_from_offset
        try:
            return mf, mf.read(position, max_bytes)
        except ValueError:
            return None

    def get_message(self, offset: int, size: int) -> StoredMessage | None:
        """The message at ``offset``, None if gone; CorruptRecordError if its CRC fails."""
        data = self.read(offset, size)
        return None if data is None else self.message_of(data, offset)

    @staticmethod
    def message_of(data: bytes, offset: int) -> StoredMessage:
        """The message of ``data``, the record read at ``offset``; CorruptRecordError if it
        fails its checks."""
        try:
            message = decode_record(data, 0, check_crc=True)
        except CorruptRecordError as exc:
            # decode_record counts from the buffer's start; name the log offset.
            raise CorruptRecordError(f"commit-log offset {offset}: {exc}") from exc
        if message.physical_offset != offset:
            raise CorruptRecordError(
                f"record at {offset} claims physical offset {message.physical_offset}"
            )
        return message

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at ``offset`` (-1 if unreadable)."""
        head = self.read(offset, SYSFLAG_OFFSET + 4)
        if head is None:
            return -1
        sys_flag = int.from_bytes(head[SYSFLAG_OFFSET:], "big", signed=True)
        raw = self.read(offset + store_timestamp_offset(sys_flag), 8)
        return -1 if raw is None else int.from_bytes(raw, "big", signed=True)

    def close(self) -> None:
        self.queue.close()
