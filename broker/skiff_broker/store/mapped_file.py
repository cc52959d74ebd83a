"""One fixed-size segment file: pre-allocated, memory-mapped, with its write positions.

Reads go through the mapping. Large appends are written with pwrite, small ones
copied through the mapping; both land in the same page cache.

Positions only grow: ``flushed <= committed <= wrote``. Without a transient pool
the mapping is written directly, so ``committed == wrote``. With one, appends go
to a borrowed write buffer and ``commit()`` copies them into the file.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .errors import DiskFullError, SegmentWriteError, StoreCorruptError
from .private_files import FILE_MODE

if TYPE_CHECKING:
    from .transient_store_pool import TransientStorePool

PAGE_SIZE = mmap.PAGESIZE
_WARM_CHUNK = 1024 * 1024
_ZEROS = bytes(_WARM_CHUNK)
# Appends of a page or more are written with pwrite (see _write_file): the faults it
# spares are one a page. A smaller one costs less copied through the mapping than two
# system calls, and pwrite releases the interpreter lock in the middle of the append:
# single records written that way went at half the rate.
_PWRITE_MIN_BYTES = PAGE_SIZE
# A record's size and magic: what marks it as there for a reader.
_HEAD = 8


def fsync_directory(path: str) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def segment_name(offset: int) -> str:
    return f"{offset:020d}"


# Suffix of a file whose blocks are allocated for a segment a write has been promised.
RESERVED_SUFFIX = ".reserved"


def allocate_file(path: str, file_size: int, what: str) -> int:
    """Create ``path`` with every block allocated; returns its open descriptor.

    Real blocks, not a sparse file: running out of disk while writing through a
    mapping would be a SIGBUS instead of an error. ``what`` names the file in the
    DiskFullError raised when there is no room for it.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.posix_fallocate(fd, 0, file_size)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise DiskFullError(
                f"no space to allocate a {file_size}-byte {what} in {os.path.dirname(path)}: "
                "free disk space or give the data directory a larger disk"
            ) from exc
        raise
    return fd


def reserve_file(path: str, file_size: int, what: str) -> None:
    """Allocate the blocks of the file that will be created at ``path``, under a side name.

    A write that will need the file is acknowledged only after this succeeded:
    creating it later (``MappedFile.create`` or an index file) then takes these
    blocks and cannot run out of space. A crash leaves the side file in place:
    recovery may dispatch an acknowledged write again and need it.
    """
    reserved = path + RESERVED_SUFFIX
    tmp = reserved + ".tmp"
    fd = allocate_file(tmp, file_size, what)
    os.close(fd)
    os.rename(tmp, reserved)


def is_reserved(path: str, file_size: int) -> bool:
    """True if blocks of ``file_size`` are reserved for ``path``."""
    try:
        return os.stat(path + RESERVED_SUFFIX).st_size == file_size
    except FileNotFoundError:
        return False


def take_reserved(path: str, file_size: int, target: str) -> int:
    """Move the blocks reserved for ``path`` to ``target``; its descriptor, or -1 if none.

    A reserved file of another size (other settings before a restart) is dropped.
    """
    reserved = path + RESERVED_SUFFIX
    try:
        if os.stat(reserved).st_size != file_size:
            os.unlink(reserved)
            return -1
        os.rename(reserved, target)
    except FileNotFoundError:
        return -1
    return os.open(target, os.O_RDWR)


class MappedFile:
    """A segment named by the global offset of its first byte."""

    __slots__ = (
        "_committed",
        "_fd",
        "_mm",
        "_pool",
        "_write_buffer",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "path",
        "wrote_position",
    )

    def __init__(self, path: str, file_size: int) -> None:
        """Open an existing segment; use :meth:`create` for a new one."""
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(os.path.basename(path))
        self._fd = os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(self._fd).st_size
            if actual != file_size:
                raise StoreCorruptError(
                    f"segment {path} is {actual} bytes, expected {file_size}; "
                    "it was not written by a store with this segment size"
                )
            self._mm = mmap.mmap(self._fd, file_size)
        except BaseException:
            os.close(self._fd)
            raise
        self._write_buffer: mmap.mmap | None = None
        self._pool: TransientStorePool | None = None
        self.wrote_position = 0
        self._committed = 0
        self.flushed_position = 0

    @classmethod
    def create(cls, path: str, file_size: int, *, warm: bool = False) -> MappedFile:
        """Allocate every block of a new segment, optionally warm it, then publish it.

        The file is built under a temporary name and renamed, so a crash never
        leaves a half-allocated segment under a real name. Blocks are allocated
        with posix_fallocate (a sparse file could hit ENOSPC, as SIGBUS, in the
        middle of a write through the mapping), or taken from ``reserve_file``.
        """
        tmp = path + ".tmp"
        fd = take_reserved(path, file_size, tmp)
        if fd < 0:
            fd = allocate_file(tmp, file_size, "segment")
        try:
            if warm:
                _warm(fd, file_size)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.rename(tmp, path)
        fsync_directory(os.path.dirname(path))
        return cls(path, file_size)

    # -- positions ----------------------------------------------------------

    @property
    def committed_position(self) -> int:
        """Bytes that have reached the file.

        Without a write buffer appends land in the mapping itself (and callers
        may advance ``wrote_position`` directly), so this is ``wrote_position``.
        """
        return self.wrote_position if self._write_buffer is None else self._committed

    @committed_position.setter
    def committed_position(self, position: int) -> None:
        self._committed = position

    @property
    def read_position(self) -> int:
        """Bytes readable through the mapping (what has reached the file)."""
        return self.committed_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position == self.file_size

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def set_positions(self, position: int) -> None:
        """Used by recovery: everything up to ``position`` is on disk."""
        self.wrote_position = self.committed_position = self.flushed_position = position

    # -- writing ------------------------------------------------------------

    def attach_write_buffer(self, pool: TransientStorePool) -> None:
        buffer = pool.borrow()
        if buffer is not None:
            self._committed = self.wrote_position
            self._write_buffer = buffer
            self._pool = pool

    @property
    def write_target(self) -> mmap.mmap:
        """Where appends go: the pool's write buffer, or the mapping itself."""
        return self._mm if self._write_buffer is None else self._write_buffer

    def append(self, data: bytes | bytearray | memoryview, *, heads: Sequence[int] = ()) -> int:
        """Append raw bytes; returns their position in the file.

        ``heads`` are where records start in ``data``, first at 0, ascending. A record's
        first 8 bytes (its size and magic) land only once the rest of it has, and the
        records' heads land front to back, so a crash in the middle of an append leaves
        a whole prefix of the batch that a reader can find, and no record found after a
        zero head.

        Raises SegmentWriteError when the file cannot be written (an I/O error): then
        the batch is not in the log, though some of its bytes may be past its end.
        """
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise ValueError(f"{len(data)} bytes do not fit at {pos} in {self.path}")
        with memoryview(data) as view:
            if self._write_buffer is None and len(view) >= _PWRITE_MIN_BYTES:
                self._write_file(view, pos, heads)
            else:
                _copy_heads_last(self.write_target, view, pos, heads)
        self.wrote_position = end
        return pos

    def _write_file(self, view: memoryview, pos: int, heads: Sequence[int]) -> None:
        """Write ``view`` at ``pos`` with pwrite, in two passes when it holds records.

        pwrite, not a copy through the mapping: once a flush has cleaned a page, the
        mapping's next store to it takes a page fault, under the interpreter lock,
        which made a SYNC_FLUSH append several times dearer than the bytes it copies;
        pwrite copies in the kernel with the lock released. The page cache is the same,
        so the mapping sees the bytes at once.

        First everything but the heads (zeros where they go), then the batch again up to
        its last head: that pass writes the heads front to back over bodies already in
        place. The kernel copies a write front to back, so a crash inside either pass
        leaves what the invariant allows.
        """
        try:
            if not heads:
                _pwrite_all(self._fd, view, pos)
                return
            first = min(_HEAD, len(view))
            if len(heads) == 1:
                _pwrite_all(self._fd, view[first:], pos + first)
                _pwrite_all(self._fd, view[:first], pos)
                return
            staged = bytearray(view[first:])
            _zero_heads(staged, heads, first)
            _pwrite_all(self._fd, staged, pos + first)
            last = heads[-1]
            _pwrite_all(self._fd, view[: min(last + _HEAD, len(view))], pos)
        except OSError as exc:
            raise SegmentWriteError(
                f"writing {len(view)} bytes at {pos} of {self.path} failed: {exc}"
            ) from exc

    def commit(self, least_pages: int) -> int:
        """Copy buffered appends into the file; returns the committed position."""
        buffer = self._write_buffer
        if buffer is None:
            # Direct writes are committed as soon as they are written.
            return self.wrote_position
        wrote = self.wrote_position
        start = self._committed
        if not _enough_pages(start, wrote, least_pages, wrote == self.file_size):
            return start
        with memoryview(buffer) as view:
            os.pwrite(self._fd, view[start:wrote], start)
        self._committed = wrote
        if wrote == self.file_size:
            # Everything is in the file now; the buffer can serve another segment.
            self._write_buffer = None
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.give_back(buffer)
        return wrote

    def flush(self, least_pages: int) -> int:
        """fdatasync the committed bytes; returns the flushed position.

        fdatasync releases the GIL, so appenders keep going while the disk works.
        """
        target = self.read_position
        if not _enough_pages(self.flushed_position, target, least_pages, target == self.file_size):
            return self.flushed_position
        os.fdatasync(self._fd)
        self.flushed_position = target
        return target

    def zero_from(self, position: int, quiet_bytes: int) -> None:
        """Clear stale bytes after ``position`` so a later scan cannot read them as records.

        Stops after a run of ``quiet_bytes`` zeros: data is written contiguously,
        so no stale record lies beyond a zero run longer than any record.
        """
        quiet = 0
        pos = position
        while pos < self.file_size and quiet < quiet_bytes:
            end = min(self.file_size, (pos // _WARM_CHUNK + 1) * _WARM_CHUNK)
            if self._mm[pos:end] == _ZEROS[: end - pos]:
                quiet += end - pos
            else:
                self._mm[pos:end] = _ZEROS[: end - pos]
                quiet = 0
            pos = end
        if self._write_buffer is not None:
            self._write_buffer[position:] = bytes(self.file_size - position)

    # -- reading ------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        """Bytes from the file; never past what has been written into it."""
        end = min(position + size, self.read_position)
        return self._mm[position:end] if end > position else b""

    @property
    def mapping(self) -> mmap.mmap:
        """The whole mapping, for scans that bound themselves (recovery)."""
        return self._mm

    # -- lifecycle ----------------------------------------------------------

    @property
    def last_modified(self) -> float:
        return os.stat(self.path).st_mtime

    def close(self) -> None:
        if self._pool is not None and self._write_buffer is not None:
            self._pool.give_back(self._write_buffer)
        self._write_buffer = None
        self._pool = None
        if not self._mm.closed:
            self._mm.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __repr__(self) -> str:
        return (
            f"MappedFile({os.path.basename(self.path)}, wrote={self.wrote_position}, "
            f"committed={self.committed_position}, flushed={self.flushed_position})"
        )


# Heads zeroed with one numpy store from this many: fewer cost less one slice at a time.
_ARRAY_MIN_HEADS = 16


def _zero_heads(staged: bytearray, heads: Sequence[int], first: int) -> None:
    """Zero the head of every record but the first in ``staged``, a batch's bytes from
    byte ``first``; a last piece may be shorter than a head."""
    if len(heads) < _ARRAY_MIN_HEADS:
        for start in heads[1:]:
            staged[start - first : start - first + _HEAD] = _ZEROS[
                : min(_HEAD, len(staged) + first - start)
            ]
        return
    at = (np.asarray(heads[1:]) - first)[:, None] + np.arange(_HEAD)
    np.frombuffer(staged, dtype=np.uint8)[at[at < len(staged)]] = 0


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
    """pwrite every byte of ``data`` at ``pos`` (a write may take fewer than asked)."""
    with memoryview(data) as view:
        done = os.pwrite(fd, view, pos)
        while done < len(view):
            done += os.pwrite(fd, view[done:], pos + done)


def _copy_heads_last(target: mmap.mmap, view: memoryview, pos: int, heads: Sequence[int]) -> None:
    """Copy ``view`` into ``target`` at ``pos``: every record's head after all the rest,
    front to back (the order ``MappedFile.append`` promises)."""
    end = pos + len(view)
    if len(heads) == 1:
        # Most appends are one record: the loop below without building its pieces
        # (0.5 against 1.5 µs for a 1 KiB record).
        head = min(_HEAD, len(view))
        target[pos + head : end] = view[head:]
        target[pos : pos + head] = view[:head]
    elif heads:
        stops = [*heads[1:], len(view)]
        for start, stop in zip(heads, stops, strict=True):
            target[pos + start + _HEAD : pos + stop] = view[start + _HEAD : stop]
        for start, stop in zip(heads, stops, strict=True):
            head_end = min(start + _HEAD, stop)  # a last piece may be shorter
            target[pos + start : pos + head_end] = view[start:head_end]
    else:
        target[pos:end] = view


def _enough_pages(start: int, end: int, least_pages: int, full: bool) -> bool:
    if end <= start:
        return False
    if full or least_pages <= 0:
        return True
    return end // PAGE_SIZE - start // PAGE_SIZE >= least_pages


def _warm(fd: int, file_size: int) -> None:
    """Write zeros through the page cache and sync them.

    Afterwards every extent is written, so later appends are plain overwrites:
    no page faults that allocate blocks and no journal work in a later fdatasync.
    pwrite releases the GIL for each chunk (copying through a mapping would hold
    it), so warming in the background does not stall the event loop.
    """
    with memoryview(_ZEROS) as zeros:
        for pos in range(0, file_size, _WARM_CHUNK):
            os.pwrite(fd, zeros[: min(_WARM_CHUNK, file_size - pos)], pos)
    os.fdatasync(fd)
