"""The store's write path: refuse, reserve, append, then wait for the flush and the replicas.

Invariants:

- Appends run one at a time (``_append_lock``): the consume-queue and index space a
  batch needs is reserved against the queue offsets and keys of every batch before it,
  and only then is the batch appended. If the reservation fails the write is refused
  with DISK_FULL, naming the setting that helps, and nothing of it is in the log.
- A write is refused before anything is reserved while the store is not running, is
  read-only (a replica), has seen a flush fail, or its disk is full; after a segment
  could not be allocated, for ``_ALLOCATION_BACKOFF`` seconds.
- The blocking and the asyncio put run the very same steps (``_put_steps``); they differ
  only in how they wait: a blocking put blocks its thread, an async one awaits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

from .batch_needs import LogicsNeeds, message_needs, prepared_needs
from .commit_log import AppendRejected, AppendResult, AppendStatus, CommitLog
from .config import StoreConfig
from .consume_queue_table import ConsumeQueueTable
from .errors import DiskFullError, SegmentWriteError
from .flush_waiters import FlushOutcome, FlushWaiters
from .group_commit import GroupCommitService
from .index_service import IndexService
from .message import Message
from .observer import AppendScope, AppendShare, StoreObserver
from .prepared_records import PreparedRecords
from .results import PutResult, PutStatus
from .retention import DiskState

log = logging.getLogger(__name__)

# After a segment could not be allocated, appends fail fast for this long
# instead of retrying a large fallocate on every request.
_ALLOCATION_BACKOFF = 1.0

_APPEND_TO_PUT = {
    AppendStatus.MESSAGE_ILLEGAL: PutStatus.MESSAGE_ILLEGAL,
    AppendStatus.PROPERTIES_SIZE_EXCEEDED: PutStatus.PROPERTIES_SIZE_EXCEEDED,
    AppendStatus.DISK_FULL: PutStatus.DISK_FULL,
}


class ReplicationGate(Protocol):
    """What the store tells replication about appends, and waits for under SYNC replication."""

    timeout: float

    def appended(self) -> None:
        """New bytes are in the log (any thread; must not block)."""

    def needs_wait(self) -> bool:
        """True if writers must wait for replicas (SYNC mode)."""

    async def wait_async(self, offset: int) -> bool:
        """True once enough in-sync replicas hold everything below ``offset``."""

    def wait(self, offset: int) -> bool:
        """As :meth:`wait_async`, blocking the calling thread."""


class _Waiter(Protocol):
    """Something a put waits on, both ways: flush waiters and the replication gate."""

    def wait(self, *args: Any) -> Any: ...

    async def wait_async(self, *args: Any) -> Any: ...


# A put's steps yield (what to wait on, its arguments) and are sent what the wait returned:
# ``put_messages`` blocks on ``wait``, ``_put_async`` awaits ``wait_async``.
_PutSteps = Generator[tuple[_Waiter, tuple[Any, ...]], Any, PutResult]


def batch_place(messages: Sequence[Message]) -> tuple[str, int | None]:
    """The topic of a batch (its first message's) and its queue, None if it spans several."""
    if not messages:
        return "", None
    first = messages[0]
    same_queue = all(m.queue_id == first.queue_id for m in messages)
    return first.topic, first.queue_id if same_queue else None


class StoreWriter:
    """Puts batches into the commit log for a :class:`MessageStore`, which sets ``running``,
    ``group_commit`` (under SYNC_FLUSH) and the disk state as its services start and stop."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueTable,
        index: IndexService | None,
        waiters: FlushWaiters,
        observer: StoreObserver,
    ) -> None:
        self.config = config
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index
        self._waiters = waiters
        self._observer = observer
        self._flush_type = config.flush_type.value
        # True while the store runs; writes are refused otherwise.
        self.running = False
        # Set by the store under SYNC_FLUSH once its services run.
        self.group_commit: GroupCommitService | None = None
        # Set by replication: appends are announced to it and, under SYNC, waited for.
        self.replication: ReplicationGate | None = None
        # Set while this store follows a master: client appends are refused with it.
        self.read_only_reason = ""
        self._disk = DiskState()
        self._allocation_failed_at = -_ALLOCATION_BACKOFF
        self._allocation_failure = ""
        # One append at a time: the consume-queue and index space a batch needs is
        # reserved against the queue offsets and keys of every batch before it.
        self._append_lock = threading.Lock()

    # -- refusing -----------------------------------------------------------

    def refusal(self) -> PutResult | None:
        """Why a write would be refused now, None if it would be tried."""
        if not self.running:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the store is not running")
        if self.read_only_reason:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, self.read_only_reason)
        if self._waiters.failure:
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                f"{self._waiters.failure}; writes are refused until the broker is restarted "
                "on a healthy disk",
            )
        if self._disk.full:
            return PutResult(PutStatus.DISK_FULL, self._disk_full_reason())
        if time.monotonic() - self._allocation_failed_at < _ALLOCATION_BACKOFF:
            return PutResult(PutStatus.DISK_FULL, self._allocation_failure)
        return None

    def set_disk_state(self, state: DiskState) -> None:
        """Retention's latest look at the disk: writes are refused while it is full."""
        if state.full and not self._disk.full:
            self._disk = state
            log.error("refusing writes: %s", self._disk_full_reason())
        elif self._disk.full and not state.full:
            log.info("disk %.0f%% full: accepting writes again", state.ratio * 100)
        self._disk = state

    def _disk_full_reason(self) -> str:
        config = self.config
        limit = (
            f"disk {self._disk.ratio:.0%} full (limit {config.disk_space_warning_level_ratio:.0%})"
        )
        if config.clean_file_forcibly_enable:
            return (
                f"{limit}; retention is deleting the oldest flushed segments, consumed or "
                "not; writes resume once space is freed; give the data directory a larger "
                "disk or lower --file-reserved-hours"
            )
        return (
            f"{limit}; messages not yet consumed are kept until they expire "
            "(--file-reserved-hours), and writes resume once space is freed: retention "
            "deletes the oldest segments once every consuming group has read them; "
            "give the data directory a larger disk, or start the broker with "
            "--clean-file-forcibly to let retention delete the oldest unconsumed "
            "messages instead"
        )

    # -- appending ----------------------------------------------------------

    def _append(self, append: Callable[[], AppendResult], needs: LogicsNeeds) -> PutResult:
        refused = self.refusal()
        if refused is not None:
            return refused
        with self._append_lock:
            try:
                self._reserve_logics(needs)
                result = append()
            except AppendRejected as exc:
                if exc.status is AppendStatus.DISK_FULL:
                    self._allocation_failed(
                        f"{exc.reason}, or lower commit_log_file_size "
                        "(skiff broker --commit-log-file-size)"
                    )
                    return PutResult(PutStatus.DISK_FULL, self._allocation_failure)
                return PutResult(_APPEND_TO_PUT[exc.status], exc.reason)
            except DiskFullError:
                return PutResult(PutStatus.DISK_FULL, self._allocation_failure)
            except SegmentWriteError as exc:
                # The disk failed a write: nothing later can be trusted to land either.
                # What the failed append left past the log's end is what a crash in it
                # leaves, which recovery handles at the next start.
                log.error("refusing writes: %s", exc)
                self._waiters.fail(f"writing the commit log failed: {exc}")
                refused = self.refusal()
                assert refused is not None
                return refused
            if self.index is not None and needs.keys:
                self.index.promise(result.physical_offsets[needs.last_keyed], needs.keys)
        return PutResult(PutStatus.PUT_OK, append=result)

    def _allocation_failed(self, reason: str) -> None:
        self._allocation_failed_at = time.monotonic()
        self._allocation_failure = reason

    def _reserve_logics(self, needs: LogicsNeeds) -> None:
        """Allocate the consume-queue files and index space a batch needs once dispatched.

        Raises DiskFullError (after recording why, for the back-off) when there is
        no room, and AppendRejected for a topic no queue can be made for.
        """
        next_offsets = self.commit_log.queue_offsets
        try:
            for (topic, queue_id), count in needs.units.items():
                # The topic names a directory: the log's own check comes first.
                self.commit_log.topic_field(topic)
                if queue_id < 0:
                    continue  # the append refuses it
                first_offset = next_offsets.get((topic, queue_id), 0)
                self.consume_queues.reserve_through(
                    topic, queue_id, first_offset, first_offset + count - 1
                )
        except DiskFullError as exc:
            self._allocation_failed(
                f"{exc}, or lower consume_queue_units_per_file (skiff broker "
                "--consume-queue-file-entries); the write was not stored"
            )
            raise
        if self.index is None or not needs.keys:
            return
        try:
            self.index.reserve(needs.keys)
        except DiskFullError as exc:
            self._allocation_failed(
                f"{exc}, or lower max_index_num and max_hash_slot_num (skiff broker "
                "--index-file-entries: a file takes 20 bytes per entry and 4 per hash slot); "
                "the write was not stored"
            )
            raise

    # -- putting ------------------------------------------------------------

    def put_messages(self, messages: Sequence[Message]) -> PutResult:
        topic, queue_id = batch_place(messages)
        observed = self._observer.append(topic, queue_id, len(messages), self._flush_type)
        started = time.perf_counter()
        steps = self._put_steps(
            observed, lambda: self.commit_log.append(messages), message_needs(messages)
        )
        try:
            waiter, args = next(steps)
            while True:
                waiter, args = steps.send(waiter.wait(*args))
        except StopIteration as finished:
            result: PutResult = finished.value
        except BaseException as exc:
            observed.failed(exc, started)
            raise
        observed.done(result, started)
        return result

    async def put_messages_async(
        self, messages: Sequence[Message], shares: Sequence[AppendShare] = ()
    ) -> PutResult:
        topic, queue_id = batch_place(messages)
        observed: AppendScope
        if shares:
            observed = self._observer.shared_append(topic, shares, messages, self._flush_type)
        else:
            observed = self._observer.append(topic, queue_id, len(messages), self._flush_type)
        return await self._put_async(
            observed, lambda: self.commit_log.append(messages), message_needs(messages)
        )

    async def put_records_async(self, batch: PreparedRecords) -> PutResult:
        commit_log = self.commit_log
        run, starts = batch.run, batch.starts
        return await self._put_async(
            self._observer.append(batch.topic, batch.queue_id, batch.count, self._flush_type),
            (
                (lambda: commit_log.append_encoded(batch.blob, batch.layout))
                if run is None or starts is None
                else (lambda: commit_log.append_run(batch.blob, starts, run))
            ),
            prepared_needs(batch),
        )

    async def _put_async(
        self,
        observed: AppendScope,
        append: Callable[[], AppendResult],
        needs: LogicsNeeds,
    ) -> PutResult:
        started = time.perf_counter()
        steps = self._put_steps(observed, append, needs)
        try:
            waiter, args = next(steps)
            while True:
                waiter, args = steps.send(await waiter.wait_async(*args))
        except StopIteration as finished:
            result: PutResult = finished.value
        except BaseException as exc:
            observed.failed(exc, started)
            raise
        observed.done(result, started)
        return result

    def _put_steps(
        self, observed: AppendScope, append: Callable[[], AppendResult], needs: LogicsNeeds
    ) -> _PutSteps:
        """One put: append; under SYNC_FLUSH wait for the flush (named to it by the scope's
        waiters), under SYNC replication for the replicas. Its caller reports the outcome
        to the scope."""
        result = self._append(append, needs)
        offset = self._request_flush(result, observed)
        gate = self._announce(result)
        if offset is not None:
            outcome = yield self._waiters, (offset, self.config.sync_flush_timeout)
            result = self._after_flush(result, outcome)
        if gate is not None and result.ok:
            assert result.append is not None
            replicated = yield gate, (result.append.next_offset,)
            result = self._after_replication(result, replicated)
        return result

    def _request_flush(self, result: PutResult, observed: AppendScope) -> int | None:
        """Under SYNC_FLUSH, ask group commit to flush past the batch; the offset to wait for."""
        if not result.ok or self.group_commit is None:
            return None
        assert result.append is not None
        offset = result.append.next_offset
        for token in observed.waiters():
            self.group_commit.request(offset, token)
        return offset

    def _announce(self, result: PutResult) -> ReplicationGate | None:
        """Tell replication about an append; the gate to wait on under SYNC replication."""
        gate = self.replication
        if gate is None or not result.ok:
            return None
        gate.appended()
        return gate if gate.needs_wait() else None

    def _after_flush(self, result: PutResult, outcome: FlushOutcome) -> PutResult:
        if outcome is FlushOutcome.FLUSHED:
            return result
        if outcome is FlushOutcome.FAILED:
            reason = f"{self._waiters.failure}; the message may not be on disk"
        else:
            reason = (
                f"flush did not finish within {self.config.sync_flush_timeout:g}s; "
                "the message is written but not known to be on disk"
            )
        return PutResult(PutStatus.FLUSH_DISK_TIMEOUT, reason, result.append)

    def _after_replication(self, result: PutResult, replicated: bool) -> PutResult:
        if replicated:
            return result
        timeout = self.replication.timeout if self.replication is not None else 0.0
        reason = (
            f"too few in-sync replicas confirmed the write within {timeout:g}s; it is in the "
            "master's log but may be lost if the master fails (see skiff admin info)"
        )
        return PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT, reason, result.append)
