"""Builds consume-queue units and index entries from the commit log, behind the writer.

It reads records from ``reput_offset`` up to what is readable, writes each
record's ConsumeQueue unit and IndexFile keys, and tells listeners which
queues got new messages (long polling waits on that).

Invariants: every parsed record passes the same per-record check as recovery
(``recovery.record_problem_at``), and damage is stepped over with the same
decision (``recovery.resume_after``), so consume queues and index hold exactly
the records recovery kept. A damaged record never stalls dispatch while valid
records follow it; each newly found damaged stretch is logged once and handed
to ``on_damage``. A record whose queue offset cannot be true (outside the CRC,
it may be damaged too) gets no unit, rather than a hole of blank units.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import struct
import threading
import time
from collections.abc import Callable

from .commit_log import CommitLog
from .consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from .consume_queue_table import ConsumeQueueTable
from .dispatch_request import DispatchRequest, QueueRun, index_keys
from .hashing import tag_hash
from .index_service import IndexService
from .mapped_file import MappedFile
from .message import (
    BLANK_MAGIC,
    BORNHOST_V6,
    MESSAGE_MAGIC,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    STORE_TIMESTAMP_OFFSET,
    STORE_TIMESTAMP_OFFSET_V6,
    TRANSACTION_MASK,
    TRANSACTION_ROLLBACK_TYPE,
    UNQUEUED_TRANSACTION_TYPES,
    Property,
    header_struct,
)
from .recovery import (
    MIN_RECORD_SIZE,
    Damage,
    damaged_records,
    record_problem_at,
    resume_after,
)
from .service_thread import ServiceThread

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">iIiiiqqi")
_SIZE_MAGIC = struct.Struct(">iI")
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")
_READ_CHUNK = 4 * 1024 * 1024
# A record's size beyond its body: header (IPv6 hosts), topic and properties.
_MAX_RECORD_OVERHEAD = 64 * 1024

# Appended batches kept for dispatch without parsing; beyond this the log is parsed.
_HANDED_BATCHES_MAX = 4096
# Records of one queue written to it together: shorter runs cost less one unit at a time.
_RUN_MIN_UNITS = 8

ArrivalListener = Callable[[set[tuple[str, int]]], None]
DamageListener = Callable[[Damage], None]


def _property(props: bytes, name: bytes) -> str:
    """One property's value from the raw ``k\\x01v\\x02`` form, without decoding them all."""
    start = 0
    while True:
        i = props.find(name, start)
        if i < 0:
            return ""
        if i == 0 or props[i - 1] == 2:
            end = props.find(b"\x02", i)
            return props[i + len(name) : end if end >= 0 else len(props)].decode()
        start = i + 1


_TAGS = (Property.TAGS + NAME_VALUE_SEPARATOR).encode()
_KEYS = (Property.KEYS + NAME_VALUE_SEPARATOR).encode()
_UNIQ = (Property.UNIQ_KEY + NAME_VALUE_SEPARATOR).encode()
assert PROPERTY_SEPARATOR == "\x02"


@dataclasses.dataclass(slots=True)
class ParsedRun:
    requests: list[DispatchRequest]
    consumed: int  # bytes of whole valid records at the start of the data
    end_of_segment: bool  # stopped at the segment's closing BLANK
    problem: str | None  # stopped at bytes that are no valid record (not merely unread yet)


def parse_records(
    data: bytes,
    base: int,
    *,
    segment_end: int | None = None,
    more_follows: bool = False,
    check_crc: bool = False,
    checked: bool = True,
) -> ParsedRun:
    """Records in ``data`` (which starts at global offset ``base``).

    ``segment_end`` is where the segment ends, counted from ``data[0]`` (None:
    unknown, any BLANK ends it); ``more_follows`` says the segment holds readable
    bytes past ``data``. Stops at the segment's BLANK, at a record not wholly
    readable yet, or at damage (``problem``). ``checked=False`` is for bytes
    recovery has just checked record by record: only their framing is read.
    """
    requests: list[DispatchRequest] = []
    pos = 0
    limit = len(data)
    topics: dict[bytes, str] = {}
    view = memoryview(data)
    problem: str | None = None
    while pos + 8 <= limit:
        size, magic = _SIZE_MAGIC.unpack_from(data, pos)
        if magic == BLANK_MAGIC and (segment_end is None or pos + size == segment_end):
            # May be as short as 8 bytes: checked before reading a full header.
            return ParsedRun(requests, pos, True, None)
        if magic == MESSAGE_MAGIC and size > 0 and pos + size > limit:
            # Not wholly in ``data``: unread yet, unless nothing more can come.
            at_segment_end = segment_end is not None and limit >= segment_end
            if not at_segment_end and (pos > 0 or not more_follows):
                break
        if checked or magic != MESSAGE_MAGIC or size < MIN_RECORD_SIZE or pos + size > limit:
            problem = record_problem_at(data, view, pos, limit, base, check_crc)
            if problem is not None:
                break
        try:
            requests.append(request_of(data, pos, size, topics))
        except UnicodeDecodeError:
            problem = f"record at {base + pos} has a topic or properties that are not UTF-8"
            break
        pos += size
    view.release()
    return ParsedRun(requests, pos, False, problem)


def request_of(data: bytes, pos: int, size: int, topics: dict[bytes, str]) -> DispatchRequest:
    """The dispatch request of the valid record at ``pos``."""
    _, _, _, queue_id, _, queue_offset, physical, sys_flag = _HEAD.unpack_from(data, pos)
    v6 = sys_flag & BORNHOST_V6
    store_ts = _LONG.unpack_from(
        data, pos + (STORE_TIMESTAMP_OFFSET_V6 if v6 else STORE_TIMESTAMP_OFFSET)
    )[0]
    hsize = header_struct(sys_flag).size
    body_len = _INT.unpack_from(data, pos + hsize - 4)[0]
    t = pos + hsize + body_len
    topic_len = data[t]
    raw_topic = data[t + 1 : t + 1 + topic_len]
    topic = topics.get(raw_topic)
    if topic is None:
        topic = topics[raw_topic] = raw_topic.decode()
    p = t + 1 + topic_len
    props_len = _SHORT.unpack_from(data, p)[0]
    props = data[p + 2 : p + 2 + props_len]
    keys = index_keys(_property(props, _KEYS), _property(props, _UNIQ))
    return DispatchRequest(
        topic,
        queue_id,
        queue_offset,
        physical,
        size,
        sys_flag,
        store_ts,
        _property(props, _TAGS),
        keys,
    )


# What the commit log hands over for each append: a request a record, or a run.
HandedBatch = list[DispatchRequest] | QueueRun


def _start_of(batch: HandedBatch) -> int:
    if isinstance(batch, QueueRun):
        return batch.physical_offsets[0]
    return batch[0].physical_offset


def _end_of(batch: HandedBatch) -> int:
    if isinstance(batch, QueueRun):
        return batch.physical_offsets[-1] + batch.sizes[-1]
    last = batch[-1]
    return last.physical_offset + last.size


def _run_end(requests: list[DispatchRequest], start: int) -> int:
    """One past the last of the records from ``start`` that take the next offsets of the
    same queue in turn (none a transaction's half or rollback)."""
    first = requests[start]
    topic, queue_id, queue_offset = first.topic, first.queue_id, first.queue_offset
    end = start + 1
    count = len(requests)
    while end < count:
        r = requests[end]
        queue_offset += 1
        if (
            r.queue_offset != queue_offset
            or r.queue_id != queue_id
            or r.topic != topic
            or r.sys_flag & TRANSACTION_MASK in UNQUEUED_TRANSACTION_TYPES
        ):
            break
        end += 1
    return end


class Dispatcher(ServiceThread):
    """Dispatches new records as soon as it is told of them, else every 0.1 s.

    ``stop()`` returns after dispatching what is readable then.
    """

    name = "dispatcher"
    # A full disk can stop a new consume-queue file; retry from the same offset, calmly.
    failure_pause = 0.5

    def __init__(
        self,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueTable,
        index: IndexService | None,
    ) -> None:
        super().__init__(interval=0.1)
        self._commit_log = commit_log
        self._consume_queues = consume_queues
        self._index = index
        self._check_crc = commit_log.config.check_crc_on_recover
        # Damage already found (by recovery): start offset -> where valid data resumes.
        self.known_damage: dict[int, int] = {}
        # Consume-queue units found bad, rewritten when dispatch meets their record.
        self.repair_units: dict[tuple[str, int], set[int]] = {}
        self.on_damage: DamageListener | None = None
        # Recovery checked every record's CRC in [verified_from, verified_below): the
        # re-dispatch of that range checks the rest of each record, not its CRC again.
        self.verified_from = 0
        self.verified_below = 0
        # Set while recovery re-dispatches: tells whether an existing unit points at a
        # sound record (queue_check), so that a replay can mend one that does not.
        self.unit_is_sound: Callable[[ConsumeQueue, int, int, int], bool] | None = None
        self._waiting_at = -1
        self.mended_units = 0
        # Every read must be able to hold one whole record, or the largest
        # messages would never be dispatched (and nothing after them either).
        self._read_chunk = max(
            _READ_CHUNK, commit_log.config.max_message_size + _MAX_RECORD_OVERHEAD
        )
        self.reput_offset = 0
        # Store timestamp of the newest dispatched record, for the checkpoint.
        self.last_store_timestamp = 0
        self._listeners: list[ArrivalListener] = []
        self._handed: collections.deque[HandedBatch] = collections.deque()
        self._progress = threading.Condition()
        self._progress_waiters = 0  # threads in wait_dispatched (changed under _progress)

    def add_listener(self, listener: ArrivalListener) -> None:
        self._listeners.append(listener)

    def notify_new_data(self) -> None:
        """Called after commits: there may be records to dispatch."""
        self.wakeup()

    def hand(self, batch: HandedBatch) -> None:
        """Take an appended batch's requests (or run), so its records need not be parsed
        again.

        Called in log order. Past a backlog limit batches are not kept; the
        dispatcher then parses the log until it reaches the batches it has.
        """
        if len(self._handed) < _HANDED_BATCHES_MAX:
            self._handed.append(batch)
        self.wakeup()

    # -- dispatching --------------------------------------------------------

    def dispatch_available(self) -> int:
        """Dispatch everything readable now; returns the number of records."""
        count = 0
        while self.reput_offset < (readable := self._commit_log.max_offset):
            handed = self._take_handed(self.reput_offset, readable)
            if handed is not None:
                # Every handed batch that is readable now, in one pass: one arrival
                # notice and one progress notice for all of them.
                batches = [handed]
                end = _end_of(handed)
                while (more := self._take_handed(end, readable)) is not None:
                    batches.append(more)
                    end = _end_of(more)
                count += self._dispatch_handed(batches)
                # Only now: a failed dispatch is retried from where it stood.
                self.reput_offset = end
                self._announce_progress()
                continue
            got = self._commit_log.read_segment_tail(self.reput_offset, self._read_chunk)
            if got is None:
                # Retention deleted it before we got there; resume at what is left.
                self.reput_offset = max(self.reput_offset, self._commit_log.min_offset)
                if self._commit_log.queue.find(self.reput_offset) is None:
                    break
                continue
            mf, data = got
            position = self.reput_offset - mf.file_from_offset
            more_follows = position + len(data) < mf.read_position
            verified = self.verified_from <= self.reput_offset < self.verified_below
            if verified:
                # Recovery's verdict stands: stop at the damage it found, step over it below.
                damage = min((o for o in self.known_damage if o >= self.reput_offset), default=-1)
                if 0 <= damage - self.reput_offset < len(data):
                    data = data[: damage - self.reput_offset]
                    more_follows = True
            run = parse_records(
                data,
                self.reput_offset,
                segment_end=mf.file_size - position,
                more_follows=more_follows,
                check_crc=self._check_crc,
                checked=not verified,
            )
            self._dispatch(run.requests)
            count += len(run.requests)
            if run.end_of_segment:
                self.reput_offset = mf.file_from_offset + mf.file_size
            elif run.problem is not None:
                self.reput_offset += run.consumed
                resume = self._resume(mf, self.reput_offset, run.problem)
                if resume is None:
                    break
                self.reput_offset = resume
            else:
                self.reput_offset += run.consumed
                # Damage recovery already stepped over can look like a record not yet
                # wholly readable (a size reaching past the end): go where it said.
                known = self.known_damage.get(self.reput_offset)
                if known is not None:
                    self.reput_offset = known
                elif run.consumed == 0:
                    break
            self._announce_progress()
        return count

    def _announce_progress(self) -> None:
        # Read without the lock: a waiter counts itself before it reads reput_offset
        # under the lock, so it either sees the new offset or is counted here.
        if self._progress_waiters:
            with self._progress:
                self._progress.notify_all()

    def _resume(self, mf: MappedFile, at: int, problem: str) -> int | None:
        """Where dispatch goes on after the damage at global ``at``; None to wait for more data.

        The same decision recovery makes: the damaged record's own end if its
        framing holds, else the next valid record or the segment's BLANK; a full
        segment with nothing valid after the damage hands over to the next one.
        """
        known = self.known_damage.get(at)
        if known is not None:
            return known
        base = mf.file_from_offset
        limit = mf.read_position
        mm = mf.mapping
        with memoryview(mm) as view:
            found = resume_after(mm, view, at - base, limit, base, self._check_crc)
            lost = damaged_records(mm, at - base, limit)
        if found is not None:
            resume = base + found
        elif limit == mf.file_size and self._commit_log.queue.find(base + limit) is not None:
            resume = base + limit
        else:
            if self._waiting_at != at:
                self._waiting_at = at
                log.warning(
                    "dispatch waits at commit-log offset %d: %s; nothing valid follows yet",
                    at,
                    problem,
                )
            return None
        self._report(Damage(at, resume - at, lost, problem))
        self.known_damage[at] = resume
        return resume

    def _report(self, damage: Damage) -> None:
        log.warning(
            "dispatch skipped %d damaged record(s), %d bytes at commit-log offset %d: %s",
            damage.records,
            damage.length,
            damage.offset,
            damage.reason,
        )
        if self.on_damage is not None:
            try:
                self.on_damage(damage)
            except Exception:
                log.exception("could not record damage at %d", damage.offset)

    def _take_handed(self, at: int, readable: int) -> HandedBatch | None:
        """The next handed batch if it starts at commit-log offset ``at`` and is readable
        (ends by ``readable``).

        Only a batch at ``at`` itself: one that starts the next segment is taken once
        parsing has met the BLANK that ends this one, for batches that were not kept
        may lie in between.
        """
        handed = self._handed
        while handed:
            batch = handed[0]
            first = _start_of(batch)
            if first < at:
                handed.popleft()  # already dispatched by parsing
                continue
            if first != at:
                return None  # a segment's BLANK, or batches not kept: parse up to this one
            if _end_of(batch) > readable:
                return None  # not committed yet (transient store pool)
            handed.popleft()
            return batch
        return None

    def _dispatch_handed(self, batches: list[HandedBatch]) -> int:
        """Dispatch handed batches in log order; returns the number of records.

        A run that continues its queue is written as it is; anything else (a replay, a
        gap) goes through the record-by-record rules, merged with the requests around it.
        """
        touched: set[tuple[str, int]] = set()
        requests: list[DispatchRequest] = []
        count = 0
        for batch in batches:
            if not isinstance(batch, QueueRun):
                requests += batch
                count += len(batch)
                continue
            run = batch
            count += len(run.sizes)
            if requests:
                touched |= self._dispatch_requests(requests)
                requests = []
            cq = self._consume_queues.find_or_create(run.topic, run.queue_id)
            if run.queue_offset != cq.max_offset:
                requests = run.requests()
                continue
            no_tag = [tag_hash("")] * len(run.sizes)
            cq.put_run(run.queue_offset, run.physical_offsets, run.sizes, no_tag)
            touched.add((run.topic, run.queue_id))
            if self._index is not None:
                self._index.build_id_run(run)
            self.last_store_timestamp = run.store_timestamp
        if requests:
            touched |= self._dispatch_requests(requests)
        self._tell(touched)
        return count

    def _dispatch(self, requests: list[DispatchRequest]) -> None:
        self._tell(self._dispatch_requests(requests))

    def _tell(self, touched: set[tuple[str, int]]) -> None:
        """Tell the arrival listeners which queues got new messages."""
        if touched:
            for listener in self._listeners:
                try:
                    listener(touched)
                except Exception:
                    log.exception("arrival listener failed")

    def _dispatch_requests(self, requests: list[DispatchRequest]) -> set[tuple[str, int]]:
        """Write the units and index keys of ``requests``; returns the queues written."""
        touched: set[tuple[str, int]] = set()
        if not requests:
            return touched
        # Records whose placement cannot be true are neither queued nor indexed.
        unplaced: set[int] = set()
        count = len(requests)
        i = 0
        while i < count:
            r = requests[i]
            start = i
            i += 1
            tx_type = r.sys_flag & TRANSACTION_MASK
            if tx_type in UNQUEUED_TRANSACTION_TYPES:
                continue
            if r.queue_id < 0 or r.queue_offset < 0:
                self._impossible_placement(r)
                unplaced.add(start)
                continue
            cq = self._consume_queues.find_or_create(r.topic, r.queue_id)
            if r.queue_offset == cq.max_offset:
                # A batch of one queue arrives as a run of its next offsets: written at once.
                end = _run_end(requests, start) if count - start >= _RUN_MIN_UNITS else i
                if end - start >= _RUN_MIN_UNITS:
                    run = requests[start:end]
                    cq.put_run(
                        r.queue_offset,
                        [x.physical_offset for x in run],
                        [x.size for x in run],
                        [tag_hash(x.tags) for x in run],
                    )
                    touched.add((r.topic, r.queue_id))
                    i = end
                    continue
            elif r.queue_offset > cq.max_offset and not self._placement_possible(cq, r):
                self._impossible_placement(r)
                unplaced.add(start)
                continue
            code = tag_hash(r.tags)
            if cq.put(r.physical_offset, r.size, code, r.queue_offset):
                touched.add((r.topic, r.queue_id))
            elif self.repair_units or self.unit_is_sound is not None:
                self._repair(cq, r, code)
        if self._index is not None:
            # Indexed together after the queues: one key at a time was the dispatcher's
            # largest cost.
            indexed = [
                r
                for n, r in enumerate(requests)
                if r.keys
                and r.sys_flag & TRANSACTION_MASK != TRANSACTION_ROLLBACK_TYPE
                and n not in unplaced
            ]
            if indexed:
                self._index.build_run(indexed)
        self.last_store_timestamp = requests[-1].store_timestamp
        return touched

    def _placement_possible(self, cq: ConsumeQueue, r: DispatchRequest) -> bool:
        """False for a record whose queue id or offset cannot be true (damaged, outside the CRC),
        asked of a record that would leave a gap in its queue.

        A queue's offsets grow by one per record, so between its newest unit and
        this record at most one record per MIN_RECORD_SIZE bytes can be missing.
        """
        room = max(0, r.physical_offset - cq.max_physical_offset) // MIN_RECORD_SIZE
        return r.queue_offset <= cq.max_offset + room

    def _impossible_placement(self, r: DispatchRequest) -> None:
        if r.physical_offset not in self.known_damage:
            self.known_damage[r.physical_offset] = r.physical_offset + r.size
            reason = (
                f"record at {r.physical_offset} claims queue {r.queue_id} offset "
                f"{r.queue_offset}, which that queue cannot have reached"
            )
            self._report(Damage(r.physical_offset, r.size, 1, reason))

    def _repair(self, cq: ConsumeQueue, r: DispatchRequest, code: int) -> None:
        """Mend the unit of a replayed record: one found bad, or one that disagrees with
        it and points at no sound record (a record's claim never displaces a sound unit)."""
        bad = self.repair_units.get((r.topic, r.queue_id))
        if bad is not None and r.queue_offset in bad:
            cq.rewrite_unit(r.queue_offset, r.physical_offset, r.size, code)
            bad.discard(r.queue_offset)
            return
        sound = self.unit_is_sound
        if sound is None:
            return
        unit = cq.raw_unit(r.queue_offset)
        if unit == (r.physical_offset, r.size, code) or (unit is None and cq.queue.files):
            return  # the same unit, or one retention already deleted
        if unit is not None and unit[1] == BLANK_UNIT_SIZE:
            unit = None
        if (
            unit is not None
            and unit[0] != r.physical_offset
            and sound(cq, r.queue_offset, *unit[:2])
        ):
            return  # another sound record holds this offset
        log.warning(
            "consume queue %s/%d: unit %d was %s, rebuilt from the record at %d",
            r.topic,
            r.queue_id,
            r.queue_offset,
            unit,
            r.physical_offset,
        )
        cq.rewrite_unit(r.queue_offset, r.physical_offset, r.size, code)
        self.mended_units += 1

    def wait_dispatched(self, offset: int, timeout: float) -> bool:
        """Block until everything below ``offset`` is dispatched."""
        deadline = time.monotonic() + timeout
        with self._progress:
            self._progress_waiters += 1
            try:
                while self.reput_offset < offset:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self.wakeup()
                    self._progress.wait(min(remaining, 0.05))
            finally:
                self._progress_waiters -= 1
        return True

    # -- thread -------------------------------------------------------------

    def step(self) -> None:
        try:
            self.dispatch_available()
        except Exception as exc:
            exc.add_note(f"dispatching from commit-log offset {self.reput_offset}")
            raise

    def stop(self) -> None:
        """Stop after dispatching what is readable now."""
        super().stop()
        self.dispatch_available()
