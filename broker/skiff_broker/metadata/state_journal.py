"""Changes to a state file since its last snapshot, each appended and synced on its own.

A table that changes one entry at a time (topics) would otherwise rewrite and fsync its
whole file per change, which grows with the table. The journal makes a change cost one
small append and one ``fdatasync``; the owner rewrites the snapshot now and then and
clears the journal.

Invariants:

* A record is one line, ``<crc32 of the JSON, 8 hex digits> <JSON object>\\n``; ``append``
  returns only once the line is on disk, so an acknowledged change survives a crash.
* Reading stops at a torn tail (the last line without its newline, or failing its CRC at
  the end of the file: an append a crash cut); a damaged line with good lines after it is
  skipped with a WARNING naming it, and the records after it are kept.
* Records must be idempotent against a snapshot that already holds them (whole values,
  not increments): after a crash between a snapshot's rewrite and ``clear``, the journal
  is replayed over the new snapshot and must change nothing.
* The file is the process's own: created 0600.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import zlib
from typing import Any

from ..store.mapped_file import fsync_directory

log = logging.getLogger(__name__)


class StateJournal:
    """The journal at ``path``; used under its owner's lock or this one's."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._records = 0

    def __len__(self) -> int:
        """Records in the journal (as read, plus those appended since)."""
        return self._records

    def read(self) -> list[dict[str, Any]]:
        """Every intact record, oldest first; an absent journal has none."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            self._records = 0
            return []
        lines = raw.split(b"\n")
        # Whatever follows the last newline is an append a crash cut short.
        complete, tail = lines[:-1], lines[-1]
        records: list[dict[str, Any]] = []
        damaged: list[int] = []
        for number, line in enumerate(complete, start=1):
            record = _decode(line)
            if record is None:
                damaged.append(number)
            else:
                records.append(record)
        # A bad last complete line is a torn append too (its newline was written first).
        if damaged and damaged[-1] == len(complete):
            damaged.pop()
        if damaged:
            log.warning(
                "%s: skipped %d damaged record(s) (line(s) %s); the records after them are "
                "kept, and the change each damaged line held is lost",
                self.path,
                len(damaged),
                ", ".join(str(n) for n in damaged[:10]),
            )
        if tail:
            log.info("%s: ignored an unfinished last record (%d bytes)", self.path, len(tail))
        self._records = len(records)
        return records

    def append(self, record: dict[str, Any]) -> None:
        """Add one record and wait until it is on disk."""
        data = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        line = b"%08x %s\n" % (zlib.crc32(data), data)
        with self._lock:
            fd = self._open()
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
            self._records += 1

    def clear(self) -> None:
        """Empty the journal (its records are in a snapshot that is on disk)."""
        with self._lock:
            fd = self._open()
            os.ftruncate(fd, 0)
            os.fsync(fd)
            self._records = 0

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            created = not os.path.exists(self.path)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            if created:
                # The new name must survive a crash as much as the records in it.
                fsync_directory(directory)
        return self._fd


def _decode(line: bytes) -> dict[str, Any] | None:
    """The record a line holds, or None if the line is damaged."""
    crc, _, data = line.partition(b" ")
    if len(crc) != 8:
        return None
    try:
        if int(crc, 16) != zlib.crc32(data):
            return None
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
