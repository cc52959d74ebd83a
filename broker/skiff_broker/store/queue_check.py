"""Consume-queue units checked against the commit log.

A unit is good when its commit-log offset starts a valid record (the one
per-record check, ``recovery.record_problem_at``) of the unit's topic and
queue, at the unit's queue offset, with the unit's size and tag hash. Blank
units are holes readers step over and are not checked.

The full check (``skiff store check``, ``--repair``) reads each record whole
(CRC included). The quick check reads a record's first 36 bytes (size, magic,
queue id, queue offset, physical offset). After a crash the units from the
re-scanned part of the log on get the quick check (what the crash can have
touched, found by a binary search per queue), and the re-dispatch of that part
compares each replayed record with its unit (size and tag hash too) and mends
a unit that points at no sound record. Older units are left to ``store check``.

Units past the commit log's end at the tail of a queue are left to
``ConsumeQueue.truncate_dirty`` (a cut tail); one followed by a good unit is
bad, as the log grows in queue order.
"""

from __future__ import annotations

import bisect
import dataclasses
import struct
from collections.abc import Callable, Sequence

from .consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from .consume_queue_table import ConsumeQueueTable
from .dispatcher import request_of
from .hashing import tag_hash
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .message import MESSAGE_MAGIC
from .recovery import Damage, record_problem_at

# TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET
_HEAD = struct.Struct(">iIiiiqq")


@dataclasses.dataclass(slots=True)
class QueueCheck:
    checked: int = 0
    # (topic, queue id) -> queue offsets of bad units, with the first one's reason
    bad: dict[tuple[str, int], list[int]] = dataclasses.field(default_factory=dict)
    reasons: dict[tuple[str, int], str] = dataclasses.field(default_factory=dict)
    # Commit-log offset from which re-dispatch meets every bad unit's record.
    restart: int | None = None

    @property
    def bad_count(self) -> int:
        return sum(len(units) for units in self.bad.values())


class _Log:
    """Record look-ups in a commit log, each segment's buffer view kept while checking."""

    def __init__(
        self, queue: MappedFileQueue, end: int, check_crc: bool, skipped: Sequence[Damage] = ()
    ) -> None:
        self.queue = queue
        self.end = end
        self.check_crc = check_crc
        self._views: dict[int, memoryview] = {}
        spans = sorted((d.offset, d.offset + d.length) for d in skipped)
        self._skipped_starts = [start for start, _ in spans]
        self._skipped_ends = [end for _, end in spans]

    def in_skipped(self, physical: int) -> bool:
        """True if ``physical`` lies in a stretch recovery skipped as damaged."""
        i = bisect.bisect_right(self._skipped_starts, physical) - 1
        return i >= 0 and physical < self._skipped_ends[i]

    def close(self) -> None:
        for view in self._views.values():
            view.release()
        self._views.clear()

    def _locate(self, physical: int, size: int) -> tuple[MappedFile, int] | None:
        if size <= 0 or physical < self.queue.min_offset or physical + size > self.end:
            return None
        mf = self.queue.find(physical)
        if mf is None or physical - mf.file_from_offset + size > mf.file_size:
            return None
        return mf, physical - mf.file_from_offset

    def quick_problem(self, cq: ConsumeQueue, index: int, physical: int, size: int) -> str | None:
        found = self._locate(physical, size)
        if found is None:
            return f"unit {index} points at {physical} (+{size}), outside the commit log"
        if self._skipped_starts and self.in_skipped(physical):
            return f"unit {index} points at {physical}, in a damaged stretch recovery skipped"
        mf, pos = found
        rsize, magic, _, queue_id, _, queue_offset, claimed = _HEAD.unpack_from(mf.mapping, pos)
        if magic != MESSAGE_MAGIC or claimed != physical:
            return f"unit {index} points at {physical}, where no record starts"
        if (rsize, queue_id, queue_offset) != (size, cq.queue_id, index):
            return (
                f"unit {index} (size {size}) points at a record of queue {queue_id}, "
                f"offset {queue_offset}, size {rsize}"
            )
        return None

    def full_problem(
        self, cq: ConsumeQueue, index: int, physical: int, size: int, tag_code: int
    ) -> str | None:
        found = self._locate(physical, size)
        if found is None:
            return f"unit {index} points at {physical} (+{size}), outside the commit log"
        mf, pos = found
        view = self._views.get(mf.file_from_offset)
        if view is None:
            view = self._views[mf.file_from_offset] = memoryview(mf.mapping)
        problem = record_problem_at(
            mf.mapping, view, pos, mf.file_size, mf.file_from_offset, self.check_crc
        )
        if problem is not None:
            return f"unit {index}: {problem}"
        try:
            r = request_of(mf.mapping, pos, size, {})  # type: ignore[arg-type]
        except UnicodeDecodeError:
            return f"unit {index} points at a record whose topic is not UTF-8"
        if (r.size, r.topic, r.queue_id, r.queue_offset) != (size, cq.topic, cq.queue_id, index):
            return (
                f"unit {index} (size {size}) points at a record of {r.topic} queue "
                f"{r.queue_id}, offset {r.queue_offset}, size {r.size}"
            )
        if tag_hash(r.tags) != tag_code:
            return f"unit {index} has tag hash {tag_code}, its record {tag_hash(r.tags)}"
        return None


def unit_soundness(
    log_queue: MappedFileQueue, end: int, skipped: Sequence[Damage]
) -> Callable[[ConsumeQueue, int, int, int], bool]:
    """``sound(cq, queue offset, commit-log offset, size)``: the quick check of one unit."""
    records = _Log(log_queue, end, False, skipped)

    def sound(cq: ConsumeQueue, index: int, physical: int, size: int) -> bool:
        return records.quick_problem(cq, index, physical, size) is None

    return sound


def check_queues(
    log_queue: MappedFileQueue,
    table: ConsumeQueueTable,
    *,
    end: int,
    full_from: int | None,
    check_crc: bool,
    skipped: Sequence[Damage] = (),
    quick_from: int = 0,
) -> QueueCheck:
    """Check the units of every queue; records at or after ``full_from`` get the full check,
    the others the quick one (``full_from=None``: quick for all). Units before the first
    one whose record lies at or after ``quick_from`` are not checked (after a crash: the
    part of the queue written since the checkpoint is what the crash can have touched)."""
    result = QueueCheck()
    records = _Log(log_queue, end, check_crc, skipped)
    try:
        for cq in table:
            start = cq.first_unit_from(quick_from) if quick_from > 0 else 0
            _check_queue(cq, records, 2**63 if full_from is None else full_from, start, result)
    finally:
        records.close()
    return result


def _check_queue(
    cq: ConsumeQueue, records: _Log, full_from: int, start: int, result: QueueCheck
) -> None:
    key = (cq.topic, cq.queue_id)
    bad: list[int] = []
    beyond_end: list[int] = []  # the tail past the log's end, unless a good unit follows
    first_problem = ""
    # End of the last good unit before the first bad one: re-dispatch from there meets them all.
    restart = records.queue.min_offset
    before = cq.real_unit_before(start)
    if before is not None:
        restart = before[0] + before[1]
    for index, physical, size, tag_code in cq.units(start):
        if size == BLANK_UNIT_SIZE:
            continue
        result.checked += 1
        if physical >= full_from:
            problem = records.full_problem(cq, index, physical, size, tag_code)
        else:
            problem = records.quick_problem(cq, index, physical, size)
        if problem is None:
            bad += beyond_end
            beyond_end = []
            if not bad:
                restart = physical + size
            continue
        first_problem = first_problem or problem
        if physical + size > records.end:
            beyond_end.append(index)
        else:
            bad.append(index)
    if bad:
        result.bad[key] = bad
        result.reasons[key] = first_problem
    if bad or beyond_end:
        # A cut tail is rebuilt from the last good unit on (its records may be older
        # than the part of the log recovery re-read).
        result.restart = restart if result.restart is None else min(result.restart, restart)


def unit_problem(
    log_queue: MappedFileQueue, end: int, cq: ConsumeQueue, index: int, physical: int, size: int
) -> str | None:
    """What is wrong with one unit by the quick check (None: sound), with the log's
    readable bytes ending at ``end``: what a read checks before trusting a unit."""
    records = _Log(log_queue, end, False)
    try:
        return records.quick_problem(cq, index, physical, size)
    except (ValueError, struct.error):
        return f"unit {index} points at {physical}, in a segment no longer readable"
