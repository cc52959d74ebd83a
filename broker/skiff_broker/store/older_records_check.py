"""The background check of the records a crash recovery's scan started after.

A crash recovery scans the commit log from ``Checkpoint.scan_start`` rather than
from the start of a segment (see :mod:`.recovery` and :mod:`.scan_start`); the
records between that segment's start and the scan start, which a full scan would
have checked, are checked here once the store serves.

Invariants:

- The background check walks the records in [verify_from, verify_below) with
  recovery's own per-record decision (``scan_segment``): what it finds is what a
  full recovery scan would have skipped, and it is reported the same way (one
  WARNING naming it, an entry and a copy in the damage report).
- It pauses after each chunk as long as the chunk took, so it holds the interpreter
  at most half the time while the broker serves.
- Readers never depend on it: every read checks the record it returns, CRC
  included, and leaves out one that fails, whether or not this check got there first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .mapped_file_queue import MappedFileQueue
from .recovery import Damage, describe, scan_segment
from .service_thread import ServiceThread

log = logging.getLogger(__name__)

# Bytes checked between pauses and looks at whether the store is stopping.
_CHUNK_BYTES = 4 * 1024 * 1024


# damages found, the store's queue (for copies of what was skipped)
DamageListener = Callable[[list[Damage]], None]


class OlderRecordsCheck(ServiceThread):
    """Checks the commit log's records in [verify_from, verify_below) once, in the background."""

    name = "older-records-check"

    def __init__(
        self,
        queue: MappedFileQueue,
        verify_from: int,
        verify_below: int,
        *,
        check_crc: bool,
        quiet_bytes: int,
        on_damage: DamageListener,
    ) -> None:
        super().__init__(interval=None)
        self._queue = queue
        self._from = verify_from
        self._below = verify_below
        self._check_crc = check_crc
        self._quiet_bytes = quiet_bytes
        self._on_damage = on_damage
        self.done = False
        self.damages: list[Damage] = []

    def start(self) -> None:
        super().start()
        self.wakeup()

    def step(self) -> None:
        if self.done:
            return
        log.info(
            "checking commit-log records %d..%d in the background (recovery started after them)",
            self._from,
            self._below,
        )
        damages = self._check()
        if damages is None:
            return  # stopping
        self.damages = damages
        self.done = True
        if damages:
            log.warning("background check of older records: %s", describe(damages))
            self._on_damage(damages)
        else:
            log.info("commit-log records %d..%d are sound", self._from, self._below)

    def _check(self) -> list[Damage] | None:
        damages: list[Damage] = []
        for mf in self._queue.files:
            base = mf.file_from_offset
            if base + mf.file_size <= self._from or base >= self._below:
                continue
            pos = max(0, self._from - base)
            stop = min(mf.file_size, self._below - base)
            while pos < stop:
                if self.stopped:
                    return None
                began = time.monotonic()
                try:
                    seg = scan_segment(
                        mf,
                        pos,
                        check_crc=self._check_crc,
                        quiet_bytes=self._quiet_bytes,
                        stop=min(stop, pos + _CHUNK_BYTES),
                    )
                except (ValueError, BufferError):
                    return damages  # retention deleted the segment meanwhile
                damages += seg.damages
                # Requests are served meanwhile (see the module docstring).
                self._stopped.wait(time.monotonic() - began)
                if seg.blank:
                    break
                if seg.end <= pos or (seg.end < min(stop, pos + _CHUNK_BYTES)):
                    # Nothing valid follows in this segment below the stop: one stretch.
                    reason = seg.problem or f"zero bytes at {base + seg.end} where a record belongs"
                    damages.append(Damage(base + seg.end, stop - seg.end, 1, reason))
                    break
                pos = seg.end
        return damages
