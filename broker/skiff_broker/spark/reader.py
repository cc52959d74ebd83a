"""Batch and streaming readers: one Spark partition per queue and offset range.

The driver plans: the route names every group holding the topic, and each group's
broker gives its queues' offsets. Each executor task asks the route again for
where its queue's group serves reads now, pulls its range there with explicit
offsets and yields Arrow record batches.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..client.credentials import Credentials
from ..client.errors import BrokerUnavailable
from ..client.pull_consumer import DataLost, FetchedRecords, PullConsumer
from . import offsets as off
from .options import OptionError, SourceOptions
from .record_columns import record_batch_of_records
from .routes import Routes
from .schema import arrow_schema, record_batch

log = logging.getLogger(__name__)

# Rows per Arrow record batch handed to Spark.
ROWS_PER_RECORD_BATCH = 4096
# ... and about at most this many bytes of records, for large messages.
BYTES_PER_RECORD_BATCH = 64 * 1024 * 1024
# How long a task waits for its group's broker to hold the whole planned range.
CATCH_UP_S = 60.0
CATCH_UP_POLL_S = 0.5


@dataclasses.dataclass(frozen=True, slots=True)
class SliceToRead:
    """What one task needs: picklable, sent from the driver to an executor."""

    endpoints: tuple[str, ...]  # bootstrap: asked where the slice's group is read now
    slice: off.QueueSlice
    fail_on_data_loss: bool
    pull_batch_size: int
    credentials: Credentials | None = None


class QueuePartition(InputPartition):
    def __init__(self, value: SliceToRead) -> None:
        super().__init__(value)


def _partitions(options: SourceOptions, slices: Sequence[off.QueueSlice]) -> list[QueuePartition]:
    return [
        QueuePartition(
            SliceToRead(
                options.endpoints,
                s,
                options.fail_on_data_loss,
                options.pull_batch_size,
                options.credentials,
            )
        )
        for s in slices
    ]


def read_slice(task: SliceToRead) -> Iterator[pa.RecordBatch]:
    """Pull one queue range and yield it as record batches (runs on an executor).

    The whole planned range is read or the task fails: a broker that holds the
    queue only partly (a replica still catching up after a failover) is asked again,
    and the group's endpoint with it, until ``CATCH_UP_S`` has passed.
    """
    queue = task.slice
    schema = arrow_schema()

    def on_lost(lost: DataLost) -> None:
        log.warning("%s; skipping them (failOnDataLoss is false)", lost.message)

    routes = Routes(task.endpoints, task.credentials)
    deadline = time.monotonic() + CATCH_UP_S
    start = queue.start
    # The broker that held the planned end before the last fetch began, if one did.
    held_end_at: str | None = None
    try:
        while True:
            consumer = routes.consumer(routes.endpoint_of(queue.topic, queue.group))
            fetches = consumer.fetch_range(
                queue.topic,
                queue.queue_id,
                start,
                queue.end,
                batch_size=task.pull_batch_size,
                skip_lost=not task.fail_on_data_loss,
                on_lost=on_lost,
            )
            try:
                for fetched in _grouped(fetches):
                    for batch in _record_batches(consumer, fetched, queue, schema):
                        if batch.num_rows:
                            start = batch.column("offset")[-1].as_py() + 1
                            yield batch
            except DataLost as lost:
                raise off.DataLossError(
                    f"{lost.message} (group {queue.group}). The query needs them: to go on "
                    'without them, set the option failOnDataLoss to "false"'
                ) from None
            # Ended early: either offsets the broker skipped (records that failed their
            # CRC) end the range, or this broker did not hold the range's end yet.
            if start >= queue.end or held_end_at == consumer.endpoint:
                return
            held = consumer.max_offset(queue.topic, queue.queue_id)
            if held >= queue.end:
                # It holds the end now, and perhaps only since the fetch ended (a replica
                # catching up): fetch again at once, ending early then only for skipped
                # offsets.
                held_end_at = consumer.endpoint
                continue
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"{queue.topic} {queue.group}/{queue.queue_id}: the broker at "
                    f"{consumer.endpoint} holds offsets only up to {held}, before the planned "
                    f"end {queue.end}, after {CATCH_UP_S:g} s; a replica serving reads may be "
                    "catching up after a failover: run the query again once the group has a "
                    "master"
                )
            time.sleep(CATCH_UP_POLL_S)
    finally:
        routes.close()


def _grouped(fetches: Iterator[FetchedRecords]) -> Iterator[list[FetchedRecords]]:
    """Consecutive fetches, about ``ROWS_PER_RECORD_BATCH`` records (or
    ``BYTES_PER_RECORD_BATCH``) at a time."""
    group: list[FetchedRecords] = []
    records = size = 0
    for fetched in fetches:
        group.append(fetched)
        records += fetched.next_offset - fetched.offset
        size += len(fetched.records)
        if records >= ROWS_PER_RECORD_BATCH or size >= BYTES_PER_RECORD_BATCH:
            yield group
            group, records, size = [], 0, 0
    if group:
        yield group


def _record_batches(
    consumer: PullConsumer,
    fetched: list[FetchedRecords],
    queue: off.QueueSlice,
    schema: pa.Schema,
) -> Iterator[pa.RecordBatch]:
    """The rows of consecutive fetches of ``queue`` before its end: columns cut straight
    from the records, or message by message where they need the decoder."""
    batch = record_batch_of_records(
        b"".join(f.records for f in fetched),
        topic=queue.topic,
        group=queue.group,
        end=queue.end,
        schema=schema,
        check_crc=consumer.checks_crc,
    )
    if batch is not None:
        yield batch
        return
    for one in fetched:
        messages = [m for m in consumer.decode(one) if m.queue_offset < queue.end]
        yield record_batch(messages, schema, queue.group)


class SkiffBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        with Routes(options.endpoints, options.credentials) as routes:
            # One route answer for both ends: a group appearing meanwhile waits for the next read.
            groups = off.groups_of(routes, options.topics)
            start = off.resolve(routes, groups, options.starting)
            end = off.resolve(routes, groups, options.ending)
        for topic, queues in end.items():
            for queue, stop in queues.items():
                if start[topic][queue] > stop:
                    raise OptionError(
                        f"{topic} {queue}: the start offset {start[topic][queue]} is after the "
                        f"end offset {stop}; check startingOffsets and endingOffsets (the "
                        "queue's latest offset is the end unless endingOffsets names one)"
                    )
        return _partitions(
            options, off.slices(start, end, fail_on_data_loss=options.fail_on_data_loss)
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # An empty plan still gets one task, with nothing in it: it reads nothing.
        if partition.value is not None:
            yield from read_slice(partition.value)


class SkiffStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over ``{topic: {"<group>/<queue>": next offset}}`` offsets.

    ``maxOffsetsPerTrigger`` is the default read limit; Spark may still ask for
    everything (e.g. for ``Trigger.AvailableNow``), and that is honoured. Every
    micro-batch asks the route afresh, so groups added to the cluster join it.
    """

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._open_routes: Routes | None = None
        self._target: off.Offsets | None = None
        self._latest_seen: off.Offsets | None = None

    def __getstate__(self) -> dict:
        # Spark pickles the reader to send read() to executors; channels do not travel.
        state = self.__dict__.copy()
        state["_open_routes"] = None
        return state

    @property
    def _routes(self) -> Routes:
        if self._open_routes is None:
            self._open_routes = Routes(self._options.endpoints, self._options.credentials)
        return self._open_routes

    def _latest(self) -> off.Offsets:
        return off.latest(self._routes, off.groups_of(self._routes, self._options.topics))

    def initialOffset(self) -> dict:
        groups = off.groups_of(self._routes, self._options.topics)
        return off.resolve(self._routes, groups, self._options.starting)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        newest = self._latest()
        self._latest_seen = newest
        start = off.fill_new_queues(self._routes, off.upgraded(self._routes, start), newest)
        end = newest if self._target is None else off.capped(newest, self._target)
        end = off.not_behind(start, end)
        if isinstance(limit, ReadMaxRows):
            end = off.rate_limited(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> dict | None:
        return self._latest_seen

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        start = off.fill_new_queues(self._routes, off.upgraded(self._routes, start), end)
        slices = off.slices(start, end, fail_on_data_loss=self._options.fail_on_data_loss)
        return _partitions(self._options, slices)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # An empty plan still gets one task, with nothing in it: it reads nothing.
        if partition.value is not None:
            yield from read_slice(partition.value)

    def commit(self, end: dict) -> None:
        log.debug("micro-batch read up to %s", end)

    def stop(self) -> None:
        if self._open_routes is not None:
            self._open_routes.close()
            self._open_routes = None
