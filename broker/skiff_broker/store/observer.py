"""Hooks through which the store reports its appends and flushes.

The store knows nothing of how they are reported: telemetry (traces, metrics)
implements :class:`StoreObserver` elsewhere and is handed to ``MessageStore``.
The default, :data:`NULL_OBSERVER`, does nothing and allocates nothing per append.

Per append batch the store calls ``observer.append(topic, queue_id, count,
flush_type)`` (queue_id None when the batch spans queues), reads
``time.perf_counter()`` and, once the whole put is over (for SYNC_FLUSH that includes
waiting for the disk), calls exactly one of the scope's ``done(result, started)`` and
``failed(error, started)`` with that reading. The store times the put, not the scope,
so that an observer may hand out one stateless scope for many appends: a put observed
only for its latency then costs two calls and no object of its own. A scope's
``context`` is an opaque token the store hands to the group-commit service, so that
the flush that covers the batch can name the appenders it served.

A batch coalesced from several callers' calls is observed as each caller's own append:
each caller gets an :class:`AppendShare` from ``observer.share(first, count)``, made in
that caller's context when it joins the batch, and the store makes one
``observer.shared_append(topic, shares, messages, flush_type)`` call for the batch, whose
scope then serves as above (one group-commit waiter per share). What a share observes is
the observer's business (``telemetry/append_share.py``). Per flush the flush thread
reports one :class:`FlushReport`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from .mapped_file import PAGE_SIZE
from .message import Message

# The flush report keeps at most this many appenders' tokens: one becomes the
# flush's parent, the rest links. A group commit can serve thousands of waiters.
MAX_FLUSH_CONTEXTS = 32


class AppendScope:
    """One append batch under observation. This base does nothing.

    A scope may serve many appends at once (the store keeps no state in it): what one
    append needs to know of itself comes in the calls.
    """

    __slots__ = ()

    @property
    def context(self) -> Any:
        """Opaque token for the flush that covers this batch; None when there is nothing to tie."""
        return None

    def waiters(self) -> Sequence[Any]:
        """One token per caller waiting for the flush (several for a shared append)."""
        return (self.context,)

    def done(self, result: Any, started: float) -> None:
        """The put's outcome (a ``PutResult``); ``started`` is ``time.perf_counter()`` read
        just after the scope was handed out."""

    def failed(self, error: BaseException, started: float) -> None:
        """The put raised ``error``, which goes on to its caller."""


class AppendShare:
    """One caller's share of a shared append: ``count`` messages from position ``first``.
    This base is a caller nobody observes on its own; observers subclass it."""

    __slots__ = ("count", "first")

    def __init__(self, first: int, count: int) -> None:
        self.first = first
        self.count = count


@dataclasses.dataclass(slots=True)
class FlushReport:
    """One flush of the commit log, as the flush thread saw it."""

    flush_type: str
    # Wall-clock start (for the span) and a monotonic duration (for the histogram).
    started_unix_ns: int
    duration_ns: int
    flushed_bytes: int
    pages: int
    # Appenders whose SYNC_FLUSH wait this flush ended (0 for ASYNC_FLUSH).
    waiters: int
    # Tokens from some of those appenders' ``AppendScope.context``, first come first.
    contexts: Sequence[Any] = ()
    error: str = ""


class StoreObserver:
    """Receives the store's appends and flushes. This base ignores them."""

    def append(self, topic: str, queue_id: int | None, count: int, flush_type: str) -> AppendScope:
        return _NULL_SCOPE

    def share(self, first: int, count: int) -> AppendShare:
        """The current caller's share of a batch several callers' messages will make:
        ``count`` messages from position ``first``. Called in that caller's context."""
        return AppendShare(first, count)

    def shared_append(
        self,
        topic: str,
        shares: Sequence[AppendShare],
        messages: Sequence[Message],
        flush_type: str,
    ) -> AppendScope:
        """One append of ``messages`` made for several callers at once (coalesced calls),
        to be observed as each caller's own. Its ``waiters()`` name one token per share,
        in the shares' order."""
        return _UnobservedShare(len(shares))

    def flush_finished(self, report: FlushReport) -> None:
        """Called on the flush thread after each flush that moved data, or failed."""


class _UnobservedShare(AppendScope):
    """A shared append nobody observes: still one group-commit waiter per caller."""

    __slots__ = ("_callers",)

    def __init__(self, callers: int) -> None:
        self._callers = callers

    def waiters(self) -> Sequence[Any]:
        return (None,) * self._callers


_NULL_SCOPE = AppendScope()
NULL_OBSERVER = StoreObserver()


class FlushTimer:
    """Measures one flush for a :class:`FlushReport` (one per flush, so cheap enough)."""

    __slots__ = ("_ended_ns", "_started_ns", "_started_unix_ns", "before")

    def __init__(self, flushed_before: int) -> None:
        self.before = flushed_before
        self._started_unix_ns = time.time_ns()
        self._started_ns = time.perf_counter_ns()
        self._ended_ns = 0

    def stop(self) -> None:
        """The flush itself is over (what follows it is not part of its duration)."""
        if not self._ended_ns:
            self._ended_ns = time.perf_counter_ns()

    def report(
        self,
        flush_type: str,
        flushed_after: int,
        *,
        waiters: int = 0,
        contexts: Sequence[Any] = (),
        error: str = "",
    ) -> FlushReport:
        after = max(flushed_after, self.before)
        self.stop()
        return FlushReport(
            flush_type=flush_type,
            started_unix_ns=self._started_unix_ns,
            duration_ns=self._ended_ns - self._started_ns,
            flushed_bytes=after - self.before,
            pages=pages_between(self.before, after),
            waiters=waiters,
            contexts=contexts,
            error=error,
        )


def pages_between(start: int, end: int) -> int:
    """OS pages touched by the byte range [start, end)."""
    if end <= start:
        return 0
    return (end + PAGE_SIZE - 1) // PAGE_SIZE - start // PAGE_SIZE
