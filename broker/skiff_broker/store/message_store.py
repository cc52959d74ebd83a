"""The message store: one object per data directory, the face every caller uses.

``start()`` locks the directory, recovers and starts the background services;
``shutdown()`` stops them and leaves a checkpoint that lets the next start skip the
scan. Writing is :mod:`.writing`, reading :mod:`.reading`, key queries and stats
:mod:`.queries`; this module holds the lifecycle and the background work.

Invariants:

- The ``abort`` marker exists exactly while a store runs (or after a crash): it is
  created once recovery succeeded and removed by a clean shutdown.
- After a cut of the commit log (crash recovery, a replica's truncation) consume
  queues and index hold nothing past the cut, and everything before it is
  re-dispatched from where they may disagree with the log.
- A write is acknowledged only if it will be readable (see :mod:`.writing`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from .checkpoint import Checkpoint
from .commit_log import CommitLog
from .config import FlushType, StoreConfig
from .consume_queue_table import ConsumeQueueTable
from .damage_report import DAMAGED_DIR, DamageReport
from .dispatcher import ArrivalListener, Dispatcher
from .errors import DiskFullError, StoreError
from .flush_service import AsyncFlushService, CommitService, LogicsFlushService
from .flush_waiters import FlushWaiters
from .group_commit import GroupCommitService
from .index_service import IndexService
from .logics_cut import cut_logics
from .mapped_file import fsync_directory
from .message import Message, StoredMessage
from .observer import NULL_OBSERVER, AppendShare, StoreObserver
from .older_records_check import OlderRecordsCheck
from .prepared_records import PreparedRecords
from .private_files import FILE_MODE
from .queries import query_by_key, sample_stats
from .queue_check import QueueCheck
from .reading import QueueReader, read_message
from .recovery import Damage, Recovered, checkpoint_scan_start, describe, recover_commit_log
from .results import GetResult, PutResult, RecordsResult, StoreStats
from .retention import (
    ConsumerProgress,
    DiskState,
    EarlyDeletion,
    RetentionService,
    consumed_below,
    unread_below,
    warn_deleted_unread,
)
from .scan_start import durable_scan_start, flush_lagging_queues
from .segment_allocator import SegmentAllocator
from .transient_store_pool import TransientStorePool
from .writing import ReplicationGate, StoreWriter

log = logging.getLogger(__name__)


def hold_data_dir_lock(data_dir: str) -> int:
    """Take ``data_dir``'s ``lock`` file (made if needed) or fail at once; its descriptor.

    The lock lasts until the descriptor is closed (or the process ends).
    """
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(os.path.join(data_dir, "lock"), os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(
            f"data directory {data_dir} is in use by another process; "
            "stop it or choose another --data-dir"
        ) from None
    return fd


def data_dir_in_use(data_dir: str) -> bool:
    """Whether a process (a running broker) holds ``data_dir``'s lock right now.

    Only looks: the lock file is not created, and no lock is kept after the answer.
    """
    try:
        fd = os.open(os.path.join(data_dir, "lock"), os.O_RDONLY)
    except FileNotFoundError:
        return False  # every broker makes the file before it writes anything
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the shared lock if it was taken
    return False


def _create_marker(path: str) -> None:
    """An empty file (the ``abort`` marker), private like everything in the directory."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE))


class MessageStore:
    def __init__(self, config: StoreConfig, observer: StoreObserver | None = None) -> None:
        config.validate()
        self.config = config
        # Sees every append batch and flush (telemetry); the default ignores them.
        self._observer = observer if observer is not None else NULL_OBSERVER
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
        # Checks the records a crash recovery's scan started after (None when none).
        self.older_records_check: OlderRecordsCheck | None = None
        self._lock_fd = -1
        self._writer = StoreWriter(
            config, self.commit_log, self.consume_queues, self.index, self._waiters, self._observer
        )
        # Queue reads are the reader's (reading.py); the methods below delegate to it.
        self._reader = QueueReader(config, self.commit_log, self.consume_queues)
        self._reader.mender.on_repair = self._record_read_repair
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
        # Set by the broker: committed offset per consumer group of a (topic, queue),
        # so that retention can tell which deleted messages nobody had read.
        self.consumer_progress: ConsumerProgress | None = None

    @property
    def replication(self) -> ReplicationGate | None:
        """Set by replication: appends are announced to it and, under SYNC, waited for."""
        return self._writer.replication

    @replication.setter
    def replication(self, gate: ReplicationGate | None) -> None:
        self._writer.replication = gate

    # -- queue reads (reading.py holds how; these are the store's face for them) --------

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int = 4 * 1024 * 1024,
        tag_codes: set[int] | None = None,
        properties_check: Callable[[bytes], bool] | None = None,
        accept: Callable[[StoredMessage], bool] | None = None,
    ) -> GetResult:
        """Up to ``max_count`` messages (and ``max_bytes``) of one queue from ``offset``.

        ``tag_codes`` filters on the consume queue's tag hash, ``properties_check`` on a
        record's raw properties before it is decoded, ``accept`` on the decoded message.
        A record that fails its checks is logged and left out, never returned; the
        result carries the queue's bounds and the ``next_offset`` to read from.
        """
        return self._reader.get_messages(
            topic,
            queue_id,
            offset,
            max_count,
            max_bytes=max_bytes,
            tag_codes=tag_codes,
            properties_check=properties_check,
            accept=accept,
        )

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
        """One queue's raw records from ``offset``, back to back as the commit log holds them.

        Checked as :meth:`get_messages` checks them (a failing record is left out), but
        not decoded, so a caller can send them on as they are.
        """
        return self._reader.get_records(
            topic, queue_id, offset, max_count, max_bytes=max_bytes, tag_codes=tag_codes
        )

    def scan_queue(
        self, topic: str, queue_id: int, start: int
    ) -> Iterator[tuple[int, StoredMessage | None]]:
        """Every offset of a queue from ``start`` to its end, with its message.

        None where nothing readable is stored (a blank unit, a record that fails its
        checks); offsets retention already deleted are skipped.
        """
        return self._reader.scan_queue(topic, queue_id, start)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first offset still stored (0 for a queue that does not exist)."""
        return self._reader.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The offset the queue's next message will get (0 for a queue that does not exist)."""
        return self._reader.max_offset(topic, queue_id)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of the queue whose message was stored at or after ``timestamp_ms``.

        The queue's max offset when every message is older; 0 for a queue that does not
        exist.
        """
        return self._reader.offset_by_time(topic, queue_id, timestamp_ms)

    @property
    def read_only_reason(self) -> str:
        """Set while this store follows a master: client appends are refused with it."""
        return self._writer.read_only_reason

    @read_only_reason.setter
    def read_only_reason(self, reason: str) -> None:
        self._writer.read_only_reason = reason

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
            _create_marker(config.abort_path)
            fsync_directory(config.data_dir)
        except BaseException:
            self._close_files()
            self.unlock_data_dir()
            raise
        # From here on a failure is stopped like a run: flushed, checkpointed, marker removed.
        self._writer.running = True
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
                _create_marker(config.abort_path)
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
        self._lock_fd = hold_data_dir_lock(self.config.data_dir)

    def unlock_data_dir(self) -> None:
        """Release the lock of a store that is not running (a start that failed)."""
        if self._lock_fd >= 0 and not self._writer.running:
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
            # so nothing needs throwing away here. Loading mends the newest file's tail
            # whatever the last exit was (see IndexService.load).
            self.index.load(True, 0)
        end_before = self.commit_log.queue.max_wrote_offset
        if self.commit_log.queue.extended_segments:
            # A clean end says nothing of a segment cut short since: check every record,
            # and every unit against the record it points at.
            scan_everything = True
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
        # Kept only while a record still starts there (the scan start only grows from it).
        if checkpoint_scan_start(self.commit_log.queue, self.checkpoint) is None:
            self.checkpoint.scan_start = -1
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

    def _record_read_repair(
        self, topic: str, queue_id: int, bad: int, rebuilt: int, reason: str
    ) -> None:
        self.damage_report.record_queue_repair(topic, queue_id, bad, rebuilt, reason, "read")

    def _record_dispatch_damage(self, damage: Damage) -> None:
        self.damage_report.record_skips([damage], self.commit_log.queue, "dispatch")

    def _record_older_damage(self, damages: list[Damage]) -> None:
        new = self.damage_report.record_skips(damages, self.commit_log.queue, "background check")
        log.warning(
            "%d of the damaged stretches were newly found; copies in %s, history in %s; "
            "reads leave their records out",
            new,
            os.path.join(self.config.data_dir, DAMAGED_DIR),
            self.damage_report.path,
        )

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
        """After the commit log was cut at ``end``: see :func:`cut_logics`."""
        self.last_queue_check = cut_logics(
            self.commit_log,
            self.consume_queues,
            self.index,
            self.dispatcher,
            self.damage_report,
            end,
            redispatch_from,
            check_queues=check_queues,
            check_crc=self.config.check_crc_on_recover,
            full_check=full_check,
            found_by=found_by,
            skipped=skipped,
        )
        self._waiters.reset(end)

    def damage_history(self) -> list[dict[str, object]]:
        """Every damaged stretch skipped and consume-queue repair made in this data directory."""
        return DamageReport(self.config.data_dir).entries()

    def _start_services(self) -> None:
        config = self.config
        queue = self.commit_log.queue
        self._allocator = SegmentAllocator(warm=config.warms_segments)
        self._allocator.start()
        # Set only now: recovery must not have segments prepared ahead of it.
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
            self._writer.group_commit = self._group_commit
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
        self._retention = self.make_retention_service()
        self._retention.check_disk()
        self._retention.start()
        recovered = self.last_recovery
        if recovered is not None and recovered.verify_from < recovered.verify_below:
            self.older_records_check = OlderRecordsCheck(
                queue,
                recovered.verify_from,
                recovered.verify_below,
                check_crc=config.check_crc_on_recover,
                quiet_bytes=config.max_message_size + 1024 * 1024,
                on_damage=self._record_older_damage,
            )
            self.older_records_check.start()

    def shutdown(self) -> None:
        """Stop cleanly: everything written is flushed and the next start is fast."""
        if not self._writer.running:
            return
        self._writer.running = False
        if self.older_records_check is not None:
            self.older_records_check.stop()
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
            self._allocator.stop()
        flushed = self.commit_log.queue.flush_all()
        self._flush_logics(0)
        self.checkpoint.physic_msg_timestamp = self.commit_log.last_store_timestamp
        self.checkpoint.logics_msg_timestamp = self.dispatcher.last_store_timestamp
        self.checkpoint.index_msg_timestamp = self.dispatcher.last_store_timestamp
        if flushed == self.commit_log.max_offset == self.dispatcher.reput_offset:
            self.checkpoint.clean_shutdown_offset = flushed
        self._advance_scan_start(min(flushed, self.dispatcher.reput_offset))
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

    def put_messages(self, messages: Sequence[Message]) -> PutResult:
        """Append a batch; with SYNC_FLUSH, return once it is on disk (or timed out).

        Under SYNC replication, also once enough in-sync replicas hold it (or timed out).
        """
        return self._writer.put_messages(messages)

    def put_message(self, message: Message) -> PutResult:
        return self._writer.put_messages([message])

    def share(self, first: int, count: int) -> AppendShare:
        """The current caller's share of a batch that several callers' messages will make:
        ``count`` messages from position ``first``. Called in that caller's context."""
        return self._observer.share(first, count)

    async def put_messages_async(
        self, messages: Sequence[Message], shares: Sequence[AppendShare] = ()
    ) -> PutResult:
        """As :meth:`put_messages`, waiting without blocking the event loop.

        ``shares``: the parts of the batch that came from different callers (coalesced
        sends), each observed as an append of its own; none when it is one caller's.
        """
        return await self._writer.put_messages_async(messages, shares)

    async def put_records_async(self, batch: PreparedRecords) -> PutResult:
        """As :meth:`put_messages_async`, for records a client encoded (``prepared_records``)."""
        return await self._writer.put_records_async(batch)

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
            # Records below the old scan start may be gone or different now; under the
            # lock, so a checkpoint pass computes a new one only from the cut log.
            self.checkpoint.scan_start = -1
            self._cut_logics(offset, offset)
        self.dispatcher.start()
        self.checkpoint.clean_shutdown_offset = -1
        self.checkpoint.flush()

    # -- reading ------------------------------------------------------------

    def get_message_at(self, physical_offset: int, size: int) -> StoredMessage | None:
        return read_message(self.commit_log, physical_offset, size)

    # -- queries ------------------------------------------------------------

    def query_by_key(
        self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0, end_ms: int = 2**62
    ) -> list[StoredMessage]:
        """Messages whose KEYS or unique ID equal ``key`` (newest first)."""
        return query_by_key(
            self.config, self.commit_log, self.index, topic, key, max_num, begin_ms, end_ms
        )

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
        writer = self._writer
        refusal = writer.refusal() if writer.running else None
        return sample_stats(self.config, self.commit_log, self.dispatcher, refusal)

    # -- retention and flushing on demand -------------------------------------

    def make_retention_service(self, clock: Callable[[], float] = time.time) -> RetentionService:
        """A retention service (not started) that deletes this store's expired files.

        The store runs one on the real clock; another, say with ``clock`` fixed at a
        delete hour, runs single passes with ``step()`` when its caller decides.
        """
        return RetentionService(
            self.config,
            delete_commit_log=self._delete_expired_commit_log,
            delete_logic_files=self._delete_expired_logic_files,
            on_disk_state=self._writer.set_disk_state,
            clock=clock,
        )

    def run_retention(self) -> None:
        """Run one pass of the store's own retention now rather than after its interval.

        It deletes what the configuration says is due at this hour and disk use, and
        re-checks the disk, as the background pass every ``clean_resource_interval`` does.
        """
        self._started_retention().step()

    def check_disk(self) -> DiskState:
        """Measure disk use now: past the warning ratio writes are refused, below it accepted.

        The store does this every ``clean_resource_interval``; call it to have freed space
        noticed at once.
        """
        return self._started_retention().check_disk()

    def delete_expired(self, *, regardless_of_age: bool = False) -> int:
        """Delete commit-log segments past ``file_reserved_time_hours`` (with
        ``regardless_of_age``, the oldest whatever their age), and the consume-queue and
        index files that only covered them; return how many segments went.

        Never deletes the segment being written, nor past what is flushed and dispatched.
        """
        deleted = self._delete_expired_commit_log(
            EarlyDeletion.FORCIBLY if regardless_of_age else EarlyDeletion.NONE
        )
        self._delete_expired_logic_files()
        return deleted

    def request_flush(self) -> None:
        """Run the background commit-log flush now rather than at its next interval.

        It flushes as a timed pass would (a segment that filled up, or at least
        ``flush_commit_log_least_pages`` dirty pages) and returns at once;
        ``stats().flushed_offset`` shows the progress. Under SYNC_FLUSH every write is
        flushed before it is acknowledged: nothing to do.
        """
        if self._committer is not None:
            self._committer.wakeup()  # moves the write buffer to the file, then flushes
        if self._flusher is not None:
            self._flusher.wakeup()

    def _started_retention(self) -> RetentionService:
        if self._retention is None:
            raise StoreError("the store is not started: call start() first")
        return self._retention

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
        dispatched = self.dispatcher.reput_offset
        with self._logics_lock:
            self._flush_logics(least_pages)
            durable_below = min(dispatched, self.commit_log.queue.flushed_where)
            flush_lagging_queues(self.consume_queues, durable_below)
            self._advance_scan_start(durable_below)
        self.checkpoint.physic_msg_timestamp = self._flushed_stamp
        self.checkpoint.logics_msg_timestamp = logics_stamp
        self.checkpoint.index_msg_timestamp = logics_stamp
        self.checkpoint.flush()

    def _advance_scan_start(self, durable_below: int) -> None:
        """Move the checkpoint's scan start up to a record under ``durable_below`` (flushed
        and dispatched before the consume queues and index were flushed), if one is known."""
        start = durable_scan_start(self.consume_queues, durable_below)
        if start is not None and start > self.checkpoint.scan_start:
            self.checkpoint.scan_start = start

    def _delete_expired_commit_log(self, early: EarlyDeletion) -> int:
        config = self.config
        queue = self.commit_log.queue
        deleted_below = self.commit_log.min_offset
        written_out = min(self.commit_log.flushed_offset, self.dispatcher.reput_offset)

        def delete(clean_immediately: bool, deletable_below: int, batch_max: int) -> int:
            return queue.delete_expired_by_time(
                config.file_reserved_time_hours * 3600,
                interval=config.delete_commit_log_files_interval,
                clean_immediately=clean_immediately,
                batch_max=batch_max,
                deletable_below=deletable_below,
            )

        if early is EarlyDeletion.FORCIBLY:
            deleted = delete(True, written_out, config.delete_files_batch_max)
            if deleted:
                new_min = self.commit_log.min_offset
                unread = unread_below(self.consume_queues, new_min, self.consumer_progress)
                warn_deleted_unread(deleted_below, new_min, unread)
            return deleted
        deleted = delete(False, written_out, config.delete_files_batch_max)
        if early is EarlyDeletion.CONSUMED and deleted < config.delete_files_batch_max:
            # Read after the expired ones went: a queue's first unit may still name
            # a deleted record, which only lowers the bound.
            consumed = consumed_below(self.consume_queues, self.consumer_progress)
            deleted += delete(
                True, min(written_out, consumed), config.delete_files_batch_max - deleted
            )
        return deleted

    def _delete_expired_logic_files(self) -> None:
        min_offset = self.commit_log.min_offset
        with self._logics_lock:
            for cq in self.consume_queues:
                cq.delete_expired(min_offset)
            if self.index is not None:
                self.index.delete_expired(min_offset)
