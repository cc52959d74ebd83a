"""The data directory's damage report: what recovery, dispatch and repair skipped or rebuilt.

Invariants: ``damage-report.json`` is an append-only history, replaced whole
and atomically on every change, so a crash leaves the old or the new history.
A skipped stretch is entered once (the same offset and length found again by
a later recovery is not repeated), and its bytes are copied to
``damaged/<offset>.bin`` before the entry naming the copy is written, so
nothing is skipped unseen.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from typing import Any

from .atomic_file import read_if_exists, write_atomically
from .mapped_file_queue import MappedFileQueue
from .recovery import Damage

REPORT_NAME = "damage-report.json"
DAMAGED_DIR = "damaged"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def copy_of(queue: MappedFileQueue, offset: int, length: int) -> bytes:
    """The commit log's bytes ``[offset, offset + length)``, across segments, as far as present."""
    parts = []
    at = offset
    end = offset + length
    while at < end:
        mf = queue.find(at)
        if mf is None:
            break
        position = at - mf.file_from_offset
        take = min(end - at, mf.file_size - position)
        parts.append(mf.mapping[position : position + take])
        at += take
    return b"".join(parts)


class DamageReport:
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, REPORT_NAME)
        self._lock = threading.Lock()

    def entries(self) -> list[dict[str, Any]]:
        raw = read_if_exists(self.path)
        if not raw:
            return []
        try:
            entries = json.loads(raw)
        except ValueError:
            return [{"kind": "unreadable-report", "reason": f"{self.path} is not JSON"}]
        return entries if isinstance(entries, list) else []

    def known_skips(self) -> set[tuple[int, int]]:
        return {(e["offset"], e["length"]) for e in self.entries() if e.get("kind") == "skipped"}

    def record_skips(self, damages: list[Damage], log: MappedFileQueue, found_by: str) -> int:
        """Copy each new stretch aside and enter it; returns how many were new."""
        with self._lock:
            entries = self.entries()
            known = {(e.get("offset"), e.get("length")) for e in entries}
            new = [d for d in damages if (d.offset, d.length) not in known]
            for d in new:
                copy = os.path.join(DAMAGED_DIR, f"{d.offset:020d}.bin")
                data = copy_of(log, d.offset, d.length)
                write_atomically(os.path.join(self.data_dir, copy), data)
                entries.append(
                    {
                        "kind": "skipped",
                        "at": _now(),
                        "found_by": found_by,
                        "offset": d.offset,
                        "length": d.length,
                        "records": d.records,
                        "reason": d.reason,
                        "copy": copy,
                    }
                )
            if new:
                self._write(entries)
            return len(new)

    def record_queue_repair(
        self, topic: str, queue_id: int, bad: int, rebuilt: int, reason: str, found_by: str
    ) -> None:
        with self._lock:
            entries = self.entries()
            entries.append(
                {
                    "kind": "consume-queue",
                    "at": _now(),
                    "found_by": found_by,
                    "topic": topic,
                    "queue_id": queue_id,
                    "bad_units": bad,
                    "rebuilt": rebuilt,
                    "holes": bad - rebuilt,
                    "reason": reason,
                }
            )
            self._write(entries)

    def _write(self, entries: list[dict[str, Any]]) -> None:
        write_atomically(self.path, json.dumps(entries, indent=1).encode())
