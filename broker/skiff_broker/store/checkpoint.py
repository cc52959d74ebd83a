"""The ``checkpoint`` file: how far each part of the store is known to be on disk.

Timestamps are store timestamps of the newest record that the commit log,
the consume queues and the index had flushed. After a crash, recovery scans the
commit log from the segment holding records that old, so everything not known
to be flushed is checked again. The layout's first five fields are RocketMQ's.

Skiff adds, after its clean-stop offset, ``scan_start``: a commit-log offset where a
message record starts and below which the log, the consume queues and the index
were all flushed. A crash recovery scans from there instead of from a whole
segment. It is guarded by a magic and a CRC over every field before it, so a
checkpoint last written by RocketMQ or an older Skiff (which leave the bytes after
their own fields as they were) is never read as if it held a current start:
``scan_start`` is then -1 (unknown) and recovery scans as it always did.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib

from .private_files import FILE_MODE

_LAYOUT = struct.Struct(">qqqqqq")
# After _LAYOUT: magic, scan_start, CRC32 of everything before the CRC.
_SCAN_START = struct.Struct(">8sq")
_CRC = struct.Struct(">I")
_SCAN_START_MAGIC = b"SKIFFSS1"
FILE_SIZE = 4096


@dataclasses.dataclass(slots=True)
class Checkpoint:
    path: str
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    # End of the commit log at a clean stop; -1 while the store runs.
    clean_shutdown_offset: int = -1
    # Where a crash recovery may start scanning (see the module docstring); -1: unknown.
    scan_start: int = -1

    @classmethod
    def load(cls, path: str) -> Checkpoint:
        checkpoint = cls(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(_LAYOUT.size + _SCAN_START.size + _CRC.size)
        except FileNotFoundError:
            return checkpoint
        if len(raw) >= _LAYOUT.size:
            (
                checkpoint.physic_msg_timestamp,
                checkpoint.logics_msg_timestamp,
                checkpoint.index_msg_timestamp,
                checkpoint.master_flushed_offset,
                checkpoint.confirm_phy_offset,
                checkpoint.clean_shutdown_offset,
            ) = _LAYOUT.unpack_from(raw)
        checkpoint.scan_start = _trusted_scan_start(raw)
        return checkpoint

    def min_timestamp(self, *, include_index: bool) -> int:
        """The oldest of the flushed positions that recovery must start at or before."""
        stamps = [self.physic_msg_timestamp, self.logics_msg_timestamp]
        if include_index:
            stamps.append(self.index_msg_timestamp)
        return min(stamps)

    def flush(self) -> None:
        """Write the fields in place and make them durable (one page: never torn)."""
        data = _LAYOUT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
            self.clean_shutdown_offset,
        ) + _SCAN_START.pack(_SCAN_START_MAGIC, self.scan_start)
        data += _CRC.pack(zlib.crc32(data))
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            if os.fstat(fd).st_size < FILE_SIZE:
                os.posix_fallocate(fd, 0, FILE_SIZE)
            os.pwrite(fd, data, 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)


def _trusted_scan_start(raw: bytes) -> int:
    """``scan_start`` from a checkpoint's first bytes, or -1 unless this layout wrote them
    together with the fields before them (magic and CRC agree)."""
    end = _LAYOUT.size + _SCAN_START.size
    if len(raw) < end + _CRC.size:
        return -1
    magic, scan_start = _SCAN_START.unpack_from(raw, _LAYOUT.size)
    if magic != _SCAN_START_MAGIC or _CRC.unpack_from(raw, end)[0] != zlib.crc32(raw[:end]):
        return -1
    return scan_start
