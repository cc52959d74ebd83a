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
- A message must arrive in full within ``timeout`` seconds of its first octet (a unary
  call: its request must end in that time); otherwise ``on_stalled`` is called, and the
  call ends with its reservation and buffer given back.
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


class RequestWindow:
    """One call's request messages as they arrive, and the window its client gets."""

    __slots__ = (
        "_claim",
        "_loop",
        "_on_stalled",
        "_stream",
        "_timeout",
        "_timer",
        "_wanted",
        "reader",
    )

    def __init__(
        self,
        stream: Stream,
        limit: int,
        loop: asyncio.AbstractEventLoop,
        timeout: float,
        on_stalled: Callable[[], None],
    ) -> None:
        self.reader = MessageReader(limit)
        self._stream = stream
        self._loop = loop
        self._timeout = timeout
        self._on_stalled = on_stalled
        self._timer: asyncio.TimerHandle | None = None
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
        if not complete and self._timer is None:
            self._timer = self._loop.call_later(self._timeout, self._stalled)
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

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _open(self) -> None:
        stream = self._stream
        ahead = min(self.reader.awaited, READ_AHEAD)
        if stream.recv_window < ahead >> 1:
            stream.grant(ahead - stream.recv_window)

    def _stalled(self) -> None:
        self._timer = None
        self._on_stalled()
