"""The ``checkpoint`` file: how far each part of the store is known to be on disk.

Timestamps are store timestamps of the newest record that the commit log,
the consume queues and the index had flushed. After a crash, recovery scans the
commit log from the segment holding records that old, so everything not known
to be flushed is checked again. The layout's first five fields are RocketMQ's.
"""

from __future__ import annotations

import dataclasses
import os
import struct

from .private_files import FILE_MODE

_LAYOUT = struct.Struct(">qqqqqq")
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

    @classmethod
    def load(cls, path: str) -> Checkpoint:
        checkpoint = cls(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(_LAYOUT.size)
        except FileNotFoundError:
            return checkpoint
        if len(raw) == _LAYOUT.size:
            (
                checkpoint.physic_msg_timestamp,
                checkpoint.logics_msg_timestamp,
                checkpoint.index_msg_timestamp,
                checkpoint.master_flushed_offset,
                checkpoint.confirm_phy_offset,
                checkpoint.clean_shutdown_offset,
            ) = _LAYOUT.unpack(raw)
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
        )
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            if os.fstat(fd).st_size < FILE_SIZE:
                os.posix_fallocate(fd, 0, FILE_SIZE)
            os.pwrite(fd, data, 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
