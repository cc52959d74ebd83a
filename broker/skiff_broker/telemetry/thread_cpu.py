"""CPU seconds used by each of the broker's threads, read when the metrics are collected.

A broker does its protocol work (TLS, HTTP/2, protobuf, the requests' handlers) and its
appends on one event loop, in the main thread: that thread's CPU rate nearing one core
per second is what says a broker is at its limit however many cores its node has, while
the dispatcher, flush and other store threads show what runs beside it.

Invariants:
- Nothing is counted on the hot path: each collection reads ``/proc/self/task/<tid>/stat``
  of the live threads (Linux; elsewhere there are no points).
- Each point is a role: ``event-loop`` for the main thread, a service thread's own name
  (``dispatcher``, ``async-flush``, ``group-commit``, ...) for the threads in
  ``SERVICE_THREADS``, and ``other`` for the rest (executors, exporters, libraries): the
  process's CPU less the named roles', so the points add up to the process's CPU.
- The counters never go down: a thread that ends or is replaced (a service started again)
  leaves what it had used at the last collection in its role's total (what it used after
  that counts as ``other``), and ``other`` never falls below what it showed last.
"""

from __future__ import annotations

import os
import threading
import time

EVENT_LOOP = "event-loop"
OTHER = "other"
# The broker's long-lived service threads (store/service_thread.ServiceThread names).
SERVICE_THREADS = frozenset(
    (
        "dispatcher",
        "async-flush",
        "commit",
        "logics-flush",
        "group-commit",
        "segment-allocator",
        "older-records-check",
        "retention",
        "persister",
        "delay-delivery",
        "transaction-checker",
    )
)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _thread_seconds(tid: int) -> float | None:
    """User plus system CPU seconds of thread ``tid``; None once it is gone."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return None
    # After the name: state is field 3, utime 14 and stime 15 (proc(5)).
    return (int(fields[11]) + int(fields[12])) / _TICKS


class ThreadCpu:
    """Per-role CPU totals; one instance per process's metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # collections may overlap (a scrape and an export)
        # Per role: seconds of its threads that ended; per live thread id: (role, seconds).
        self._ended: dict[str, float] = {}
        self._seen: dict[int, tuple[str, float]] = {}
        self._other = 0.0
        self.available = os.path.isdir("/proc/self/task")

    def read(self) -> dict[str, float]:
        """Each role's CPU seconds so far, ``other`` included."""
        if not self.available:
            return {}
        process = time.process_time()
        main = threading.main_thread()
        live: dict[int, str] = {}
        for thread in threading.enumerate():
            tid = thread.native_id
            if tid is None:
                continue
            if thread is main:
                live[tid] = EVENT_LOOP
            elif thread.name in SERVICE_THREADS:
                live[tid] = thread.name
        with self._lock:
            for tid, (role, seconds) in list(self._seen.items()):
                if live.get(tid) != role:  # ended, or the id reused by another thread
                    self._ended[role] = self._ended.get(role, 0.0) + seconds
                    del self._seen[tid]
            totals = dict(self._ended)
            for tid, role in live.items():
                _, before = self._seen.get(tid, (role, 0.0))
                # None: ending (Python still lists it, /proc no more): what it was seen at.
                seconds = max(_thread_seconds(tid) or 0.0, before)
                self._seen[tid] = (role, seconds)
                totals[role] = totals.get(role, 0.0) + seconds
            totals.setdefault(EVENT_LOOP, 0.0)
            self._other = max(self._other, process - sum(totals.values()))
            totals[OTHER] = self._other
        return totals
