"""One RocketMQ-format IndexFile: a disk hash table from message key to commit-log offset.

Layout (big-endian, byte-compatible with RocketMQ)::

    header   40 bytes   beginTimestamp i64, endTimestamp i64,
                        beginPhyOffset i64, endPhyOffset i64,
                        hashSlotCount i32, indexCount i32
    slots    hash_slot_num * 4 bytes, i32: number of the newest entry of the slot
    entries  index_num * 20 bytes, each keyHash i32, phyOffset i64,
                        timeDiff i32 (seconds after beginTimestamp), prevIndex i32

Entry 0 is never written, so 0 can mean "empty slot" and "end of chain"; that is
why ``indexCount`` starts at 1. Entries are only appended, and each one links to
the entry that held its slot before it, so a slot's chain runs newest to oldest.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
from collections.abc import Iterator

import numpy as np

from .errors import DiskFullError, StoreCorruptError
from .hashing import index_key_hash
from .mapped_file import allocate_file, fsync_directory, take_reserved

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
INVALID_INDEX = 0
INT32_MAX = 2**31 - 1

_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
# The same layouts for numpy, to write many entries at once.
_SLOT_DTYPE = np.dtype(">i4")
_ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")]
)
# Entries a writer adds between two header writes at most (see put_keys): the newest
# so many are all a kill can leave out of their chains, and all a load looks at.
TAIL_ENTRIES = 1 << 16


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an index file with the given capacity."""
    return HEADER_SIZE + hash_slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


class IndexFile:
    """One index file, memory-mapped for its whole life.

    One thread writes (``put_key``); any number of threads may call
    ``select_phy_offsets`` at the same time. Header values are kept in Python
    attributes as well as on disk, so readers never see a half-written header
    and the properties stay readable after ``close``.
    """

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        *,
        begin_timestamp: int = 0,
        begin_phy_offset: int = 0,
        reserved: str = "",
    ) -> None:
        """Open ``path``, creating it when absent.

        A new file takes the blocks ``reserve_file(reserved, ...)`` set aside, if
        there are any (see ``IndexService.reserve``).

        ``begin_timestamp``/``begin_phy_offset`` only apply to a new file: a file
        that continues an older one starts where that one ended, so its time
        range and offsets join up with the older file's (as RocketMQ does).
        """
        if hash_slot_num < 1:
            raise ValueError("hash_slot_num must be positive")
        # Entry 0 is the sentinel, so one real entry needs index_num >= 2; entry
        # numbers are stored as int32.
        if not 2 <= index_num <= INT32_MAX:
            raise ValueError(f"index_num must be in [2, {INT32_MAX}]")
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._entries_pos = HEADER_SIZE + hash_slot_num * SLOT_SIZE

        # Reader counting lets close() run while a query is walking a chain: the
        # mapping is unmapped by whichever of them finishes last.
        self._state_lock = threading.Lock()
        self._readers = 0
        self._closed = False

        if not os.path.exists(path):
            self._create(begin_timestamp, begin_phy_offset, reserved)
        self._mm = self._map()
        try:
            self._read_header()
        except BaseException:
            self._mm.close()
            raise

    # -- opening -------------------------------------------------------------

    def _create(self, begin_timestamp: int, begin_phy_offset: int, reserved: str) -> None:
        # Built under a temporary name and renamed so that a crash never leaves a
        # short or headerless file under a real name.
        tmp = self.path + ".tmp"
        fd = take_reserved(reserved, self.file_size, tmp) if reserved else -1
        if fd < 0:
            try:
                fd = allocate_file(tmp, self.file_size, "index file")
            except DiskFullError as exc:
                raise DiskFullError(f"{exc}, or lower max_index_num / max_hash_slot_num") from exc
        try:
            header = _HEADER.pack(
                begin_timestamp, begin_timestamp, begin_phy_offset, begin_phy_offset, 0, 1
            )
            os.pwrite(fd, header, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.rename(tmp, self.path)
        fsync_directory(os.path.dirname(os.path.abspath(self.path)))

    def _map(self) -> mmap.mmap:
        fd = os.open(self.path, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != self.file_size:
                raise StoreCorruptError(
                    f"index file {self.path} is {actual} bytes, expected {self.file_size}; "
                    "it was written with other max_hash_slot_num / max_index_num settings"
                )
            # The mapping keeps its own duplicate of the descriptor.
            return mmap.mmap(fd, self.file_size)
        finally:
            os.close(fd)

    def _read_header(self) -> None:
        (
            begin_ts,
            end_ts,
            begin_phy,
            end_phy,
            slot_count,
            index_count,
        ) = _HEADER.unpack_from(self._mm, 0)
        if not 0 <= index_count <= self.index_num:
            raise StoreCorruptError(
                f"index file {self.path} claims {index_count} entries but holds at most "
                f"{self.index_num}; delete it and let the store rebuild the index"
            )
        self._begin_timestamp: int = begin_ts
        self._end_timestamp: int = end_ts
        self._begin_phy_offset: int = begin_phy
        self._end_phy_offset: int = end_phy
        self._hash_slot_count: int = slot_count
        # A zero count only comes from a header never written; the sentinel still holds.
        self._index_count: int = max(index_count, 1)

    # -- header --------------------------------------------------------------

    @property
    def begin_timestamp(self) -> int:
        return self._begin_timestamp

    @property
    def end_timestamp(self) -> int:
        return self._end_timestamp

    @property
    def begin_phy_offset(self) -> int:
        return self._begin_phy_offset

    @property
    def end_phy_offset(self) -> int:
        return self._end_phy_offset

    @property
    def hash_slot_count(self) -> int:
        """Slots in use (how many were empty when an entry went into them)."""
        return self._hash_slot_count

    @property
    def index_count(self) -> int:
        """Next entry number; entries 1 .. index_count - 1 are in use."""
        return self._index_count

    @property
    def closed(self) -> bool:
        return self._closed

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mm,
            0,
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._hash_slot_count,
            self._index_count,
        )

    # -- writing -------------------------------------------------------------

    def is_write_full(self) -> bool:
        return self._index_count >= self.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """Add one entry; returns False when the file is full.

        Offsets must not decrease from one call to the next (the service relies on
        chains being ordered by offset to recognise replayed records), except for an
        older record indexed again after its entry was found cut off from every chain.
        """
        if self._closed:
            raise ValueError(f"index file {self.path} is closed")
        if self.is_write_full():
            return False
        if phy_offset < 0:
            raise ValueError("phy_offset must not be negative")
        mm = self._mm
        key_hash = index_key_hash(key)
        slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * SLOT_SIZE
        (prev,) = _SLOT.unpack_from(mm, slot_pos)
        # Anything that is not an already written entry (a torn write before a
        # crash) is treated as an empty slot rather than followed.
        if prev <= INVALID_INDEX or prev >= self._index_count:
            prev = INVALID_INDEX

        if self._index_count == 1 and self._begin_timestamp <= 0:
            # First entry of a file that did not inherit a start from an older file.
            self._begin_timestamp = store_timestamp_ms
            self._begin_phy_offset = phy_offset
        # Seconds keep the diff within int32 (68 years); earlier stamps clamp to 0.
        time_diff = (store_timestamp_ms - self._begin_timestamp) // 1000
        time_diff = min(max(time_diff, 0), INT32_MAX)

        entry = self._index_count
        _ENTRY.pack_into(
            mm, self._entries_pos + entry * ENTRY_SIZE, key_hash, phy_offset, time_diff, prev
        )
        if prev == INVALID_INDEX:
            self._hash_slot_count += 1
        if phy_offset >= self._end_phy_offset:
            # An older record indexed again (see IndexService.load) leaves the ends alone.
            self._end_timestamp = store_timestamp_ms
            self._end_phy_offset = phy_offset
        # The count goes up before the slot points at the entry, so a concurrent
        # reader that sees the new slot value also accepts it as written.
        self._index_count = entry + 1
        self._write_header()
        _SLOT.pack_into(mm, slot_pos, entry)
        return True

    def put_keys(
        self, key_hashes: np.ndarray, phy_offsets: np.ndarray, stamps_ms: np.ndarray
    ) -> int:
        """Add one entry per key, in order, as :meth:`put_key` would one by one; returns how
        many fit (the rest belong in the next file).

        Arrays of equal length (int64): the keys' ``index_key_hash``, their records'
        offsets (not decreasing, and not below this file's end) and store timestamps.
        The file's bytes come out exactly as from ``put_key`` calls: an entry links to
        the batch's previous entry of its slot, else to what the slot held; each slot
        ends up naming its newest entry.

        Entries go in at most ``TAIL_ENTRIES`` at a time, each lot's entries, header and
        slots in that order: a kill leaves only the last lot's entries out of their
        chains, and ``relink_tail`` needs to look at no more than that.
        """
        if self._closed:
            raise ValueError(f"index file {self.path} is closed")
        done = 0
        total = len(key_hashes)
        while done < total:
            put = self._put_lot(
                key_hashes[done : done + TAIL_ENTRIES],
                phy_offsets[done : done + TAIL_ENTRIES],
                stamps_ms[done : done + TAIL_ENTRIES],
            )
            done += put
            if put < TAIL_ENTRIES:
                break
        return done

    def _put_lot(
        self, key_hashes: np.ndarray, phy_offsets: np.ndarray, stamps_ms: np.ndarray
    ) -> int:
        """``put_keys`` of up to ``TAIL_ENTRIES`` keys."""
        first = self._index_count
        count = min(len(key_hashes), self.index_num - first)
        if count <= 0:
            return 0
        hashes = key_hashes[:count]
        offsets = phy_offsets[:count]
        stamps = stamps_ms[:count]
        if offsets[0] < 0:
            raise ValueError("phy_offset must not be negative")
        entries = np.arange(first, first + count, dtype=np.int64)
        slots = hashes % self.hash_slot_num
        slot_table = np.frombuffer(self._mm, _SLOT_DTYPE, self.hash_slot_num, HEADER_SIZE)
        # What each slot held, read as put_key reads it: anything but a written entry is empty.
        previous = slot_table[slots].astype(np.int64)
        previous[(previous <= INVALID_INDEX) | (previous >= first)] = INVALID_INDEX
        # Entries grouped by slot, in entry order within a slot (a stable sort).
        by_slot = np.argsort(slots, kind="stable")
        sorted_slots = slots[by_slot]
        follows = sorted_slots[1:] == sorted_slots[:-1]
        previous[by_slot[1:][follows]] = entries[by_slot[:-1][follows]]

        if first == 1 and self._begin_timestamp <= 0:
            # First entry of a file that did not inherit a start from an older file.
            self._begin_timestamp = int(stamps[0])
            self._begin_phy_offset = int(offsets[0])
        time_diffs = np.clip((stamps - self._begin_timestamp) // 1000, 0, INT32_MAX)
        table = np.frombuffer(self._mm, _ENTRY_DTYPE, count, self._entries_pos + first * ENTRY_SIZE)
        table["key_hash"] = hashes
        table["phy_offset"] = offsets
        table["time_diff"] = time_diffs
        table["prev_index"] = previous
        self._hash_slot_count += int(np.count_nonzero(previous == INVALID_INDEX))
        self._end_timestamp = int(stamps[-1])
        self._end_phy_offset = int(offsets[-1])
        # As in put_key: the count goes up before any slot points at the new entries.
        self._index_count = first + count
        self._write_header()
        newest = np.ones(count, dtype=bool)
        newest[:-1] = ~follows
        slot_table[sorted_slots[newest]] = entries[by_slot[newest]]
        return count

    def relink_tail(self) -> int:
        """Point each slot at its newest counted entry; returns how many entries were out
        of their chains.

        A writer stopped after the header counted new entries but before their slots named
        them (``put_key`` and ``put_keys`` write entries, then the header, then the slots)
        leaves those entries, at most the newest ``TAIL_ENTRIES``, out of every chain,
        though their own links are whole. A slot naming an entry the header does not
        count (its page reached the disk before the header's) is read as empty by
        everyone, and its chain with it; it is pointed back at its newest counted entry
        too. Recovery calls this on the newest file, before anything reads or writes it.
        """
        slot_table = np.frombuffer(self._mm, _SLOT_DTYPE, self.hash_slot_num, HEADER_SIZE)
        count = self._index_count
        uncounted = np.flatnonzero((slot_table < INVALID_INDEX) | (slot_table >= count))
        if uncounted.size:
            slot_table[uncounted] = INVALID_INDEX
        first = max(1, count - TAIL_ENTRIES)
        # Where an uncounted slot's newest counted entry is older than the tail, the chain
        # runs on from the newest entry of the tail that names it... or, with none there,
        # from older entries: those slots are searched in the whole file.
        numbers, slots = self._entry_slots(first, count)
        unlinked = slot_table[slots] < numbers
        lost_slots = [slots[unlinked]]
        lost_numbers = [numbers[unlinked]]
        if uncounted.size:
            untouched = np.setdiff1d(uncounted, slots)
            for start in range(1, first, TAIL_ENTRIES) if untouched.size else ():
                older, older_slots = self._entry_slots(start, min(start + TAIL_ENTRIES, first))
                hit = np.isin(older_slots, untouched)
                lost_slots.insert(-1, older_slots[hit])
                lost_numbers.insert(-1, older[hit])
        backwards = np.concatenate(lost_slots)[::-1]
        if not backwards.size:
            return 0
        # Entries are numbered in order, so a slot's newest is its last occurrence.
        touched, last = np.unique(backwards, return_index=True)
        slot_table[touched] = np.concatenate(lost_numbers)[::-1][last]
        return int(np.count_nonzero(unlinked)) + int(uncounted.size)

    def _entry_slots(self, first: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Entry numbers ``first`` .. ``end - 1`` and the slot of each."""
        entries = np.frombuffer(
            self._mm, _ENTRY_DTYPE, end - first, self._entries_pos + first * ENTRY_SIZE
        )
        numbers = np.arange(first, end, dtype=np.int64)
        return numbers, entries["key_hash"].astype(np.int64) % self.hash_slot_num

    def unchained_offsets(self) -> np.ndarray:
        """Commit-log offsets of the newest ``TAIL_ENTRIES`` entries that no chain reaches.

        Walks the chains from their slots as ``select_phy_offsets`` does, as far back as
        the tail. After ``relink_tail`` a process that was killed leaves none; a link
        damaged on disk cuts off the older part of its chain, whose records must be
        indexed again.
        """
        count = self._index_count
        first = max(1, count - TAIL_ENTRIES)
        if count <= first:
            return np.empty(0, dtype=np.int64)
        entries = np.frombuffer(
            self._mm, _ENTRY_DTYPE, count - first, self._entries_pos + first * ENTRY_SIZE
        )
        previous = entries["prev_index"].astype(np.int64)
        unwritten = entries["time_diff"] < 0  # where select_phy_offsets stops
        reached = np.zeros(count - first, dtype=bool)
        heads = np.frombuffer(self._mm, _SLOT_DTYPE, self.hash_slot_num, HEADER_SIZE)
        frontier = heads[(heads >= first) & (heads < count)].astype(np.int64)
        while frontier.size:
            frontier = frontier[~unwritten[frontier - first]]
            reached[frontier - first] = True
            older = previous[frontier - first]
            # Links always point to older entries; anything else ends the chain.
            older = older[(older >= first) & (older < frontier)]
            frontier = older[~reached[older - first]]
        return entries["phy_offset"][~reached].astype(np.int64)

    # -- reading -------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self) -> Iterator[mmap.mmap | None]:
        """The mapping, held open until the block ends (None once the file is closed).

        A ``close`` meanwhile leaves it mapped for the block; the last reader unmaps it.
        """
        with self._state_lock:
            if self._closed:
                mm = None
            else:
                self._readers += 1
                mm = self._mm
        if mm is None:
            yield None
            return
        try:
            yield mm
        finally:
            with self._state_lock:
                self._readers -= 1
                if self._closed and self._readers == 0:
                    self._mm.close()

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """Whether [begin_ms, end_ms] overlaps the file's time range (never when empty)."""
        if self._index_count <= 1:
            return False
        return begin_ms <= self._end_timestamp and end_ms >= self._begin_timestamp

    def select_phy_offsets(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Commit-log offsets indexed under ``key`` in [begin_ms, end_ms], newest first.

        Only the 32-bit key hash is stored, so keys whose hashes are equal are
        indistinguishable here: the result may hold offsets of messages with other
        keys, and the caller must check the key in each message it reads.

        Times are kept with one-second resolution, so an entry stands for the
        whole second it was stored in: it matches when that second overlaps
        [begin_ms, end_ms]. A query never misses a message in range, and may
        return one stored up to a second outside it.
        """
        if max_num <= 0:
            return []
        with self.reading() as mm:
            if mm is None:
                return []
            key_hash = index_key_hash(key)
            slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * SLOT_SIZE
            (current,) = _SLOT.unpack_from(mm, slot_pos)
            limit = self._index_count
            base = self._begin_timestamp
            result: list[int] = []
            if current <= INVALID_INDEX or current >= limit:
                return result
            while True:
                entry_hash, phy_offset, time_diff, prev = _ENTRY.unpack_from(
                    mm, self._entries_pos + current * ENTRY_SIZE
                )
                if time_diff < 0:
                    break  # never written by put_key: the chain is damaged from here
                second = base + time_diff * 1000
                if entry_hash == key_hash and begin_ms < second + 1000 and second <= end_ms:
                    result.append(phy_offset)
                    if len(result) >= max_num:
                        break
                # Links always point to older entries; anything else would loop.
                if prev <= INVALID_INDEX or prev >= current:
                    break
                current = prev
            return result

    def contains(self, key: str, phy_offset: int) -> bool:
        """Whether an entry with ``key``'s hash points at ``phy_offset``.

        Used to skip replayed records; it stops at the first older offset because
        entries are appended in offset order.
        """
        with self.reading() as mm:
            if mm is None:
                return False
            key_hash = index_key_hash(key)
            slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * SLOT_SIZE
            (current,) = _SLOT.unpack_from(mm, slot_pos)
            if current <= INVALID_INDEX or current >= self._index_count:
                return False
            while True:
                entry_hash, entry_offset, _, prev = _ENTRY.unpack_from(
                    mm, self._entries_pos + current * ENTRY_SIZE
                )
                if entry_offset < phy_offset:
                    return False
                if entry_hash == key_hash and entry_offset == phy_offset:
                    return True
                if prev <= INVALID_INDEX or prev >= current:
                    return False
                current = prev

    # -- lifecycle -----------------------------------------------------------

    def flush(self) -> None:
        """Write dirty pages of the mapping to disk (msync, which also syncs the data)."""
        with self.reading() as mm:
            if mm is not None:
                mm.flush()

    def close(self) -> None:
        """Flush and unmap; safe to call twice."""
        self._shut(flush=True)

    def destroy(self) -> None:
        """Unmap without flushing and delete the file."""
        self._shut(flush=False)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        else:
            fsync_directory(os.path.dirname(os.path.abspath(self.path)))

    def _shut(self, *, flush: bool) -> None:
        with self._state_lock:
            if self._closed:
                return
            if flush:
                self._mm.flush()
            self._closed = True
            # With queries still running, the last of them unmaps as its reading() ends.
            if self._readers == 0:
                self._mm.close()

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.path!r}, entries={self._index_count - 1}, "
            f"time=[{self._begin_timestamp}, {self._end_timestamp}], "
            f"offsets=[{self._begin_phy_offset}, {self._end_phy_offset}])"
        )
