"""Batch and streaming readers: one Spark partition per queue and offset range.

The driver plans (queue ranges from the broker's offsets); each executor task
pulls its range with explicit offsets and yields Arrow record batches.
"""

from __future__ import annotations

import dataclasses
import logging
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
from ..client.pull_consumer import DataLost, PullConsumer, PulledMessage
from . import offsets as off
from .options import OptionError, SourceOptions
from .schema import arrow_schema, record_batch

log = logging.getLogger(__name__)

# Rows per Arrow record batch handed to Spark.
ROWS_PER_RECORD_BATCH = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class SliceToRead:
    """What one task needs: picklable, sent from the driver to an executor."""

    endpoints: tuple[str, ...]
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
    """Pull one queue range and yield it as record batches (runs on an executor)."""
    queue = task.slice
    schema = arrow_schema()

    def on_lost(lost: DataLost) -> None:
        log.warning("%s; skipping them (failOnDataLoss is false)", lost.message)

    consumer = off.connect(task.endpoints, queue.topic, task.credentials)
    try:
        messages: list[PulledMessage] = []
        pulled = consumer.read_range(
            queue.topic,
            queue.queue_id,
            queue.start,
            queue.end,
            batch_size=task.pull_batch_size,
            skip_lost=not task.fail_on_data_loss,
            on_lost=on_lost,
        )
        try:
            for message in pulled:
                messages.append(message)
                if len(messages) >= ROWS_PER_RECORD_BATCH:
                    yield record_batch(messages, schema)
                    messages = []
        except DataLost as lost:
            raise off.DataLossError(
                f"{lost.message}. The query needs them: to go on without them, set the option "
                'failOnDataLoss to "false"'
            ) from None
        if messages:
            yield record_batch(messages, schema)
    finally:
        consumer.close()


class SkiffBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        consumer = off.connect(options.endpoints, options.topics[0], options.credentials)
        try:
            start = off.resolve(consumer, options.topics, options.starting)
            end = off.resolve(consumer, options.topics, options.ending)
        finally:
            consumer.close()
        for topic, queues in end.items():
            for queue, stop in queues.items():
                if start[topic][queue] > stop:
                    raise OptionError(
                        f"{topic}/{queue}: the start offset {start[topic][queue]} is after the "
                        f"end offset {stop}; check startingOffsets and endingOffsets (the "
                        "queue's latest offset is the end unless endingOffsets names one)"
                    )
        return _partitions(
            options, off.slices(start, end, fail_on_data_loss=options.fail_on_data_loss)
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_slice(partition.value)


class SkiffStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over ``{topic: {queue: next offset}}`` offsets.

    ``maxOffsetsPerTrigger`` is the default read limit; Spark may still ask for
    everything (e.g. for ``Trigger.AvailableNow``), and that is honoured.
    """

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._connection: PullConsumer | None = None
        self._target: off.Offsets | None = None
        self._latest_seen: off.Offsets | None = None

    def __getstate__(self) -> dict:
        # Spark pickles the reader to send read() to executors; a channel does not travel.
        state = self.__dict__.copy()
        state["_connection"] = None
        return state

    @property
    def _consumer(self) -> PullConsumer:
        if self._connection is None:
            self._connection = off.connect(
                self._options.endpoints, self._options.topics[0], self._options.credentials
            )
        return self._connection

    def initialOffset(self) -> dict:
        return off.resolve(self._consumer, self._options.topics, self._options.starting)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = off.latest(self._consumer, self._options.topics)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        newest = off.latest(self._consumer, self._options.topics)
        self._latest_seen = newest
        start = off.fill_new_queues(self._consumer, start, newest)
        end = newest if self._target is None else off.capped(newest, self._target)
        # Never behind start: a queue whose end went back (deleted and created again)
        # waits until it passes the checkpointed offset again.
        end = {t: {q: max(o, start[t][q]) for q, o in qs.items()} for t, qs in end.items()}
        if isinstance(limit, ReadMaxRows):
            end = off.rate_limited(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> dict | None:
        return self._latest_seen

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        start = off.fill_new_queues(self._consumer, start, end)
        slices = off.slices(start, end, fail_on_data_loss=self._options.fail_on_data_loss)
        return _partitions(self._options, slices)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_slice(partition.value)

    def commit(self, end: dict) -> None:
        log.debug("micro-batch read up to %s", end)

    def stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
