"""How much of a call's request its client may send: room reserved, window granted in steps.

A message that fits the window HTTP/2 grants every stream unasked (65,535 octets) needs
nothing more. For a larger one, room for the whole message is reserved from the
connection's and the broker's budgets (``Stream.reserve``) once its length prefix is read,
and window is then granted as it arrives, at most ``READ_AHEAD`` octets ahead, never for
the whole announced message at once. A reservation that cannot be had waits: the client
is held back by flow control, and nothing of the message is buffered past its free window.

Invariants:
- A message's octets are held (``Stream.held``) until its handler takes it; then they and
  its reservation are given back (``taken``), and the client may send again.
- A message must arrive in full within the :class:`StallWatch`'s timeout of its first
  octet (a unary call: its request must end that long after its headers); otherwise
  ``on_stalled`` is called, and the call ends with its reservation and buffer given back.
  One timer per server watches every request in flight, not one per call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..http2 import frames as fr
from ..http2.connection import Stream
from .message_framing import PREFIX, MessageReader

# Window granted ahead of a large message's octets: enough to keep a client's data
# flowing over a link of some latency, little next to the message limits.
READ_AHEAD = 1 << 20


class StallWatch:
    """Requests in flight and when each must have arrived; one timer for all of them.

    Every request is given the same time, so the order they started in is the order they
    are due in: the oldest is checked first, and the timer is set for it alone."""

    __slots__ = ("_due", "_loop", "_timer", "timeout")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop = loop
        self.timeout = timeout
        self._due: dict[RequestWindow, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._due)

    def start(self, window: RequestWindow) -> None:
        due = self._due
        due.pop(window, None)
        at = self._loop.time() + self.timeout
        due[window] = at
        if self._timer is None:
            self._timer = self._loop.call_at(at, self._check)

    def stop(self, window: RequestWindow) -> None:
        self._due.pop(window, None)

    def _check(self) -> None:
        self._timer = None
        due = self._due
        now = self._loop.time()
        while due:
            window, at = next(iter(due.items()))
            if at > now:
                self._timer = self._loop.call_at(at, self._check)
                return
            del due[window]
            window._stalled()


class RequestWindow:
    """One call's request messages as they arrive, and the window its client gets."""

    __slots__ = ("_claim", "_on_stalled", "_stream", "_timed", "_wanted", "_watch", "reader")

    def __init__(
        self,
        stream: Stream,
        limit: int,
        watch: StallWatch,
        on_stalled: Callable[[], None],
    ) -> None:
        self.reader = MessageReader(limit)
        self._stream = stream
        self._watch = watch
        self._on_stalled = on_stalled
        self._timed = False
        # Octets reserved for the message being read; octets of a reservation that waits.
        self._claim = 0
        self._wanted = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes, int]]:
        """The (flags, message, its reservation) that ``data`` completes.

        Raises MessageTooLarge. Only a message begun before ``data`` can have needed a
        reservation, so at most the first one carries it."""
        messages = self.reader.feed(data)
        if not messages:
            return []
        claim, self._claim = self._claim, 0
        out = [(flags, message, 0) for flags, message in messages]
        if claim:
            out[0] = (*messages[0], claim)
        return out

    def arrived(self, complete: bool, *, began: bool = False) -> None:
        """After ``feed``: reserve and grant for the message being read. ``complete``: the
        call's request (unary) or message (streaming) is whole, so nothing is timed;
        ``began``: a message ended and the one now read began, so its time starts now."""
        if complete or began:
            self.stop()
        if not complete and not self._timed:
            self.start()
        length = self.reader.length
        if length < 0 or self._wanted:
            return
        framed = length + PREFIX.size
        if not self._claim and framed > fr.DEFAULT_WINDOW:
            if not self._stream.reserve(framed):
                self._wanted = framed
                return
            self._claim = framed
        if self._claim:
            self._open()

    def room_reserved(self) -> None:
        """The reservation that waited was made: the message may come."""
        if self._wanted:
            self._claim, self._wanted = self._wanted, 0
            self._open()

    def taken(self, octets: int, claim: int) -> None:
        """The handler took a message of ``octets`` (framed), reserved ``claim``."""
        stream = self._stream
        # Unreserved first: a release under the reservation would reopen the window.
        if claim:
            stream.unreserve(claim)
        stream.release(octets)

    def start(self) -> None:
        """The request's (or message's) time starts now."""
        self._timed = True
        self._watch.start(self)

    def stop(self) -> None:
        if self._timed:
            self._timed = False
            self._watch.stop(self)

    def _open(self) -> None:
        stream = self._stream
        ahead = min(self.reader.awaited, READ_AHEAD)
        if stream.recv_window < ahead >> 1:
            stream.grant(ahead - stream.recv_window)

    def _stalled(self) -> None:
        self._timed = False
        self._on_stalled()
