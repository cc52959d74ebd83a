"""The index files of a store: key look-ups over every file, rolling, expiry and recovery.

Files live in one directory and are named by their creation time
(``yyyyMMddHHmmssSSS``), so name order is age order. Only the newest file is
written; older ones are full and only read.

A write is acknowledged only if its keys can be indexed: before a batch is
appended, ``reserve`` makes sure the newest file's free entries plus reserved
spare files (``spare-N.reserved``, blocks allocated, renamed into a new file
when the newest fills up) hold every key appended but not yet indexed, and the
batch's own. So the dispatcher never needs disk space nobody set aside for it.
Spares a crash left are adopted on load (recovery may index acknowledged
records again); a clean close deletes them.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import itertools
import logging
import os
import re
import threading
from collections.abc import Iterable, Sequence

import numpy as np

from .dispatch_request import DispatchRequest, QueueRun
from .hashing import index_key_hashes
from .index_file import IndexFile, index_file_size
from .mapped_file import RESERVED_SUFFIX, reserve_file

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"\d{17}")
# Keys written to a file together as arrays: fewer cost more that way than one by one.
_ARRAY_MIN_KEYS = 24


def _index_key(topic: str, key: str) -> str:
    """What a key is indexed and looked up under (RocketMQ's ``topic#key``)."""
    return f"{topic}#{key}"


def _record_index_keys(topic: str, keys: Iterable[str]) -> list[str]:
    """The index keys of one record: each non-empty key once, in order."""
    if isinstance(keys, str):
        # A str is iterable too, and would index every character.
        raise TypeError("keys must be a collection of keys, not one string")
    if isinstance(keys, list | tuple) and len(keys) == 1:
        # The usual record: only its message ID is indexed.
        return [_index_key(topic, keys[0])] if keys[0] else []
    return list(dict.fromkeys(_index_key(topic, key) for key in keys if key))


_ONE_MS = datetime.timedelta(milliseconds=1)


def _format_name(moment: datetime.datetime) -> str:
    return moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


def _parse_name(name: str) -> datetime.datetime | None:
    try:
        moment = datetime.datetime.strptime(name[:14], "%Y%m%d%H%M%S")
    except ValueError:
        return None
    return moment.replace(microsecond=int(name[14:]) * 1000)


class IndexService:
    """Index files of one directory, oldest first.

    Writers (``load``, ``build_index``, ``build_run``, ``truncate``) are meant to run
    on one thread, the dispatcher; ``delete_expired`` may run on another (it never
    touches the newest file); ``query`` may run on any number of threads.
    """

    def __init__(
        self, index_dir: str, hash_slot_num: int = 5_000_000, index_num: int = 20_000_000
    ) -> None:
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        # Guards the list itself; files are read outside it (see IndexFile).
        self._lock = threading.Lock()
        self._files: list[IndexFile] = []
        # Reserved files not yet taken by a new index file (under _lock), as the
        # paths reserve_file was given.
        self._spares: list[str] = []
        self._spare_numbers = itertools.count()
        # Keys of appended batches not yet indexed: (commit-log offset of the
        # batch's last record with keys, keys). Only the appender touches them.
        self._promised: collections.deque[tuple[int, int]] = collections.deque()
        self._promised_keys = 0
        # Commit-log offset of the newest record build_index is done with.
        self._built_through = -1
        # Offsets of records below the index's end whose entries no chain reaches (found
        # by load): re-dispatch indexes them again instead of skipping them as replayed.
        self._rebuild: set[int] = set()
        # The lowest of them, where re-dispatch must start (None: nothing to rebuild).
        self.rebuild_from: int | None = None

    @property
    def files(self) -> list[IndexFile]:
        """A copy of the file list, oldest first."""
        with self._lock:
            return list(self._files)

    @property
    def last_timestamp(self) -> int:
        """Store time of the newest indexed record (0 without files)."""
        with self._lock:
            return self._files[-1].end_timestamp if self._files else 0

    # -- recovery ------------------------------------------------------------

    def load(self, last_exit_ok: bool, checkpoint_index_timestamp_ms: int) -> None:
        """Open the directory's files.

        After a crash, files that end after the checkpoint may hold entries that
        were never flushed, or entries of records the store is about to truncate
        and re-dispatch; they are deleted. Every newer file goes with the first
        such file, so that the newest remaining file still tells how far the
        index is complete. Whatever the last exit was, that file's entries a kill
        counted but left out of their hash chains (see ``IndexFile.relink_tail``) are
        linked again, since the records it says it holds are not indexed again; records
        of entries that still no chain reaches are indexed again by re-dispatch, from
        ``rebuild_from`` on.
        """
        with self._lock:
            if self._files:
                raise RuntimeError("IndexService.load() must run once, before any other use")
        names: list[str] = []
        if os.path.isdir(self.index_dir):
            for name in os.listdir(self.index_dir):
                if _NAME_RE.fullmatch(name):
                    names.append(name)
                elif name.endswith(".tmp") and _NAME_RE.fullmatch(name[:-4]):
                    # A file whose creation a crash interrupted; it was never used.
                    os.unlink(os.path.join(self.index_dir, name))
                elif name.endswith(RESERVED_SUFFIX + ".tmp"):
                    os.unlink(os.path.join(self.index_dir, name))
                elif name.endswith(RESERVED_SUFFIX):
                    self._adopt_spare(os.path.join(self.index_dir, name))
        names.sort()

        loaded: list[IndexFile] = []
        dropping = False
        try:
            for name in names:
                path = os.path.join(self.index_dir, name)
                f = IndexFile(path, self.hash_slot_num, self.index_num)
                if not last_exit_ok and (
                    dropping or f.end_timestamp > checkpoint_index_timestamp_ms
                ):
                    dropping = True
                    f.destroy()
                    continue
                loaded.append(f)
        except BaseException:
            for f in loaded:
                f.close()
            raise
        if loaded:
            self._mend_newest(loaded[-1])
        with self._lock:
            self._files = loaded

    def _mend_newest(self, newest: IndexFile) -> None:
        """Make every entry of the newest file findable, whatever the last exit was: a
        kill between header and slots (this run's or one that a later start missed) is
        relinked; records of entries still cut off are indexed again when re-dispatched.
        """
        relinked = newest.relink_tail()
        if relinked:
            log.warning(
                "index file %s: %d entries a crash had left out of their hash chains are "
                "findable again",
                newest.path,
                relinked,
            )
        unchained = newest.unchained_offsets()
        if unchained.size:
            self._rebuild = set(unchained.tolist())
            self.rebuild_from = int(unchained.min())
            log.warning(
                "index file %s: %d entries are cut off from their hash chains (a damaged "
                "link); their records, from commit-log offset %d, are indexed again",
                newest.path,
                unchained.size,
                self.rebuild_from,
            )

    def end_rebuild(self) -> None:
        """Re-dispatch met every record it could (the rest retention deleted): records
        below the index's end are skipped as replayed again from now on."""
        self._rebuild = set()
        self.rebuild_from = None

    def _adopt_spare(self, reserved_path: str) -> None:
        """Keep a spare a crash left: records acknowledged before it may need it
        when recovery dispatches them again. One of other settings is dropped."""
        spare = reserved_path.removesuffix(RESERVED_SUFFIX)
        number = spare.rpartition("spare-")[2]
        size = index_file_size(self.hash_slot_num, self.index_num)
        if not number.isdigit() or os.stat(reserved_path).st_size != size:
            os.unlink(reserved_path)
            return
        with self._lock:
            self._spares.append(spare)
        self._spare_numbers = itertools.count(max(int(number) + 1, next(self._spare_numbers)))

    def truncate(self, phy_offset: int) -> None:
        """Delete files that index records past ``phy_offset`` (a truncated commit log).

        Whole files go, including their entries below ``phy_offset``; afterwards
        the index is complete up to ``files[-1].end_phy_offset`` (or empty), and
        records from there on must be dispatched again to restore it.
        """
        with self._lock:
            keep = len(self._files)
            for i, f in enumerate(self._files):
                if f.end_phy_offset >= phy_offset:  # a record starting at the cut is gone too
                    keep = i
                    break
            doomed = self._files[keep:]
            del self._files[keep:]
        for f in doomed:
            f.destroy()

    # -- writing -------------------------------------------------------------

    def build_run(self, requests: Sequence[DispatchRequest]) -> None:
        """Index a dispatcher run's records, in log order: the same entries as
        :meth:`build_index` for each record in turn, written together.

        Records the index already covers (a replay) go through ``build_index`` one by
        one. The others' keys, once there are a few dozen, are hashed and written as
        arrays: a fraction of the cost of a key at a time.
        """
        if len(requests) < _ARRAY_MIN_KEYS:
            # Too few keys to gain (runs of one record are the usual ones at low rates).
            for r in requests:
                self.build_index(r.topic, r.physical_offset, r.store_timestamp, r.keys)
            return
        with self._lock:
            current = self._files[-1] if self._files else None
        covered = current.end_phy_offset if current is not None else -1
        first_new = 0
        while first_new < len(requests) and requests[first_new].physical_offset <= covered:
            first_new += 1
        for r in requests[:first_new]:
            self.build_index(r.topic, r.physical_offset, r.store_timestamp, r.keys)
        new = requests[first_new:]
        if all(len(r.keys) == 1 and r.keys[0] for r in new):
            # The usual run: each record is indexed under its message ID alone.
            keys = [_index_key(r.topic, r.keys[0]) for r in new]
            offsets = [r.physical_offset for r in new]
            stamps = [r.store_timestamp for r in new]
        else:
            keys, offsets, stamps = [], [], []
            for r in new:
                record_keys = _record_index_keys(r.topic, r.keys)
                keys += record_keys
                offsets += [r.physical_offset] * len(record_keys)
                stamps += [r.store_timestamp] * len(record_keys)
        self._put_keys(keys, offsets, stamps)
        if len(requests) > first_new:
            # Only now: until its keys are in, the records' promise still holds space.
            self._built_through = requests[-1].physical_offset

    def build_id_run(self, run: QueueRun) -> None:
        """``build_run`` for a dispatched run (each record indexed under its message ID
        alone), without a request a record."""
        offsets = run.physical_offsets
        with self._lock:
            current = self._files[-1] if self._files else None
        covered = current.end_phy_offset if current is not None else -1
        if len(offsets) < _ARRAY_MIN_KEYS or offsets[0] <= covered:
            # Short, or (partly) indexed already: the record-by-record rules decide.
            self.build_run(run.requests())
            return
        # _index_key of each, in C: one string addition a key, no call of ours.
        keys = list(map(_index_key(run.topic, "").__add__, run.message_ids))
        self._put_keys(keys, offsets, [run.store_timestamp] * len(keys))
        # Only now: until its keys are in, the records' promise still holds space.
        self._built_through = offsets[-1]

    def _put_keys(self, keys: list[str], offsets: list[int], stamps: list[int]) -> None:
        """Entries for ``keys`` (of records at ``offsets``, stored at ``stamps``), in order,
        rolling to a new file whenever the newest is full."""
        with self._lock:
            current = self._files[-1] if self._files else None
        if len(keys) < _ARRAY_MIN_KEYS:
            for key, offset, stamp in zip(keys, offsets, stamps, strict=True):
                current = self._put_key(current, key, offset, stamp)
            return
        hashes = index_key_hashes(keys)
        offset_array = np.array(offsets, dtype=np.int64)
        stamp_array = np.array(stamps, dtype=np.int64)
        done = 0
        while done < len(keys):
            if current is None:
                current = self._new_file(None)
            put = current.put_keys(hashes[done:], offset_array[done:], stamp_array[done:])
            if put == 0 and current.index_count <= 1:
                raise RuntimeError(f"a new index file {current.path} refused its first key")
            done += put
            if done < len(keys):
                current.flush()
                current = self._new_file(current)

    def _put_key(self, current: IndexFile | None, key: str, offset: int, stamp: int) -> IndexFile:
        """Put one key into ``current``, or a new file if there is none or it is full;
        returns the file the key went into."""
        if current is None:
            current = self._new_file(None)
        if not current.put_key(key, offset, stamp):
            # The old file is final from now on; make it durable before moving on.
            current.flush()
            current = self._new_file(current)
            if not current.put_key(key, offset, stamp):
                raise RuntimeError(f"a new index file {current.path} refused its first key")
        return current

    def build_index(
        self,
        topic: str,
        phy_offset: int,
        store_timestamp_ms: int,
        keys: Iterable[str],
    ) -> None:
        """Index one record under ``topic#key`` for each of its non-empty keys.

        Replaying records is harmless: offsets below the newest indexed one are
        skipped, and keys of the newest record itself are only added if missing
        (a record may have been cut short by a crash or split over two files).
        """
        index_keys = _record_index_keys(topic, keys)
        if not index_keys:
            self._built_through = phy_offset
            return
        with self._lock:
            current = self._files[-1] if self._files else None
        if current is not None:
            rebuilt = phy_offset in self._rebuild
            if phy_offset < current.end_phy_offset and not rebuilt:
                self._built_through = max(self._built_through, phy_offset)
                return
            if rebuilt or (phy_offset == current.end_phy_offset and current.index_count > 1):
                index_keys = [k for k in index_keys if not self._indexed(k, phy_offset)]
            self._rebuild.discard(phy_offset)

        for index_key in index_keys:
            current = self._put_key(current, index_key, phy_offset, store_timestamp_ms)
        # Only now: until its keys are in, the record's promise still holds space.
        self._built_through = phy_offset

    def _indexed(self, index_key: str, phy_offset: int) -> bool:
        # Only files that end at or after the offset can hold it: the newest one,
        # and older ones if the record was split over files when one filled up.
        with self._lock:
            candidates = self._files[::-1]
        for f in candidates:
            if f.end_phy_offset < phy_offset:
                return False
            if f.contains(index_key, phy_offset):
                return True
        return False

    def _new_file(self, previous: IndexFile | None) -> IndexFile:
        os.makedirs(self.index_dir, exist_ok=True)
        path = os.path.join(self.index_dir, self._next_name())
        with self._lock:
            spare = self._spares.pop(0) if self._spares else ""
        if previous is None:
            f = IndexFile(path, self.hash_slot_num, self.index_num, reserved=spare)
        else:
            f = IndexFile(
                path,
                self.hash_slot_num,
                self.index_num,
                begin_timestamp=previous.end_timestamp,
                begin_phy_offset=previous.end_phy_offset,
                reserved=spare,
            )
        with self._lock:
            self._files.append(f)
        return f

    # -- allocation ----------------------------------------------------------

    def reserve(self, keys: int) -> None:
        """Make sure ``keys`` more keys can be indexed after every key promised so far.

        Call before appending a batch with ``keys`` keys (one appender at a time),
        then ``promise`` once it is appended. Raises DiskFullError when a spare
        file is needed and cannot be allocated: the batch must then be refused.
        """
        promised = self._promised
        built = self._built_through
        while promised and promised[0][0] <= built:
            self._promised_keys -= promised.popleft()[1]
        # The newest file's room first, then the spares: if the dispatcher rolls
        # over between the two reads, this undercounts (and reserves), never the
        # other way round.
        with self._lock:
            current = self._files[-1] if self._files else None
        room = self.index_num - current.index_count if current is not None else 0
        with self._lock:
            spares = len(self._spares)
        per_file = self.index_num - 1
        available = room + spares * per_file
        needed = self._promised_keys + keys
        while available < needed:
            os.makedirs(self.index_dir, exist_ok=True)
            spare = os.path.join(self.index_dir, f"spare-{next(self._spare_numbers)}")
            reserve_file(spare, index_file_size(self.hash_slot_num, self.index_num), "index file")
            with self._lock:
                self._spares.append(spare)
            available += per_file

    def promise(self, last_phy_offset: int, keys: int) -> None:
        """A batch with ``keys`` keys, the last at ``last_phy_offset``, is in the log."""
        if keys:
            self._promised.append((last_phy_offset, keys))
            self._promised_keys += keys

    def _next_name(self) -> str:
        """The current local time as a name, moved on until it is unused and newest.

        Name order must stay age order even if the clock steps back (DST, NTP).
        """
        moment = datetime.datetime.now()
        moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
        with self._lock:
            newest = os.path.basename(self._files[-1].path) if self._files else None
        newest_moment = _parse_name(newest) if newest is not None else None
        if newest_moment is not None and moment <= newest_moment:
            moment = newest_moment + _ONE_MS
        while True:
            path = os.path.join(self.index_dir, _format_name(moment))
            if not os.path.exists(path) and not os.path.exists(path + ".tmp"):
                return _format_name(moment)
            moment += _ONE_MS

    # -- reading -------------------------------------------------------------

    def query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Up to ``max_num`` commit-log offsets for ``key`` in ``topic``, newest first.

        As with :meth:`IndexFile.select_phy_offsets`, offsets of other keys with the
        same hash may be included; the caller checks the key in each message.
        """
        if max_num <= 0 or not key:
            return []
        index_key = _index_key(topic, key)
        with self._lock:
            snapshot = self._files[::-1]
        result: list[int] = []
        seen: set[int] = set()
        for f in snapshot:
            if not f.is_time_matched(begin_ms, end_ms):
                continue
            for offset in f.select_phy_offsets(index_key, max_num - len(result), begin_ms, end_ms):
                # Files written by other brokers may index a record twice.
                if offset not in seen:
                    seen.add(offset)
                    result.append(offset)
            if len(result) >= max_num:
                break
        return result

    # -- maintenance ---------------------------------------------------------

    def delete_expired(self, min_phy_offset: int) -> int:
        """Delete the oldest files that only index records below ``min_phy_offset``.

        The newest file always stays: it is the one being written, and its end
        offset is what replayed records are compared with.
        """
        with self._lock:
            count = 0
            for f in self._files[:-1]:
                if f.end_phy_offset >= min_phy_offset:
                    break
                count += 1
            doomed = self._files[:count]
            del self._files[:count]
        for f in doomed:
            f.destroy()
        return count

    def flush(self) -> None:
        """Flush the newest file; older ones were flushed when they filled up."""
        with self._lock:
            newest = self._files[-1] if self._files else None
        if newest is not None:
            newest.flush()

    def close(self) -> None:
        with self._lock:
            files = self._files
            self._files = []
            spares, self._spares = self._spares, []
        for f in files:
            f.close()
        for spare in spares:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spare + RESERVED_SUFFIX)
