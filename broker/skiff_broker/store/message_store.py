"""The message store: commit log, consume queues, index, flushing, recovery, retention.

One object per data directory. ``start()`` recovers and starts the background
services; ``shutdown()`` stops them and leaves a checkpoint that lets the next
start skip the scan.

A write is acknowledged only if it will be readable: appends run one at a time,
and before each the consume-queue files its units go into and the index space
its keys need are allocated (or reserved). If that fails the write is refused
with DISK_FULL, naming the setting that helps, and nothing of it is in the log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from ..wire.record_check import check_run
from .checkpoint import Checkpoint
from .commit_log import AppendRejected, AppendResult, AppendStatus, CommitLog
from .config import FlushType, StoreConfig
from .consume_queue import ConsumeQueue
from .consume_queue_table import ConsumeQueueTable
from .damage_report import DAMAGED_DIR, DamageReport
from .dispatcher import ArrivalListener, Dispatcher
from .errors import DiskFullError, StoreError
from .flush_service import AsyncFlushService, CommitService, LogicsFlushService
from .flush_waiters import FlushOutcome, FlushWaiters
from .group_commit import GroupCommitService
from .index_service import IndexService
from .mapped_file import fsync_directory
from .message import (
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CorruptRecordError,
    Message,
    Property,
    StoredMessage,
)
from .observer import (
    NULL_OBSERVER,
    AppendCaller,
    AppendScope,
    SharedAppendScope,
    StoreObserver,
)
from .prepared_records import PreparedRecords
from .queue_check import QueueCheck, unit_soundness
from .queue_check import check_queues as check_queues_against_log
from .recovery import Damage, Recovered, describe, recover_commit_log
from .retention import (
    ConsumerProgress,
    DiskState,
    RetentionService,
    disk_use_ratio,
    unread_below,
    warn_deleted_unread,
)
from .segment_allocator import SegmentAllocator
from .transient_store_pool import TransientStorePool

log = logging.getLogger(__name__)

# After a segment could not be allocated, appends fail fast for this long
# instead of retrying a large fallocate on every request.
_ALLOCATION_BACKOFF = 1.0
# Units read at a time when a filter may skip most of them.
_FILTER_READ_UNITS = 256
_SCAN_BATCH = 256


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    DISK_FULL = "DISK_FULL"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    # SYNC replication: too few in-sync replicas confirmed the write in time.
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"


@dataclasses.dataclass(slots=True)
class PutResult:
    status: PutStatus
    reason: str = ""
    append: AppendResult | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"


# A read that found nothing because nothing was written there yet: worth waiting for.
NOT_WRITTEN_YET = frozenset({GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE})


@dataclasses.dataclass(slots=True)
class GetResult:
    status: GetStatus
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int


def _caller_share(result: PutResult, caller: AppendCaller) -> PutResult:
    """What one caller of a shared append got: the outcome, with only its own records."""
    append = result.append
    if append is None:
        return result
    end = caller.first + caller.count
    physical = append.physical_offsets[caller.first : end]
    sizes = append.sizes[caller.first : end]
    share = AppendResult(
        wrote_offset=physical[0] if physical else append.wrote_offset,
        wrote_bytes=sum(sizes),
        store_timestamp=append.store_timestamp,
        physical_offsets=physical,
        queue_offsets=append.queue_offsets[caller.first : end],
        sizes=sizes,
    )
    return PutResult(result.status, result.reason, share)


def _batch_place(messages: Sequence[Message]) -> tuple[str, int | None]:
    """The topic of a batch (its first message's) and its queue, None if it spans several."""
    if not messages:
        return "", None
    first = messages[0]
    same_queue = all(m.queue_id == first.queue_id for m in messages)
    return first.topic, first.queue_id if same_queue else None


@dataclasses.dataclass(slots=True)
class _LogicsNeeds:
    """What a batch will take in consume queues and index once dispatched."""

    # Units per (topic, queue id).
    units: dict[tuple[str, int], int]
    # Index keys (an upper bound: duplicates are indexed once).
    keys: int
    # Position in the batch of the last record whose keys are indexed.
    last_keyed: int


_UNQUEUED_TRANSACTIONS = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


class _NeedsCounter:
    """Adds up a batch's needs record by record (this runs for every message)."""

    __slots__ = ("keys", "last_keyed", "position", "units")

    def __init__(self) -> None:
        self.units: dict[tuple[str, int], int] = {}
        self.keys = 0
        self.last_keyed = -1
        self.position = 0

    def add(self, topic: str, queue_id: int, sys_flag: int, key_count: int) -> None:
        transaction = sys_flag & TRANSACTION_MASK
        if transaction not in _UNQUEUED_TRANSACTIONS:
            units = self.units
            units[(topic, queue_id)] = units.get((topic, queue_id), 0) + 1
        if key_count and transaction != TRANSACTION_ROLLBACK_TYPE:
            self.keys += key_count
            self.last_keyed = self.position
        self.position += 1

    def needs(self) -> _LogicsNeeds:
        return _LogicsNeeds(self.units, self.keys, self.last_keyed)


def _message_needs(messages: Sequence[Message]) -> _LogicsNeeds:
    counter = _NeedsCounter()
    for m in messages:
        properties = m.properties
        keys = properties.get(Property.KEYS)
        # As index_keys counts them: the KEYS words, then the unique ID.
        key_count = (len(keys.split()) if keys else 0) + bool(properties.get(Property.UNIQ_KEY))
        counter.add(m.topic, m.queue_id, m.sys_flag, key_count)
    return counter.needs()


def _prepared_needs(batch: PreparedRecords) -> _LogicsNeeds:
    counter = _NeedsCounter()
    for _, _, _, request in batch.layout:
        counter.add(request.topic, request.queue_id, request.sys_flag, len(request.keys))
    return counter.needs()


def _out_of_bounds(cq: ConsumeQueue | None, offset: int) -> tuple[GetStatus, int, int, int] | None:
    """What a read of ``cq`` at ``offset`` answers when it finds nothing to read there:
    the status, where to read next, and the queue's bounds. None when it can read."""
    if cq is None:
        return GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0
    min_offset, max_offset = cq.min_offset, cq.max_offset
    if max_offset == 0:
        return GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset
    if offset < min_offset:
        return GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset
    if offset == max_offset:
        return GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset
    if offset > max_offset:
        return GetStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset
    return None


def _intact_records(run: bytes, physical: int) -> tuple[list[bytes], int, int | None]:
    """Check every record of ``run`` (whole records from commit-log offset ``physical``).

    Returns the parts that passed, how many records failed a check whose framing
    still holds and were left out, and, if a record's framing is broken (nothing
    after it in the run can be found), its index in the run: the parts end before it.
    """
    end = len(run)
    position = 0
    good_from = 0
    index = 0
    parts: list[bytes] = []
    dropped = 0
    while True:
        # Text was checked when each record entered the log; a read checks framing,
        # offsets and body CRC, which is what a disk can break since.
        checked = check_run(run, position, end, base=physical, text=False)
        index += checked.records
        problem = checked.problem
        if problem is None:
            break
        position = checked.stop
        log.error(
            "skipping corrupt record at commit-log offset %d: %s", problem.position, problem.reason
        )
        if position > good_from:
            parts.append(run[good_from:position])
        if not problem.framing_holds:
            return parts, dropped, index
        position += int.from_bytes(run[position : position + 4], "big", signed=True)
        good_from = position
        dropped += 1
        index += 1
    if good_from == 0:
        return [run], 0, None
    if good_from < end:
        parts.append(run[good_from:end])
    return parts, dropped, None


@dataclasses.dataclass(slots=True)
class RecordsResult:
    status: GetStatus
    data: bytes  # whole records, back to back
    count: int
    next_offset: int
    min_offset: int
    max_offset: int


@dataclasses.dataclass(slots=True)
class StoreStats:
    commit_log_min_offset: int
    commit_log_max_offset: int
    wrote_offset: int
    committed_offset: int
    flushed_offset: int
    dispatched_offset: int
    fsync_count: int
    disk_use_ratio: float
    writable: bool
    refusal: str


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


class MessageStore:
    def __init__(self, config: StoreConfig, observer: StoreObserver | None = None) -> None:
        config.validate()
        self.config = config
        # Sees every append batch and flush (telemetry); the default ignores them.
        self._observer = observer if observer is not None else NULL_OBSERVER
        self._flush_type = config.flush_type.value
        self._pool = (
            TransientStorePool(config.transient_store_pool_size, config.commit_log_file_size)
            if config.transient_store_pool_enable
            else None
        )
        self._allocator: SegmentAllocator | None = None
        self.commit_log = CommitLog(config, allocator=None, pool=self._pool)
        self.consume_queues = ConsumeQueueTable(
            config.consume_queue_dir, config.consume_queue_units_per_file
        )
        self.index = (
            IndexService(config.index_dir, config.max_hash_slot_num, config.max_index_num)
            if config.message_index_enable
            else None
        )
        self.checkpoint = Checkpoint(config.checkpoint_path)
        self.dispatcher = Dispatcher(self.commit_log, self.consume_queues, self.index)
        self._waiters = FlushWaiters()
        self._group_commit: GroupCommitService | None = None
        self._flusher: AsyncFlushService | None = None
        self._committer: CommitService | None = None
        self._logics_flusher: LogicsFlushService | None = None
        self._retention: RetentionService | None = None
        self._lock_fd = -1
        self._running = False
        self._disk = DiskState()
        self._allocation_failed_at = -_ALLOCATION_BACKOFF
        self._allocation_failure = ""
        # One append at a time: the consume-queue and index space a batch needs is
        # reserved against the queue offsets and keys of every batch before it.
        self._append_lock = threading.Lock()
        self.clean_start = False
        self.damage_report = DamageReport(config.data_dir)
        # What the last recovery found (read by ``skiff store check --repair``).
        self.last_recovery: Recovered | None = None
        self.last_queue_check: QueueCheck | None = None
        self.log_was_cut = False
        self._flushed_stamp = 0
        # Held while consume queues and index are flushed, cleaned or cut (a replica's
        # truncation runs beside the background services).
        self._logics_lock = threading.Lock()
        # Set by replication: appends are announced to it and, under SYNC, waited for.
        self.replication: ReplicationGate | None = None
        # Set while this store follows a master: client appends are refused with it.
        self.read_only_reason = ""
        # Set by the broker: committed offset per consumer group of a (topic, queue),
        # so that retention can tell which deleted messages nobody had read.
        self.consumer_progress: ConsumerProgress | None = None

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        """Lock the directory (unless already locked), recover, mark it running, serve.

        The ``abort`` marker is created only once recovery has succeeded, so a
        start that fails leaves it as it was: absent after a clean stop, present
        after a crash (the next start must still scan). On failure the lock this
        start holds is released.
        """
        config = self.config
        self.lock_data_dir()
        try:
            self.clean_start = not os.path.exists(config.abort_path)
            self.checkpoint = Checkpoint.load(config.checkpoint_path)
            self._recover()
            with open(config.abort_path, "wb"):
                pass
            fsync_directory(config.data_dir)
        except BaseException:
            self._close_files()
            self.unlock_data_dir()
            raise
        # From here on a failure is stopped like a run: flushed, checkpointed, marker removed.
        self._running = True
        try:
            self.checkpoint.clean_shutdown_offset = -1
            self.checkpoint.flush()
            self._start_services()
        except BaseException:
            self.shutdown()
            raise
        log.info(
            "store started in %s (%s, commit log %d..%d)",
            config.data_dir,
            config.flush_type,
            self.commit_log.min_offset,
            self.commit_log.max_offset,
        )

    def repair(self) -> None:
        """Offline repair of a stopped data directory: recover as after a crash, checking
        every record and every consume-queue unit in full, then stop cleanly.

        Refuses (StoreError) while another process holds the directory.
        """
        config = self.config
        self.lock_data_dir()
        try:
            self.clean_start = False
            self.checkpoint = Checkpoint.load(config.checkpoint_path)
            self._recover(scan_everything=True, found_by="store check --repair")
            end = self.commit_log.queue.flush_all()
            self._flush_logics(0)
            # A cut log leaves the index (when the store keeps none here) to the next
            # start's crash recovery; otherwise the next start is a clean one.
            clean = not self.log_was_cut or self.index is not None
            self.checkpoint.clean_shutdown_offset = end if clean else -1
            self.checkpoint.flush()
            if clean and os.path.exists(config.abort_path):
                os.unlink(config.abort_path)
            elif not clean:
                with open(config.abort_path, "wb"):
                    pass
            fsync_directory(config.data_dir)
            self.commit_log.close()
            self.consume_queues.close()
            if self.index is not None:
                self.index.close()
        finally:
            self.unlock_data_dir()

    def lock_data_dir(self) -> None:
        """Hold the directory's ``lock`` file for this store (again: no-op) or fail at once."""
        if self._lock_fd >= 0:
            return
        os.makedirs(self.config.data_dir, exist_ok=True)
        fd = os.open(os.path.join(self.config.data_dir, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(
                f"data directory {self.config.data_dir} is in use by another process; "
                "stop it or choose another --data-dir"
            ) from None
        self._lock_fd = fd

    def unlock_data_dir(self) -> None:
        """Release the lock of a store that is not running (a start that failed)."""
        if self._lock_fd >= 0 and not self._running:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _close_files(self) -> None:
        """Unmap what a failed recovery may have opened."""
        for close in (self.commit_log.close, self.consume_queues.close):
            with contextlib.suppress(Exception):
                close()
        if self.index is not None:
            with contextlib.suppress(Exception):
                self.index.close()

    def _recover(self, *, scan_everything: bool = False, found_by: str = "recovery") -> None:
        config = self.config
        self.commit_log.queue.load()
        self.consume_queues.load()
        if self.index is not None:
            # Index entries survive a crash; replayed records are skipped by offset,
            # so nothing needs throwing away here.
            self.index.load(True, 0)
        end_before = self.commit_log.queue.max_wrote_offset
        recovered = recover_commit_log(
            self.commit_log.queue,
            self.checkpoint,
            clean=self.clean_start,
            check_crc=config.check_crc_on_recover,
            include_index=self.index is not None,
            quiet_bytes=config.max_message_size + 1024 * 1024,
            scan_everything=scan_everything,
        )
        self.last_recovery = recovered
        self.log_was_cut = recovered.end < end_before
        self.damage_report = DamageReport(config.data_dir)
        self.dispatcher.on_damage = self._record_dispatch_damage
        if recovered.damages:
            new = self.damage_report.record_skips(
                recovered.damages, self.commit_log.queue, found_by
            )
            log.warning(
                "%s (%d newly found; copies in %s, history in %s)",
                describe(recovered.damages),
                new,
                os.path.join(config.data_dir, DAMAGED_DIR),
                self.damage_report.path,
            )
            for damage in recovered.damages:
                self.dispatcher.known_damage[damage.offset] = damage.offset + damage.length
        self._cut_logics(
            recovered.end,
            recovered.redispatch_from,
            check_queues=recovered.crashed,
            full_check=scan_everything,
            found_by=found_by,
            skipped=recovered.damages,
        )

    def _record_dispatch_damage(self, damage: Damage) -> None:
        self.damage_report.record_skips([damage], self.commit_log.queue, "dispatch")

    def _cut_logics(
        self,
        end: int,
        redispatch_from: int,
        *,
        check_queues: bool = False,
        full_check: bool = False,
        found_by: str = "recovery",
        skipped: list[Damage] | None = None,
    ) -> None:
        """After the commit log was cut at ``end``: cut queues and index, re-dispatch the rest.

        With ``check_queues`` (after a crash), units that disagree with the log are
        first made blank, then rewritten by the re-dispatch that meets their
        records; those whose record is gone or damaged stay holes readers step over.
        """
        reput = max(redispatch_from, self.commit_log.min_offset)
        skipped = skipped or []
        checked = None
        if check_queues:
            checked = check_queues_against_log(
                self.commit_log.queue,
                self.consume_queues,
                end=end,
                full_from=0 if full_check else None,
                check_crc=self.config.check_crc_on_recover,
                skipped=skipped,
                quick_from=0 if full_check else redispatch_from,
            )
            for (topic, queue_id), units in checked.bad.items():
                cq = self.consume_queues.get(topic, queue_id)
                assert cq is not None
                for queue_offset in units:
                    cq.blank_unit(queue_offset)
                cq.refresh_max_physical_offset()
            self.dispatcher.repair_units = {key: set(units) for key, units in checked.bad.items()}
            if checked.restart is not None:
                reput = max(min(reput, checked.restart), self.commit_log.min_offset)
        for cq in self.consume_queues:
            cq.truncate_dirty(end)
        if self.index is not None:
            self.index.truncate(end)
            # Truncation drops whole index files: rebuild from where the index now ends.
            files = self.index.files
            reput = max(
                min(reput, files[-1].end_phy_offset if files else 0), self.commit_log.min_offset
            )
        self.dispatcher.reput_offset = reput
        if check_queues:
            self.dispatcher.unit_is_sound = unit_soundness(self.commit_log.queue, end, skipped)
            self.dispatcher.verified_from, self.dispatcher.verified_below = redispatch_from, end
        try:
            self.dispatcher.dispatch_available()
        finally:
            self.dispatcher.unit_is_sound = None
            self.dispatcher.verified_from = self.dispatcher.verified_below = 0
        self.last_queue_check = checked
        if checked is not None and checked.bad:
            self._report_queue_repairs(checked, found_by)
        min_offset = self.commit_log.min_offset
        for cq in self.consume_queues:
            cq.correct_min_offset(min_offset)
        self.commit_log.queue_offsets = self.consume_queues.next_offsets()
        self._waiters.reset(end)

    def _report_queue_repairs(self, checked: QueueCheck, found_by: str) -> None:
        holes = self.dispatcher.repair_units
        self.dispatcher.repair_units = {}
        for key, units in checked.bad.items():
            left = len(holes.get(key, ()))
            log.warning(
                "consume queue %s/%d: %d unit(s) disagreed with the commit log (first: %s); "
                "%d rebuilt from the log, %d left as holes readers step over (their records "
                "are damaged or gone)",
                key[0],
                key[1],
                len(units),
                checked.reasons.get(key, ""),
                len(units) - left,
                left,
            )
            reason = checked.reasons.get(key, "")
            self.damage_report.record_queue_repair(
                key[0], key[1], len(units), len(units) - left, reason, found_by
            )

    def damage_history(self) -> list[dict[str, object]]:
        """Every damaged stretch skipped and consume-queue repair made in this data directory."""
        return DamageReport(self.config.data_dir).entries()

    def _start_services(self) -> None:
        config = self.config
        queue = self.commit_log.queue
        self._allocator = SegmentAllocator(warm=config.warm_mapped_files)
        queue.use_allocator(self._allocator)
        # The first append must not wait for a segment to be allocated: get the one
        # it writes to ready now (which also starts preparing its successor).
        try:
            queue.last_file_for_append()
        except (OSError, DiskFullError) as exc:
            # A full disk: the store still serves reads; appends report DISK_FULL.
            log.error("could not prepare a commit-log segment: %s", exc)
        self.commit_log.on_append = self.dispatcher.hand
        stamp = self._commit_log_stamp
        if config.flush_type is FlushType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(
                queue,
                self._waiters,
                on_flushed=self._set_flushed_stamp,
                stamp=stamp,
                observer=self._observer,
            )
            self._group_commit.start()
        else:
            self._flusher = AsyncFlushService(
                queue,
                self._waiters,
                interval=config.flush_interval_commit_log,
                least_pages=config.flush_commit_log_least_pages,
                thorough_interval=config.flush_commit_log_thorough_interval,
                on_flushed=self._set_flushed_stamp,
                stamp=stamp,
                observer=self._observer,
            )
            self._flusher.start()
            if self._pool is not None:
                self._committer = CommitService(
                    queue,
                    self._flusher,
                    interval=config.commit_interval_commit_log,
                    least_pages=config.commit_commit_log_least_pages,
                    thorough_interval=config.commit_commit_log_thorough_interval,
                )
                self._committer.on_committed = self.dispatcher.notify_new_data
                self._committer.start()
        self._logics_flusher = LogicsFlushService(
            self._flush_logics_and_checkpoint,
            interval=config.flush_interval_consume_queue,
            least_pages=config.flush_consume_queue_least_pages,
            thorough_interval=config.flush_consume_queue_thorough_interval,
        )
        self._logics_flusher.start()
        self.dispatcher.start()
        self._retention = RetentionService(
            config,
            delete_commit_log=self._delete_expired_commit_log,
            delete_logic_files=self._delete_expired_logic_files,
            on_disk_state=self._set_disk_state,
        )
        self._retention.check_disk()
        self._retention.start()

    def shutdown(self) -> None:
        """Stop cleanly: everything written is flushed and the next start is fast."""
        if not self._running:
            return
        self._running = False
        if self._retention is not None:
            self._retention.stop()
        if self._committer is not None:
            self._committer.stop()
        if self._group_commit is not None:
            self._group_commit.stop()
        if self._flusher is not None:
            self._flusher.stop()
        self.dispatcher.stop()
        if self._logics_flusher is not None:
            self._logics_flusher.stop()
        if self._allocator is not None:
            self._allocator.shutdown()
        flushed = self.commit_log.queue.flush_all()
        self._flush_logics(0)
        self.checkpoint.physic_msg_timestamp = self.commit_log.last_store_timestamp
        self.checkpoint.logics_msg_timestamp = self.dispatcher.last_store_timestamp
        self.checkpoint.index_msg_timestamp = self.dispatcher.last_store_timestamp
        if flushed == self.commit_log.max_offset == self.dispatcher.reput_offset:
            self.checkpoint.clean_shutdown_offset = flushed
        self.checkpoint.flush()
        self.commit_log.close()
        self.consume_queues.close()
        if self.index is not None:
            self.index.close()
        if self._pool is not None:
            self._pool.close()
        os.unlink(self.config.abort_path)
        fsync_directory(self.config.data_dir)
        os.close(self._lock_fd)
        self._lock_fd = -1
        log.info("store stopped cleanly at %d", flushed)

    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- writing ------------------------------------------------------------

    def _refusal(self) -> PutResult | None:
        if not self._running:
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

    def _disk_full_reason(self) -> str:
        config = self.config
        if config.clean_file_forcibly_enable:
            cleaning = (
                "retention is deleting the oldest flushed segments, consumed or not; "
                "writes resume once space is freed"
            )
        else:
            cleaning = (
                "messages are kept until they expire (clean_file_forcibly_enable is off: "
                "skiff broker --clean-file-forcibly lets retention delete the oldest "
                "unconsumed ones instead)"
            )
        return (
            f"disk {self._disk.ratio:.0%} full (limit {config.disk_space_warning_level_ratio:.0%})"
            f"; {cleaning}; give the data directory a larger disk or lower "
            "--file-reserved-hours"
        )

    def _append(self, append: Callable[[], AppendResult], needs: _LogicsNeeds) -> PutResult:
        refused = self._refusal()
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
            if self.index is not None and needs.keys:
                self.index.promise(result.physical_offsets[needs.last_keyed], needs.keys)
        return PutResult(PutStatus.PUT_OK, append=result)

    def _allocation_failed(self, reason: str) -> None:
        self._allocation_failed_at = time.monotonic()
        self._allocation_failure = reason

    def _reserve_logics(self, needs: _LogicsNeeds) -> None:
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

    def put_messages(self, messages: Sequence[Message]) -> PutResult:
        """Append a batch; with SYNC_FLUSH, return once it is on disk (or timed out).

        Under SYNC replication, also once enough in-sync replicas hold it (or timed out).
        """
        topic, queue_id = _batch_place(messages)
        with self._observer.append(topic, queue_id, len(messages), self._flush_type) as observed:
            result = self._append(
                lambda: self.commit_log.append(messages), _message_needs(messages)
            )
            offset = self._request_flush(result, observed)
            gate = self._announce(result)
            if offset is not None:
                outcome = self._waiters.wait(offset, self.config.sync_flush_timeout)
                result = self._after_flush(result, outcome)
            if gate is not None and result.ok:
                assert result.append is not None
                result = self._after_replication(result, gate.wait(result.append.next_offset))
            observed.done(result)
        return result

    async def put_messages_async(
        self, messages: Sequence[Message], callers: Sequence[AppendCaller] = ()
    ) -> PutResult:
        """As :meth:`put_messages`, waiting without blocking the event loop.

        ``callers``: the shares of the batch that came from different callers (coalesced
        sends), each observed as an append of its own; none when it is one caller's.
        """
        topic, queue_id = _batch_place(messages)
        observed: AppendScope
        if callers:
            observed = SharedAppendScope(
                self._observer,
                topic,
                callers,
                lambda c: _batch_place(messages[c.first : c.first + c.count])[1],
                self._flush_type,
                _caller_share,
            )
        else:
            observed = self._observer.append(topic, queue_id, len(messages), self._flush_type)
        return await self._put_async(
            observed, lambda: self.commit_log.append(messages), _message_needs(messages)
        )

    async def put_records_async(self, batch: PreparedRecords) -> PutResult:
        """As :meth:`put_messages_async`, for records a client encoded (``prepared_records``)."""
        return await self._put_async(
            self._observer.append(batch.topic, batch.queue_id, len(batch.layout), self._flush_type),
            lambda: self.commit_log.append_encoded(batch.blob, batch.layout),
            _prepared_needs(batch),
        )

    async def _put_async(
        self,
        observation: AppendScope,
        append: Callable[[], AppendResult],
        needs: _LogicsNeeds,
    ) -> PutResult:
        with observation as observed:
            result = self._append(append, needs)
            offset = self._request_flush(result, observed)
            gate = self._announce(result)
            if offset is not None:
                outcome = await self._waiters.wait_async(offset, self.config.sync_flush_timeout)
                result = self._after_flush(result, outcome)
            if gate is not None and result.ok:
                assert result.append is not None
                replicated = await gate.wait_async(result.append.next_offset)
                result = self._after_replication(result, replicated)
            observed.done(result)
        return result

    def _announce(self, result: PutResult) -> ReplicationGate | None:
        """Tell replication about an append; the gate to wait on under SYNC replication."""
        gate = self.replication
        if gate is None or not result.ok:
            return None
        gate.appended()
        return gate if gate.needs_wait() else None

    def _after_replication(self, result: PutResult, replicated: bool) -> PutResult:
        if replicated:
            return result
        timeout = self.replication.timeout if self.replication is not None else 0.0
        reason = (
            f"too few in-sync replicas confirmed the write within {timeout:g}s; it is in the "
            "master's log but may be lost if the master fails (see skiff admin info)"
        )
        return PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT, reason, result.append)

    def _request_flush(self, result: PutResult, observed: AppendScope) -> int | None:
        """Under SYNC_FLUSH, ask group commit to flush past the batch; the offset to wait for."""
        if not result.ok or self._group_commit is None:
            return None
        assert result.append is not None
        offset = result.append.next_offset
        for token in observed.waiters():
            self._group_commit.request(offset, token)
        return offset

    def put_message(self, message: Message) -> PutResult:
        return self.put_messages([message])

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

    # -- replication ----------------------------------------------------------

    def append_replicated(self, offset: int, data: bytes | memoryview) -> int:
        """Write a run of the master's log bytes at ``offset`` (which must be the log's end).

        The run never crosses a segment boundary (the master sends segment by
        segment); a run that ends a segment includes its BLANK record. Returns
        the new end of the log. The dispatcher builds queues and index from it.
        """
        return self.commit_log.append_raw(offset, data, self.dispatcher.notify_new_data)

    def truncate_to(self, offset: int) -> None:
        """Cut the log at ``offset`` (a replica whose tail its master never had).

        The same cut as crash recovery's: commit log, then consume queues and
        index, then re-dispatch. Appends must not run meanwhile (a replica has none).
        """
        if offset >= self.commit_log.queue.max_wrote_offset:
            return
        log.warning("cutting the commit log from %d back to %d", self.commit_log.max_offset, offset)
        self.dispatcher.stop()
        queue = self.commit_log.queue
        queue.commit_all()
        queue.flush_all()
        queue.truncate(offset, quiet_bytes=self.config.max_message_size + 1024 * 1024)
        queue.flushed_where = queue.committed_where = offset
        with self._logics_lock:
            self._cut_logics(offset, offset)
        self.dispatcher.start()
        self.checkpoint.clean_shutdown_offset = -1
        self.checkpoint.flush()

    # -- reading ------------------------------------------------------------

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int = 4 * 1024 * 1024,
        tag_codes: set[int] | None = None,
        accept: Callable[[StoredMessage], bool] | None = None,
    ) -> GetResult:
        """Messages of one queue from ``offset``.

        ``tag_codes`` filters on the consume queue's tag hash without reading the
        commit log; ``accept`` then checks the message itself (hash collisions).
        A record that fails its CRC is logged and skipped, never returned.
        """
        cq = self.consume_queues.get(topic, queue_id)
        refused = _out_of_bounds(cq, offset)
        if refused is not None:
            status, next_offset, min_offset, max_offset = refused
            return GetResult(status, [], next_offset, min_offset, max_offset)
        assert cq is not None
        min_offset, max_offset = cq.min_offset, cq.max_offset
        messages: list[StoredMessage] = []
        next_offset = offset
        size_total = 0
        filtering = tag_codes is not None or accept is not None
        # A filter that matches nothing must not turn one read into a scan of the queue.
        scan_end = min(max_offset, offset + self.config.max_filter_message_count)
        while len(messages) < max_count and next_offset < scan_end and size_total < max_bytes:
            wanted = _FILTER_READ_UNITS if filtering else max_count - len(messages)
            units = cq.read_units(next_offset, min(wanted, scan_end - next_offset))
            if not units:
                # A blank stretch or a deleted file: step over it.
                next_offset += 1
                continue
            for physical, size, tag_code in units:
                next_offset += 1
                if tag_codes is not None and tag_code not in tag_codes:
                    continue
                message = self._read(physical, size)
                if message is None or (accept is not None and not accept(message)):
                    continue
                messages.append(message)
                size_total += size
                if size_total >= max_bytes or len(messages) >= max_count:
                    break
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, messages, next_offset, min_offset, max_offset)

    def get_records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int = 4 * 1024 * 1024,
        tag_codes: set[int] | None = None,
    ) -> RecordsResult:
        """Raw records of one queue from ``offset``, back to back, as the commit log holds them.

        Records that sit next to each other in the log are copied as one run.
        Each record's body CRC is checked; one that fails is logged and left out,
        as :meth:`get_messages` does.
        """
        # [commit-log offset, length, records before it, its first queue offset] per run
        runs: list[list[int]] = []
        status, next_offset, min_offset, max_offset, count = self._runs_of(
            topic, queue_id, offset, max_count, max_bytes, tag_codes, runs
        )
        chunks = []
        dropped = 0
        deleted = False
        for physical, length, before, first_queue_offset in runs:
            chunk = self.commit_log.read(physical, length)
            if chunk is None:
                # Retention deleted the rest while it was read: end before it, and
                # let the next fetch find out where the queue starts now.
                count, next_offset, deleted = before - dropped, first_queue_offset, True
                break
            good, failed, broken_at = _intact_records(chunk, physical)
            chunks += good
            dropped += failed
            if broken_at is not None:
                # Past a record with broken framing nothing of its run can be found:
                # end here; the next fetch starts after it.
                count = before + broken_at - dropped
                next_offset = first_queue_offset + broken_at + 1
                break
        else:
            count -= dropped
        data = b"".join(chunks)
        if status is GetStatus.FOUND and not data:
            if deleted and not chunks:
                # Retention took every record found: point at the queue's start now.
                status, next_offset = GetStatus.OFFSET_TOO_SMALL, self.min_offset(topic, queue_id)
            else:
                status = GetStatus.NO_MATCHED_MESSAGE
        return RecordsResult(status, data, count, next_offset, min_offset, max_offset)

    def _runs_of(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        tag_codes: set[int] | None,
        runs: list[list[int]],
    ) -> tuple[GetStatus, int, int, int, int]:
        """The units from ``offset`` whose tag matches, as runs of adjacent records.

        Fills ``runs`` as ``get_records`` wants them. Returns the status, the offset
        after the last unit scanned, the queue's bounds and the number of records.
        """
        cq = self.consume_queues.get(topic, queue_id)
        refused = _out_of_bounds(cq, offset)
        if refused is not None:
            return (*refused, 0)
        assert cq is not None
        min_offset, max_offset = cq.min_offset, cq.max_offset
        segment_size = self.config.commit_log_file_size
        if tag_codes is None:
            end = min(max_offset, offset + max_count)
            read_units = end - offset
        else:
            # A filter that matches nothing must not turn one read into a scan of the queue.
            end = min(max_offset, offset + self.config.max_filter_message_count)
            read_units = _FILTER_READ_UNITS
        next_offset = offset
        size_total = 0
        run_start = run_end = segment_end = -1
        run_count = run_first = records = 0
        while next_offset < end and size_total < max_bytes and records < max_count:
            units = cq.read_units(next_offset, min(read_units, end - next_offset))
            if not units:
                # A blank stretch or a deleted file: step over it.
                next_offset += 1
                if run_start >= 0:
                    runs.append([run_start, run_end - run_start, run_count, run_first])
                    run_start = -1
                continue
            for physical, size, tag_code in units:
                queue_offset = next_offset
                next_offset += 1
                if tag_codes is not None and tag_code not in tag_codes:
                    # The record stands between its neighbours: no run spans it.
                    continue
                if physical == run_end and physical + size <= segment_end:
                    run_end += size
                else:
                    if run_start >= 0:
                        runs.append([run_start, run_end - run_start, run_count, run_first])
                    run_start, run_end, run_count = physical, physical + size, records
                    run_first = queue_offset
                    segment_end = (physical // segment_size + 1) * segment_size
                records += 1
                size_total += size
                if size_total >= max_bytes or records >= max_count:
                    break
        if run_start >= 0:
            runs.append([run_start, run_end - run_start, run_count, run_first])
        return GetStatus.FOUND, next_offset, min_offset, max_offset, records

    def scan_queue(
        self, topic: str, queue_id: int, start: int
    ) -> Iterator[tuple[int, StoredMessage | None]]:
        """Every offset of a queue from ``start`` to its end, with its message.

        The message is None where nothing readable is stored (a blank unit or a
        record that fails its CRC). Offsets retention already deleted are skipped.
        """
        offset = start
        while True:
            got = self.get_messages(topic, queue_id, offset, _SCAN_BATCH)
            if got.status is GetStatus.OFFSET_TOO_SMALL:
                offset = got.next_offset
                continue
            if got.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                return
            by_offset = {message.queue_offset: message for message in got.messages}
            for position in range(offset, got.next_offset):
                yield position, by_offset.get(position)
            if got.next_offset <= offset:
                return
            offset = got.next_offset

    def _read(self, physical: int, size: int) -> StoredMessage | None:
        try:
            return self.commit_log.get_message(physical, size)
        except CorruptRecordError as exc:
            log.error("skipping corrupt record: %s", exc)
            return None

    def get_message_at(self, physical_offset: int, size: int) -> StoredMessage | None:
        return self._read(physical_offset, size)

    def query_by_key(
        self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0, end_ms: int = 2**62
    ) -> list[StoredMessage]:
        """Messages whose KEYS or unique ID equal ``key`` (newest first)."""
        if self.index is None:
            return []
        found = []
        seen = set()
        for physical in self.index.query(topic, key, max_num * 2, begin_ms, end_ms):
            if physical in seen:
                continue
            seen.add(physical)
            message = self._read_unsized(physical)
            if (
                message is not None
                and message.topic == topic
                and (key in message.keys or message.unique_id == key)
            ):
                found.append(message)
                if len(found) >= max_num:
                    break
        return found

    def _read_unsized(self, physical: int) -> StoredMessage | None:
        head = self.commit_log.read(physical, 4)
        if head is None:
            return None
        size = int.from_bytes(head, "big", signed=True)
        if size <= 0 or size > self.config.max_message_size + 64 * 1024:
            return None
        return self._read(physical, size)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp_ms, self.commit_log.store_timestamp_at)

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """``listener`` gets the set of (topic, queue id) that received messages."""
        self.dispatcher.add_listener(listener)

    def wait_dispatched(self, timeout: float = 5.0) -> bool:
        """Block until everything appended so far has reached the consume queues.

        With the transient store pool that includes what is still in the write
        buffer, which the commit service moves to the file within its interval.
        """
        return self.dispatcher.wait_dispatched(self.commit_log.queue.max_wrote_offset, timeout)

    def delete_topic(self, topic: str) -> None:
        """Forget a topic's consume queues; its records age out of the commit log."""
        self.consume_queues.delete_topic(topic)
        for key in [k for k in self.commit_log.queue_offsets if k[0] == topic]:
            del self.commit_log.queue_offsets[key]

    def stats(self) -> StoreStats:
        queue = self.commit_log.queue
        refusal = self._refusal() if self._running else None
        # Read in the order the positions trail each other, so that a sample taken
        # while appends run still shows flushed <= committed <= wrote.
        flushed = queue.flushed_where
        committed = queue.max_offset
        wrote = queue.max_wrote_offset
        return StoreStats(
            commit_log_min_offset=self.commit_log.min_offset,
            commit_log_max_offset=committed,
            wrote_offset=wrote,
            committed_offset=committed,
            flushed_offset=flushed,
            dispatched_offset=self.dispatcher.reput_offset,
            fsync_count=queue.flush_count,
            disk_use_ratio=disk_use_ratio(self.config.data_dir),
            writable=refusal is None,
            refusal=refusal.reason if refusal is not None else "",
        )

    # -- background work ----------------------------------------------------

    def _commit_log_stamp(self) -> int:
        return self.commit_log.last_store_timestamp

    def _set_flushed_stamp(self, stamp: int) -> None:
        self._flushed_stamp = stamp

    def _flush_logics(self, least_pages: int) -> None:
        for cq in self.consume_queues:
            cq.flush(least_pages)
        if self.index is not None:
            self.index.flush()

    def _flush_logics_and_checkpoint(self, least_pages: int) -> None:
        # Read before the flush: every unit dispatched by then is covered by it.
        logics_stamp = self.dispatcher.last_store_timestamp
        with self._logics_lock:
            self._flush_logics(least_pages)
        self.checkpoint.physic_msg_timestamp = self._flushed_stamp
        self.checkpoint.logics_msg_timestamp = logics_stamp
        self.checkpoint.index_msg_timestamp = logics_stamp
        self.checkpoint.flush()

    def _delete_expired_commit_log(self, clean_immediately: bool) -> int:
        config = self.config
        deleted_below = self.commit_log.min_offset
        deleted = self.commit_log.queue.delete_expired_by_time(
            config.file_reserved_time_hours * 3600,
            interval=config.delete_commit_log_files_interval,
            clean_immediately=clean_immediately,
            batch_max=config.delete_files_batch_max,
            deletable_below=min(self.commit_log.flushed_offset, self.dispatcher.reput_offset),
        )
        if deleted and clean_immediately:
            new_min = self.commit_log.min_offset
            unread = unread_below(self.consume_queues, new_min, self.consumer_progress)
            warn_deleted_unread(deleted_below, new_min, unread)
        return deleted

    def _delete_expired_logic_files(self) -> None:
        min_offset = self.commit_log.min_offset
        with self._logics_lock:
            for cq in self.consume_queues:
                cq.delete_expired(min_offset)
            if self.index is not None:
                self.index.delete_expired(min_offset)

    def _set_disk_state(self, state: DiskState) -> None:
        if state.full and not self._disk.full:
            self._disk = state
            log.error("refusing writes: %s", self._disk_full_reason())
        elif self._disk.full and not state.full:
            log.info("disk %.0f%% full: accepting writes again", state.ratio * 100)
        self._disk = state
