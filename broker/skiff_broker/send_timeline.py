"""Where a SendMessage call's time goes inside the broker: one stamp per stage.

Off unless the broker starts with ``SKIFF_SEND_TIMELINE`` naming a file; then every
SendMessage call that is answered appends one record to it: ``len(FIELDS)`` signed 64-bit
integers (native byte order): a ``time.perf_counter_ns`` stamp per stage, the stages in
order, then the event-loop thread's CPU clock (``time.thread_time_ns``) when the store
append of the call's batch began and ended (the append's CPU, apart from its wall time).
``bench/send_timeline.py`` reads the file and prints each stage's share.

Invariants:
- Off, the hot path pays one test of a module constant (``ON``) per stage and nothing
  more: no stamps, no lists, no context variable.
- On, a stamp is taken where the stage ends, on the event loop's thread; a call that ends
  without an answer (reset, failed before its handler) writes no record, so every record
  holds every stage. Records are written in batches of ``BATCH`` (the last batch may be
  lost when the broker is killed; a benchmark reads the file after enough calls).
"""

from __future__ import annotations

import contextvars
import os
import time
from array import array

ENV = "SKIFF_SEND_TIMELINE"
STAGES = (
    "bytes_in",  # the loop handed the protocol the (decrypted) bytes that completed the request
    "decoded",  # the request's HTTP/2 frames and gRPC message are whole; its task is created
    "running",  # the call's task runs its first step
    "checked",  # interceptors, protobuf decoding, door checks and conversion done: at the store
    "appending",  # the store append of the call's batch starts
    "stored",  # the append (and under SYNC_FLUSH the flush) returned
    "answered",  # the response's frames are queued on the connection
    "written",  # the connection's output was handed to the transport
)
FIELDS = (*STAGES, "append_cpu_begin", "append_cpu_end")
BYTES_IN, DECODED, RUNNING, CHECKED, APPENDING, STORED, ANSWERED, WRITTEN = range(len(STAGES))
APPEND_CPU_BEGIN, APPEND_CPU_END = len(STAGES), len(STAGES) + 1
BATCH = 64
SEND_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"

_path = os.environ.get(ENV, "")
ON = bool(_path)
now = time.perf_counter_ns
cpu_now = time.thread_time_ns

Stamps = list[int]
# The stamps of the SendMessage call whose task is running (set only when ON).
_current: contextvars.ContextVar[Stamps | None] = contextvars.ContextVar(
    "send_timeline", default=None
)
_pending = array("q")


def start(bytes_in: int) -> Stamps:
    """A new call's stamps: its bytes' arrival and now (decoded)."""
    stamps = [0] * len(FIELDS)
    stamps[BYTES_IN] = bytes_in
    stamps[DECODED] = now()
    return stamps


def enter(stamps: Stamps) -> None:
    """The call's task runs: later stages find its stamps through ``current``."""
    stamps[RUNNING] = now()
    _current.set(stamps)


def current() -> Stamps | None:
    return _current.get()


def stamp(stage: int) -> None:
    """Stamp ``stage`` for the call whose task is running, if it is timed."""
    stamps = _current.get()
    if stamps is not None:
        stamps[stage] = now()


def stamp_append(timed: list[Stamps], stage: int) -> None:
    """Stamp APPENDING or STORED, and the loop thread's CPU clock, for a batch's calls."""
    # The CPU clock read inside the wall clock's span: the CPU never exceeds the wall time.
    if stage == APPENDING:
        at, cpu, field = now(), cpu_now(), APPEND_CPU_BEGIN
    else:
        cpu = cpu_now()
        at, field = now(), APPEND_CPU_END
    for stamps in timed:
        stamps[stage] = at
        stamps[field] = cpu


def finish(stamps: Stamps, written: int) -> None:
    stamps[WRITTEN] = written
    if 0 in stamps:
        return  # a stage was skipped (an answer before the store): not a send's full path
    _pending.extend(stamps)
    if len(_pending) >= BATCH * len(FIELDS):
        flush()


def flush() -> None:
    if not _pending:
        return
    with open(_path, "ab") as out:
        _pending.tofile(out)
    del _pending[:]


def read(path: str) -> list[tuple[int, ...]]:
    """The records in ``path``, each a tuple in ``FIELDS`` order."""
    values = array("q")
    with open(path, "rb") as f:
        values.frombytes(f.read())
    width = len(FIELDS)
    usable = len(values) - len(values) % width
    return [tuple(values[i : i + width]) for i in range(0, usable, width)]
