"""Reading a consume queue: its messages, or its raw records as the commit log holds them.

Invariants:

- Both reads walk the queue with one scan (``_matching_units``): from the offset asked
  for, at most ``max_filter_message_count`` units when a filter may skip most of them,
  stepping over blank units and deleted files one offset at a time. An unfiltered read
  of raw records whose units are all in one array (hundreds of them, none blank) finds
  the same runs from that array at once (``_whole_runs``) and has the record check
  start from where the units say each record is.
- A read never returns a record that fails its checks: it is logged and left out, and
  its offset counts as read, so ``next_offset`` moves past it.
- A read answers with the queue's bounds as it found them; ``next_offset`` is the first
  offset it did not look at (or, when it found nothing readable, where to look next).
- Every unit a read uses is checked against the record it points at (recovery's quick
  check: size, magic, queue id, queue offset, physical offset). One that fails is
  mended by ``UnitMender`` (rebuilt from the log or made blank, one WARNING) and the
  read goes on with it as mended: a read never returns another queue's record.
- ``OFFSET_TOO_SMALL`` is answered only for offsets retention deleted, and then always
  with a ``next_offset`` after the offset asked for.
"""

from __future__ import annotations

import logging
import struct
import typing
from collections.abc import Callable, Iterator

import numpy as np

from ..wire.field_arrays import fields_at
from ..wire.record_check import check_run
from ..wire.record_layout import properties_start
from .commit_log import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueue
from .consume_queue_table import ConsumeQueueTable
from .message import MESSAGE_MAGIC, CorruptRecordError, StoredMessage
from .results import GetResult, GetStatus, RecordsResult
from .unit_mending import UnitMender

log = logging.getLogger(__name__)

# Units read at a time when a filter may skip most of them.
_FILTER_READ_UNITS = 256
_SCAN_BATCH = 256
# Units from which an unfiltered read finds its runs with numpy rather than unit by unit.
_ARRAY_MIN_UNITS = 256
# Bad units one read mends before it answers with what it has.
_MENDS_PER_READ = 8
# Where a record's QUEUEID, QUEUEOFFSET and PHYSICALOFFSET fields are.
_QUEUE_ID_AT, _QUEUE_OFFSET_AT, _PHYSICAL_AT = 12, 20, 28
_GONE = object()  # a record retention deleted
# TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG.
_QUICK_CHECK = struct.Struct(">iIiiiqqi")
# The same up to PHYSICALOFFSET: what a run's check compares with the unit.
_UNIT_FIELDS = struct.Struct(">iIiiiqq")
# Runs of fewer records are checked record by record: below this, numpy's cost per call
# is more than the work (a queue's records between other queues' are runs of one).
_ARRAY_CHECK_MIN_RECORDS = 8


class _Run(typing.NamedTuple):
    """Records adjacent in the commit log, read as one copy."""

    physical: int  # where the first starts in the log
    length: int
    before: int  # records of the read before it
    first_offset: int  # the first's queue offset
    # Where each record starts in the run, when the units were read as one array.
    starts: np.ndarray | None = None


def out_of_bounds(cq: ConsumeQueue | None, offset: int) -> tuple[GetStatus, int, int, int] | None:
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


def _matching_units(
    cq: ConsumeQueue, start: int, end: int, batch: int, tag_codes: set[int] | None
) -> Iterator[tuple[int, int | None, int]]:
    """(queue offset, commit-log offset, size) of each unit in [start, end) whose tag is in
    ``tag_codes`` (every unit when None), reading ``batch`` units at a time.

    An offset with nothing stored (a blank stretch or a deleted file) yields commit-log
    offset None (a damaged unit may hold any number, -1 too). Exhausted, the scan has
    looked at every offset below ``end``.
    """
    offset = start
    while offset < end:
        units = cq.read_units(offset, min(batch, end - offset))
        if not units:
            yield offset, None, 0
            offset += 1
            continue
        for physical, size, tag_code in units:
            queue_offset = offset
            offset += 1
            if tag_codes is not None and tag_code not in tag_codes:
                continue
            yield queue_offset, physical, size


def _whole_runs(
    units: np.ndarray, offset: int, end: int, max_count: int, max_bytes: int, segment_size: int
) -> tuple[list[_Run], int, int] | None:
    """The runs ``QueueReader._runs_of`` finds among ``units`` (read from queue offset
    ``offset`` for an unfiltered read up to ``end``), all found at once: with the offset
    after the last unit taken and the number of records.

    None when the units are not the whole answer: too few to be worth it, a size no record
    has, or the units stop (a blank unit, a file's end) before the read's end and limits.
    """
    count = len(units)
    if count < _ARRAY_MIN_UNITS:
        return None
    size = units["size"].astype(np.int64)
    if (size <= 0).any():
        return None
    total = np.cumsum(size)
    # Like the unit-by-unit scan: stop after the unit that reaches either limit.
    taken = min(count, max_count, int(np.searchsorted(total, max_bytes)) + 1)
    limited = taken == max_count or int(total[taken - 1]) >= max_bytes
    if not limited and offset + count < end:
        return None
    # Unlimited, the units reached ``end``.
    next_offset = offset + taken
    physical = units["physical"][:taken].astype(np.int64)
    size = size[:taken]
    record_end = physical + size
    # A unit joins the run before it if its record follows that one in the log and ends
    # within the segment that one is in.
    breaks = np.flatnonzero(
        (physical[1:] != record_end[:-1])
        | (record_end[1:] > (physical[:-1] // segment_size + 1) * segment_size)
    )
    firsts = [0, *(breaks + 1).tolist()]
    lasts = [*firsts[1:], taken]
    runs = []
    for first, last in zip(firsts, lasts, strict=True):
        start = int(physical[first])
        runs.append(
            _Run(
                start,
                int(record_end[last - 1]) - start,
                first,
                offset + first,
                physical[first:last] - start,
            )
        )
    return runs, next_offset, taken


def _unit_run(start: int, end: int, before: int, first_offset: int, at: list[int]) -> _Run:
    return _Run(start, end - start, before, first_offset, np.array(at, dtype=np.int64))


def _run_sizes(starts: np.ndarray, length: int) -> list[int]:
    """The size of each record of a run, by where its units say they start."""
    return np.diff(np.append(starts, length)).tolist()


def _intact_records(
    run: bytes, physical: int, starts: np.ndarray | None = None
) -> tuple[list[bytes], int, int | None]:
    """Check every record of ``run`` (whole records from commit-log offset ``physical``,
    where the consume queue says they start when ``starts`` is given).

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
        checked = check_run(run, position, end, base=physical, text=False, starts=starts)
        starts = None  # past a problem, where records start is the loop's to find
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


def read_message(commit_log: CommitLog, physical: int, size: int) -> StoredMessage | None:
    """The message stored at ``physical``; None (logged) if it fails its checks."""
    try:
        return commit_log.get_message(physical, size)
    except CorruptRecordError as exc:
        log.error("skipping corrupt record: %s", exc)
        return None


def _unit_properties(
    raw: bytes, cq: ConsumeQueue, queue_offset: int, physical: int
) -> bytes | None:
    """The PROPERTIES field of the record read for the unit at ``queue_offset``; None unless
    recovery's quick check of the record's header against that unit passes and its
    lengths add up."""
    if len(raw) < _QUICK_CHECK.size:
        return None
    size, magic, _, queue_id, _, record_offset, at, sys_flag = _QUICK_CHECK.unpack_from(raw)
    if (
        size != len(raw)
        or magic != MESSAGE_MAGIC
        or queue_id != cq.queue_id
        or record_offset != queue_offset
        or at != physical
    ):
        return None
    start = properties_start(raw, sys_flag)
    return None if start is None else raw[start:]


def _belongs(message: StoredMessage, cq: ConsumeQueue, queue_offset: int) -> bool:
    return (
        message.queue_offset == queue_offset
        and message.queue_id == cq.queue_id
        and message.topic == cq.topic
    )


def _first_disagreeing(
    chunk: bytes, physical: int, starts: np.ndarray, cq: ConsumeQueue, first_offset: int
) -> int | None:
    """Index of the first record of a run whose fields disagree with the unit that led
    there (the units say the records start at ``starts`` in ``chunk``), None if none."""
    end = len(chunk)
    if len(starts) < _ARRAY_CHECK_MIN_RECORDS:
        return _first_disagreeing_of_few(chunk, physical, starts.tolist(), cq, first_offset)
    sizes = np.diff(np.append(starts, end))
    inside = (starts >= 0) & (starts + _PHYSICAL_AT + 8 <= end)
    at = np.where(inside, starts, 0)
    ok = inside & (fields_at(chunk, end, at, ">i4") == sizes)
    ok &= fields_at(chunk, end, at + 4, ">u4") == MESSAGE_MAGIC
    ok &= fields_at(chunk, end, at + _QUEUE_ID_AT, ">i4") == cq.queue_id
    expected = np.arange(first_offset, first_offset + len(starts), dtype=np.int64)
    ok &= fields_at(chunk, end, at + _QUEUE_OFFSET_AT, ">i8") == expected
    ok &= fields_at(chunk, end, at + _PHYSICAL_AT, ">i8") == at + physical
    return None if ok.all() else int(np.argmin(ok))


def _first_disagreeing_of_few(
    chunk: bytes, physical: int, starts: list[int], cq: ConsumeQueue, first_offset: int
) -> int | None:
    """``_first_disagreeing``, one record at a time."""
    end = len(chunk)
    queue_id = cq.queue_id
    last = len(starts) - 1
    for index, start in enumerate(starts):
        if start < 0 or start + _UNIT_FIELDS.size > end:
            return index
        size = (starts[index + 1] if index < last else end) - start
        total, magic, _, record_queue, _, queue_offset, at = _UNIT_FIELDS.unpack_from(chunk, start)
        if (
            total != size
            or magic != MESSAGE_MAGIC
            or record_queue != queue_id
            or queue_offset != first_offset + index
            or at != start + physical
        ):
            return index
    return None


class QueueReader:
    """Reads the consume queues of one store and the records their units point at."""

    def __init__(
        self, config: StoreConfig, commit_log: CommitLog, consume_queues: ConsumeQueueTable
    ) -> None:
        self.config = config
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.mender = UnitMender(commit_log)

    def _checked_message(
        self, cq: ConsumeQueue, queue_offset: int, physical: int, size: int, raw: bytes | None
    ) -> StoredMessage | object | None:
        """The message of one unit, checked to be that unit's; None where nothing readable
        is there (the unit mended blank, or its record failed its CRC), ``_GONE`` where
        retention deleted it. ``raw``: the unit's record as read already, if it was."""
        commit_log = self.commit_log
        corrupt: CorruptRecordError | None = None
        try:
            if raw is None:
                message = commit_log.get_message(physical, size)
            else:
                message = commit_log.message_of(raw, physical)
        except CorruptRecordError as exc:
            message, corrupt = None, exc
        if message is not None and _belongs(message, cq, queue_offset):
            return message
        gone = message is None and corrupt is None
        if gone and self.mender.deleted_by_retention(cq, queue_offset, physical):
            return _GONE
        if self.mender.problem(cq, queue_offset, physical, size) is None:
            if corrupt is not None:
                log.error("skipping corrupt record: %s", corrupt)
            return None
        mended = self.mender.mend(cq, queue_offset)
        if mended is None:
            return None
        message = read_message(commit_log, mended[0], mended[1])
        return message if message is not None and _belongs(message, cq, queue_offset) else None

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
        """Messages of one queue from ``offset``.

        ``tag_codes`` filters on the consume queue's tag hash without reading the
        commit log; ``properties_check`` looks at the raw PROPERTIES field of a record that
        agrees with its unit and passes it over when it answers False, before anything of
        the record is decoded or checked further; ``accept``
        then checks the message itself (hash collisions, and every message served).
        A record that fails its CRC is logged and skipped, never returned.
        """
        cq = self.consume_queues.get(topic, queue_id)
        refused = out_of_bounds(cq, offset)
        if refused is not None:
            status, next_offset, min_offset, max_offset = refused
            return GetResult(status, [], next_offset, min_offset, max_offset)
        assert cq is not None
        min_offset, max_offset = cq.min_offset, cq.max_offset
        messages: list[StoredMessage] = []
        next_offset = offset
        size_total = 0
        filtering = tag_codes is not None or accept is not None or properties_check is not None
        commit_log = self.commit_log
        # A filter that matches nothing must not turn one read into a scan of the queue.
        end = min(max_offset, offset + self.config.max_filter_message_count)
        if max_count > 0 and max_bytes > 0 and end > offset:
            next_offset = end
            batch = _FILTER_READ_UNITS if filtering else max_count
            for queue_offset, physical, size in _matching_units(cq, offset, end, batch, tag_codes):
                if physical is None:
                    continue
                raw = None
                if properties_check is not None:
                    raw = commit_log.read(physical, size)
                    # What is not this unit's record is left to the full read, which mends.
                    field = (
                        None if raw is None else _unit_properties(raw, cq, queue_offset, physical)
                    )
                    if field is not None and not properties_check(field):
                        continue
                message = self._checked_message(cq, queue_offset, physical, size, raw)
                if message is _GONE:
                    if messages:
                        next_offset = queue_offset
                        break
                    status = GetStatus.OFFSET_TOO_SMALL
                    first_kept = self.mender.first_kept(cq, queue_offset)
                    return GetResult(status, [], first_kept, min_offset, max_offset)
                if not isinstance(message, StoredMessage):
                    continue  # nothing readable there
                if accept is not None and not accept(message):
                    continue
                messages.append(message)
                size_total += size
                if size_total >= max_bytes or len(messages) >= max_count:
                    next_offset = queue_offset + 1
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
        as :meth:`get_messages` does. Each record is checked to be its unit's; a unit
        that is not is mended, and the read goes on from it.
        """
        for attempt in range(_MENDS_PER_READ, 0, -1):
            answer = self._records_once(
                topic, queue_id, offset, max_count, max_bytes, tag_codes, last=attempt == 1
            )
            if answer is not None:
                return answer
        raise AssertionError("the last attempt always answers")

    def _records_once(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        tag_codes: set[int] | None,
        *,
        last: bool,
    ) -> RecordsResult | None:
        """One attempt of :meth:`get_records`; None when a bad unit was met and mended, so
        that a read again goes through it. The ``last`` attempt answers with the records
        before the bad unit instead."""
        runs: list[_Run] = []
        status, next_offset, min_offset, max_offset, count = self._runs_of(
            topic, queue_id, offset, max_count, max_bytes, tag_codes, runs
        )
        cq = self.consume_queues.get(topic, queue_id)
        chunks = []
        dropped = 0
        deleted = False
        for physical, length, before, first_queue_offset, starts in runs:
            assert cq is not None and starts is not None
            chunk = self.commit_log.read(physical, length)
            if chunk is None and self.mender.deleted_by_retention(cq, first_queue_offset, physical):
                # Retention deleted the rest while it was read: end before it.
                count, next_offset, deleted = before - dropped, first_queue_offset, True
                break
            bad: int | None
            if chunk is None:
                bad = self._first_unsound(cq, first_queue_offset, physical, starts, length)
            else:
                bad = _first_disagreeing(chunk, physical, starts, cq, first_queue_offset)
            if bad is not None:
                bad_offset = first_queue_offset + bad
                unit = (physical + int(starts[bad]), _run_sizes(starts, length)[bad])
                mended = self.mender.mend(cq, bad_offset)
                if mended is not None and mended[:2] == unit:
                    # The unit is in place and its record damaged: the record rules below.
                    bad = None
                if chunk is None and bad is None:
                    count, next_offset = before - dropped, bad_offset + 1
                    break
            if bad is not None and not last:
                return None
            if bad is not None:
                if chunk is not None and bad:
                    cut = int(starts[bad])
                    good, failed, _ = _intact_records(chunk[:cut], physical, starts[:bad])
                    chunks += good
                    dropped += failed
                # Mended blank, the next read steps over it; rebuilt, it reads it.
                count = before + bad - dropped
                next_offset = bad_offset + (mended is None)
                break
            assert chunk is not None
            good, failed, broken_at = _intact_records(chunk, physical, starts)
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
                # Retention took every record found: go on where the queue starts now.
                assert cq is not None
                status, next_offset = (
                    GetStatus.OFFSET_TOO_SMALL,
                    self.mender.first_kept(cq, next_offset),
                )
            else:
                status = GetStatus.NO_MATCHED_MESSAGE
        return RecordsResult(status, data, count, next_offset, min_offset, max_offset)

    def _first_unsound(
        self, cq: ConsumeQueue, first_offset: int, physical: int, starts: np.ndarray, length: int
    ) -> int:
        """Index of the first unit of a run that the quick check refuses (0 if none does:
        the run as a whole could not be read)."""
        sizes = _run_sizes(starts, length)
        for index, (start, size) in enumerate(zip(starts.tolist(), sizes, strict=True)):
            if self.mender.problem(cq, first_offset + index, physical + start, size) is not None:
                return index
        return 0

    def _runs_of(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        tag_codes: set[int] | None,
        runs: list[_Run],
    ) -> tuple[GetStatus, int, int, int, int]:
        """The units from ``offset`` whose tag matches, as runs of adjacent records.

        Fills ``runs`` as ``get_records`` wants them. Returns the status, the offset
        after the last unit scanned, the queue's bounds and the number of records.
        """
        cq = self.consume_queues.get(topic, queue_id)
        refused = out_of_bounds(cq, offset)
        if refused is not None:
            return (*refused, 0)
        assert cq is not None
        min_offset, max_offset = cq.min_offset, cq.max_offset
        segment_size = self.config.commit_log_file_size
        if tag_codes is None:
            end = min(max_offset, offset + max_count)
            batch = end - offset
        else:
            # A filter that matches nothing must not turn one read into a scan of the queue.
            end = min(max_offset, offset + self.config.max_filter_message_count)
            batch = _FILTER_READ_UNITS
        next_offset = offset
        size_total = 0
        run_end = segment_end = -1
        # None: no run open (a damaged unit may name any offset, -1 too).
        run_start: int | None = None
        run_count = run_first = records = 0
        at: list[int] = []  # where the current run's records start, by their units
        if max_count > 0 and max_bytes > 0 and end > offset:
            next_offset = end
            if tag_codes is None and batch >= _ARRAY_MIN_UNITS:
                found = _whole_runs(
                    cq.unit_array(offset, batch), offset, end, max_count, max_bytes, segment_size
                )
                if found is not None:
                    found_runs, next_offset, records = found
                    runs += found_runs
                    return GetStatus.FOUND, next_offset, min_offset, max_offset, records
            for queue_offset, physical, size in _matching_units(cq, offset, end, batch, tag_codes):
                if physical is None:
                    # No run spans an offset with nothing stored.
                    if run_start is not None:
                        runs.append(_unit_run(run_start, run_end, run_count, run_first, at))
                        run_start = None
                    continue
                # A record the tag filter skipped stands between its neighbours: they are
                # not adjacent, so no run spans it.
                if run_start is not None and physical == run_end and physical + size <= segment_end:
                    run_end += size
                else:
                    if run_start is not None:
                        runs.append(_unit_run(run_start, run_end, run_count, run_first, at))
                    run_start, run_end, run_count = physical, physical + size, records
                    run_first = queue_offset
                    segment_end = (physical // segment_size + 1) * segment_size
                    at = []
                at.append(physical - run_start)
                records += 1
                size_total += size
                if size_total >= max_bytes or records >= max_count:
                    next_offset = queue_offset + 1
                    break
        if run_start is not None:
            runs.append(_unit_run(run_start, run_end, run_count, run_first, at))
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
