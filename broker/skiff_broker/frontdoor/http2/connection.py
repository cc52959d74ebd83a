"""One HTTP/2 connection, server side: frames in, stream events out, frames to write.

The application (the gRPC layer) is told of each request's headers through
:meth:`Application.request` and attaches a :class:`StreamHandler` to the :class:`Stream`;
the stream then hands it the request's data, a reset, or room to write.

Invariants:
- Output is only appended to ``pending_output``; whoever owns the socket takes it with
  :meth:`ServerConnection.take_output` (``output_ready`` says when it went from empty to
  not). Nothing here blocks or touches a socket.
- DATA is never sent past the peer's windows (the stream's and the connection's); what
  does not fit waits on its stream, in order, and END_STREAM or trailers wait behind it.
- A stream's receive window only grows when the application grants it
  (:meth:`Stream.grant`), so what one stream buffers is the application's choice.
- Request octets handed to a handler are *held* until it says it took them
  (:meth:`Stream.release`), or its stream ends. The connection's window is given back as
  held octets are released (and at once for what is not held: padding, DATA of closed
  streams). It is opened past HTTP/2's own 65,535 only for room streams reserved
  (:meth:`Stream.reserve`) from the connection's ``buffer_budget`` and the process's
  :class:`~.receive_budget.ReceiveBudget`, and only as far as each such stream's window
  lets the peer fill it. The shared budget is charged with the larger of what is
  reserved and what the peer may have held past the 65,535 (held plus still open: a
  window once given cannot be taken back), so held octets never exceed 65,535 plus the
  connection's charge. A reservation that cannot be had waits (its stream hears
  ``room_reserved`` once it is made) rather than being held anyway.
- A protocol error ends the connection: GOAWAY with the error is queued, ``closed`` is
  set, every open stream is reset, and nothing more is read. A stream error resets that
  stream alone. The error is kept (``error``) without its traceback, so a connection
  that ended is freed as soon as it is dropped, and nothing the peer sent outlives it.
- A peer that makes the server work without making requests (resets of open streams,
  PINGs with no answer sent since the last one, SETTINGS, empty frames) spends a budget
  that refills with time; past it the connection ends with ENHANCE_YOUR_CALM. Header
  lists over the limit spend a budget of their own, smaller.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Protocol

from . import frames as fr
from .frames import ConnectionFault, ErrorCode
from .hpack import HeaderDecoder, HeaderListTooLarge, HpackError
from .receive_budget import ReceiveBudget

Headers = list[tuple[str, str]]


class StreamHandler(Protocol):
    """What the application does with one stream's events."""

    def data_received(self, data: bytes, end_stream: bool) -> None: ...

    def reset(self, code: int) -> None:
        """The stream ended without a response: the peer reset it, or the connection died."""

    def writable(self) -> None:
        """Everything queued on the stream was sent: more may be written."""

    def room_reserved(self) -> None:
        """A reservation that had to wait (``Stream.reserve`` returned False) was made."""


class Application(Protocol):
    def request(self, stream: Stream, headers: Headers, end_stream: bool) -> None:
        """A new stream's request headers; set ``stream.handler`` to hear of the rest."""

    def headers_too_large(self, stream: Stream) -> None:
        """A new stream whose headers were over the limit: answer it, or reset it."""


class Limits:
    """What one connection allows its peer (each advertised or enforced here)."""

    __slots__ = (
        "buffer_budget",
        "control_budget",
        "control_refill_per_s",
        "max_concurrent_streams",
        "max_frame_size",
        "max_header_block",
        "max_header_list_size",
        "oversized_header_budget",
        "oversized_header_refill_per_s",
    )

    def __init__(
        self,
        *,
        max_concurrent_streams: int = 1000,
        max_header_list_size: int = 16_384,
        max_frame_size: int = fr.DEFAULT_FRAME_SIZE,
        buffer_budget: int = 32 << 20,
        control_budget: int = 2_000,
        control_refill_per_s: float = 200.0,
        oversized_header_budget: int = 32,
        oversized_header_refill_per_s: float = 2.0,
    ) -> None:
        self.max_concurrent_streams = max_concurrent_streams
        self.max_header_list_size = max_header_list_size
        self.max_frame_size = max_frame_size
        # The most the connection's streams may reserve at once (see Stream.reserve).
        self.buffer_budget = buffer_budget
        # A compressed block can only be so much larger than the list it decodes to.
        self.max_header_block = 2 * max_header_list_size + 4096
        self.control_budget = control_budget
        self.control_refill_per_s = control_refill_per_s
        # Header lists over the limit: each is scanned to its end (to keep the HPACK
        # table in step) and answered; a client meaning no harm sends few.
        self.oversized_header_budget = oversized_header_budget
        self.oversized_header_refill_per_s = oversized_header_refill_per_s


class _Budget:
    """Tokens spent by work a peer causes without requests; refilled with time."""

    __slots__ = ("_capacity", "_rate", "_stamp", "tokens")

    def __init__(self, capacity: int, rate: float) -> None:
        self._capacity = capacity
        self._rate = rate
        self.tokens = float(capacity)
        self._stamp = time.monotonic()

    def spend(self) -> bool:
        self.tokens -= 1
        if self.tokens >= 0:
            return True
        now = time.monotonic()
        self.tokens = min(self._capacity, self.tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        return self.tokens >= 0


class Stream:
    """One request and its response. The application writes through it."""

    __slots__ = (
        "_connection",
        "_pending",
        "content_length",
        "handler",
        "held",
        "id",
        "local_closed",
        "opened",
        "received",
        "recv_window",
        "remote_closed",
        "reserved",
        "send_window",
        "wanted",
    )

    def __init__(self, connection: ServerConnection, stream_id: int, send_window: int) -> None:
        self._connection = connection
        self.id = stream_id
        self.handler: StreamHandler | None = None
        self.send_window = send_window
        self.recv_window = fr.DEFAULT_WINDOW
        self.remote_closed = False
        self.local_closed = False
        # The request's content-length (-1: none given) and the DATA octets seen so far.
        self.content_length = -1
        self.received = 0
        # Request octets handed to the handler and not yet released by it.
        self.held = 0
        # Octets reserved for the stream; a reservation waiting for room (0: none).
        self.reserved = 0
        self.wanted = 0
        # What of the reservation the stream's window lets the peer fill now: the
        # connection's window is opened for that much, not for the whole reservation.
        self.opened = 0
        # Frames waiting for window: (data, end_stream) or (trailer block, None).
        self._pending: collections.deque[tuple[bytes, bool | None]] | None = None

    @property
    def blocked(self) -> bool:
        """Output waits for the peer's window: write no more until ``writable``."""
        return bool(self._pending)

    def send_headers(self, block: bytes, end_stream: bool = False) -> None:
        """Response headers (a HEADERS frame; ``block`` from ``hpack.encode_headers``)."""
        if self.local_closed:
            return
        self._connection._send_block(self.id, block, end_stream)
        if end_stream:
            self.local_closed = True
            self._connection._stream_done(self)

    def send_data(self, data: bytes, end_stream: bool = False) -> bool:
        """Queue ``data`` on the stream; False when some waits for window (see ``blocked``)."""
        if self.local_closed:
            return True
        if end_stream:
            self.local_closed = True
        if self._pending:
            self._pending.append((data, end_stream))
            return False
        sent = self._connection._send_data(self, data, end_stream)
        if end_stream and sent:
            self._connection._stream_done(self)
        return sent

    def send_trailers(self, block: bytes) -> None:
        """The response's trailers: HEADERS with END_STREAM, after any DATA still queued."""
        if self.local_closed:
            return
        self.local_closed = True
        if self._pending:
            self._pending.append((block, None))
            return
        self._connection._send_block(self.id, block, True)
        self._connection._stream_done(self)

    def send_response(self, frames_bytes: bytes, data_length: int) -> bool:
        """A whole response already framed (headers, one DATA of ``data_length``, trailers).

        Only when the DATA fits the windows (else False and nothing is sent): the common
        unary answer goes out as one write.
        """
        connection = self._connection
        if (
            self._pending
            or self.local_closed
            or data_length > self.send_window
            or data_length > connection.send_window
            or data_length > connection.peer_max_frame_size
        ):
            return False
        self.send_window -= data_length
        connection.send_window -= data_length
        self.local_closed = True
        connection._answered_since_ping = True
        connection._write(frames_bytes)
        connection._stream_done(self)
        return True

    def grant(self, increment: int) -> None:
        """Let the peer send ``increment`` more octets on this stream."""
        if increment <= 0 or self.remote_closed or self.local_closed:
            return
        self.recv_window += increment
        self._connection._write(fr.window_update(self.id, increment))
        if self.reserved:
            self._connection._reopen(self)
            self._connection._give_back(force=True)

    def release(self, octets: int) -> None:
        """The handler took ``octets`` of what it was handed: the peer may send them again.

        Within the stream's reservation the window reopens for them: unreserve first what
        is not to come again."""
        octets = min(octets, self.held)
        if octets > 0:
            self.held -= octets
            self._connection._released(self, octets)

    def reserve(self, octets: int) -> bool:
        """Claim room to hold ``octets`` more (before granting window for them).

        True when claimed; False when it waits for room (``handler.room_reserved`` is
        called once it is claimed). One reservation waits at a time; it is given back with
        :meth:`unreserve`, or when the stream ends.
        """
        if octets <= 0:
            return True
        if self.remote_closed or self.local_closed or self.wanted:
            return False
        return self._connection._reserve(self, octets)

    def unreserve(self, octets: int | None = None) -> None:
        """Give back ``octets`` of the reservation (all of it by default)."""
        octets = self.reserved if octets is None else min(octets, self.reserved)
        if octets > 0:
            self.reserved -= octets
            self._connection._unreserved(self, octets)

    def reset(self, code: int = ErrorCode.CANCEL) -> None:
        """End the stream now (RST_STREAM); nothing more is sent or heard on it."""
        connection = self._connection
        if connection.streams.get(self.id) is not self:
            return
        self.local_closed = self.remote_closed = True
        self._pending = None
        connection._write(fr.rst_stream(self.id, code))
        connection._forget(self, reset_here=True)

    def _flush(self) -> bool:
        """Send what waits, as far as the windows allow; True once nothing waits."""
        pending = self._pending
        connection = self._connection
        while pending:
            data, end = pending[0]
            if end is None:
                pending.popleft()
                connection._send_block(self.id, data, True)
                continue
            pending.popleft()
            if not connection._send_data(self, data, end):
                # _send_data queued the rest at the back; it belongs at the front.
                pending.appendleft(pending.pop())
                return False
        self._pending = None
        if self.local_closed:
            connection._stream_done(self)
        return True


class ServerConnection:
    """The server's side of one HTTP/2 connection."""

    def __init__(
        self,
        application: Application,
        limits: Limits | None = None,
        *,
        output_ready: Callable[[], None] | None = None,
        budget: ReceiveBudget | None = None,
    ) -> None:
        """``budget``: shared with the process's other connections (else its own)."""
        self.limits = limits = limits or Limits()
        self._application = application
        self._output_ready = output_ready
        self.pending_output: list[bytes] = []
        self.streams: dict[int, Stream] = {}
        self.closed = False
        self.goaway_sent = False
        # Why the connection ended, when it was the peer's fault (for the log).
        self.error: ConnectionFault | None = None
        self._buffer = b""
        self._preface_seen = False
        self._settings_seen = False
        self._decoder = HeaderDecoder(max_header_list_size=limits.max_header_list_size)
        # The header block being gathered: (stream id, END_STREAM, fragments, size).
        self._block: tuple[int, bool, list[bytes], int] | None = None
        self._last_stream_id = 0
        self._accept_up_to = fr.STREAM_MASK
        # Peer's settings.
        self.peer_initial_window = fr.DEFAULT_WINDOW
        self.peer_max_frame_size = fr.DEFAULT_FRAME_SIZE
        self.send_window = fr.DEFAULT_WINDOW
        # Streams waiting for the connection's window, in the order they blocked.
        self._blocked: dict[int, Stream] = {}
        # Streams this side reset, newest last: what the peer had in flight on them is
        # dropped quietly; frames on other closed streams are the peer's error.
        self._reset_here: dict[int, None] = {}
        # A stream whose HEADERS made it depend on itself (a stream error once decoded).
        self._self_dependent = 0
        # Whether HEADERS or DATA went out since the last PING (see _ping).
        self._answered_since_ping = False
        # What the peer may still send (the connection's receive window), what handlers
        # hold, what streams reserved, and what of the shared budget is claimed for them.
        self._recv_window = fr.DEFAULT_WINDOW
        self._held = 0
        self._reserved = 0
        self._opened = 0
        self._charged = 0
        self._receive_budget = budget or ReceiveBudget(limits.buffer_budget)
        # Streams whose reservation waits for room, oldest first.
        self._waiting: dict[int, Stream] = {}
        self._budget = _Budget(limits.control_budget, limits.control_refill_per_s)
        self._oversized_budget = _Budget(
            limits.oversized_header_budget, limits.oversized_header_refill_per_s
        )
        self._write(
            fr.settings(
                {
                    fr.MAX_CONCURRENT_STREAMS: limits.max_concurrent_streams,
                    fr.MAX_HEADER_LIST_SIZE: limits.max_header_list_size,
                    fr.MAX_FRAME_SIZE: limits.max_frame_size,
                    fr.ENABLE_PUSH: 0,
                }
            )
        )

    @property
    def preface_received(self) -> bool:
        """The client's preface and its first SETTINGS have arrived."""
        return self._settings_seen

    # -- output -------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        pending = self.pending_output
        pending.append(data)
        if len(pending) == 1 and self._output_ready is not None:
            self._output_ready()

    def take_output(self) -> bytes:
        pending = self.pending_output
        if not pending:
            return b""
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        return data

    def _send_block(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        self._answered_since_ping = True
        flags = fr.END_STREAM if end_stream else 0
        limit = self.peer_max_frame_size
        if len(block) <= limit:
            self._write(fr.frame(fr.HEADERS, flags | fr.END_HEADERS, stream_id, block))
            return
        pieces = [block[i : i + limit] for i in range(0, len(block), limit)]
        out = [fr.frame(fr.HEADERS, flags, stream_id, pieces[0])]
        for i, piece in enumerate(pieces[1:], 1):
            last = fr.END_HEADERS if i == len(pieces) - 1 else 0
            out.append(fr.frame(fr.CONTINUATION, last, stream_id, piece))
        self._write(b"".join(out))

    def _send_data(self, stream: Stream, data: bytes, end_stream: bool) -> bool:
        """Send as much of ``data`` as the windows allow; queue the rest on the stream."""
        self._answered_since_ping = True
        sent = 0
        total = len(data)
        limit = self.peer_max_frame_size
        while True:
            room = min(stream.send_window, self.send_window, limit, total - sent)
            if room <= 0 and total - sent > 0:
                break
            last = sent + room == total
            flags = fr.END_STREAM if (end_stream and last) else 0
            chunk = data[sent : sent + room] if (sent or not last) else data
            self._write(fr.frame_header(fr.DATA, flags, stream.id, room) + chunk)
            stream.send_window -= room
            self.send_window -= room
            sent += room
            if last:
                return True
        rest = data[sent:]
        if stream._pending is None:
            stream._pending = collections.deque()
        stream._pending.append((rest, end_stream))
        if stream.send_window > 0 and self.send_window <= 0:
            self._blocked[stream.id] = stream
        return False

    def _stream_done(self, stream: Stream) -> None:
        """Our side finished (or will, once what waits is sent): the stream is gone now.

        Every stream still in ``streams`` has output to send or its answer to come, so
        the peer's END_STREAM alone never has to forget one."""
        if stream._pending:
            return
        if not stream.remote_closed:
            # The request was not read to its end: tell the peer to stop sending it.
            self._write(fr.rst_stream(stream.id, ErrorCode.NO_ERROR))
            stream.remote_closed = True
            self._forget(stream, reset_here=True)
        else:
            self._forget(stream)

    def _forget(self, stream: Stream, *, reset_here: bool = False) -> None:
        if reset_here:
            self._note_reset_here(stream.id)
        if self.streams.pop(stream.id, None) is not None:
            self._blocked.pop(stream.id, None)
            self._drop_accounts(stream)
            if self.goaway_sent and not self.streams and not self.closed:
                self.closed = True

    # -- what the peer may send ------------------------------------------------------

    @property
    def held(self) -> int:
        """Request octets handed to handlers and not yet released."""
        return self._held

    @property
    def reserved(self) -> int:
        """Octets the connection's streams reserved (see Stream.reserve)."""
        return self._reserved

    def _give_back(self, *, force: bool = False) -> None:
        """Open the connection's window to 65,535 plus what of the reservations the streams'
        windows let the peer fill, less what is held.

        Small amounts wait until they add up (a quarter of the whole), unless ``force``."""
        target = fr.DEFAULT_WINDOW + self._opened
        deficit = target - self._held - self._recv_window
        if deficit > 0 and (force or deficit >= target >> 2) and not self.closed:
            self._recv_window += deficit
            self._write(fr.window_update(0, deficit))

    def _claim(self, octets: int) -> bool:
        """Raise the claim on the shared budget to cover ``octets`` more reserved."""
        due = max(self._reserved + octets, self._exposure())
        if self.closed or due > self.limits.buffer_budget:
            return False
        more = due - self._charged
        if more > 0:
            if not self._receive_budget.claim(more):
                return False
            self._charged = due
        return True

    def _exposure(self) -> int:
        """What the peer may have held beyond the free 65,535: held plus still open."""
        return self._recv_window + self._held - fr.DEFAULT_WINDOW

    def _recharge(self) -> None:
        """Give back what of the claim neither reservations nor open window need now."""
        due = max(self._reserved, self._exposure(), 0)
        if due < self._charged:
            freed = self._charged - due
            self._charged = due
            self._receive_budget.release(freed)

    def _reserve(self, stream: Stream, octets: int) -> bool:
        if self.closed:
            return False
        if not self._waiting and self._claim(octets):
            self._take_reservation(stream, octets)
            return True
        stream.wanted = octets
        self._waiting[stream.id] = stream
        self._receive_budget.wait(self)
        return False

    def _take_reservation(self, stream: Stream, octets: int) -> None:
        stream.reserved += octets
        self._reserved += octets
        self._reopen(stream)
        self._give_back(force=True)

    def _reopen(self, stream: Stream) -> None:
        opened = min(stream.reserved, stream.held + max(stream.recv_window, 0))
        self._opened += opened - stream.opened
        stream.opened = opened

    def _released(self, stream: Stream, octets: int) -> None:
        self._held -= octets
        if stream.opened:
            self._reopen(stream)
        self._recharge()
        self._give_back()

    def _unreserved(self, stream: Stream, octets: int) -> None:
        self._reserved -= octets
        self._reopen(stream)
        self._recharge()
        self._serve_waiting()

    def budget_freed(self) -> None:
        """The shared budget has room again: reservations waiting here go first in line."""
        self._serve_waiting()

    def _serve_waiting(self) -> None:
        waiting = self._waiting
        while waiting:
            stream = next(iter(waiting.values()))
            if not self._claim(stream.wanted):
                break
            del waiting[stream.id]
            octets, stream.wanted = stream.wanted, 0
            self._take_reservation(stream, octets)
            if stream.handler is not None:
                stream.handler.room_reserved()
        if not waiting:
            self._receive_budget.stop_waiting(self)

    def _drop_accounts(self, stream: Stream) -> None:
        """A stream is gone: what it held and reserved is the connection's no more."""
        if stream.wanted:
            stream.wanted = 0
            self._waiting.pop(stream.id, None)
            if not self._waiting:
                self._receive_budget.stop_waiting(self)
        held, reserved = stream.held, stream.reserved
        if not held and not reserved and not stream.opened:
            return
        stream.held = stream.reserved = 0
        self._held -= held
        self._reserved -= reserved
        self._opened -= stream.opened
        stream.opened = 0
        self._recharge()
        self._give_back()
        if reserved:
            self._serve_waiting()

    def _note_reset_here(self, stream_id: int) -> None:
        reset_here = self._reset_here
        reset_here[stream_id] = None
        if len(reset_here) > _RESET_MEMORY:
            del reset_here[next(iter(reset_here))]

    def _closed_stream_frame(self, stream_id: int) -> None:
        """DATA arrived on a stream that is closed (not idle, not open)."""
        if stream_id in self._reset_here:
            return
        # The peer ended or reset the stream itself and goes on using it.
        self._write(fr.rst_stream(stream_id, ErrorCode.STREAM_CLOSED))

    # -- ending -------------------------------------------------------------------

    def shut_down(self) -> None:
        """Refuse new streams (GOAWAY NO_ERROR); ``closed`` once the open ones finish."""
        if self.goaway_sent or self.closed:
            return
        self.goaway_sent = True
        self._accept_up_to = self._last_stream_id
        self._write(fr.goaway(self._last_stream_id, ErrorCode.NO_ERROR))
        if not self.streams:
            self.closed = True

    def connection_lost(self) -> None:
        """The socket is gone: every open stream is reset."""
        self.closed = True
        self._reset_all(ErrorCode.CANCEL)

    def _fail(self, fault: ConnectionFault) -> None:
        # Kept for the log without its traceback: that holds the frames that raised it,
        # the peer's whole input chunk among their locals, in a cycle with this connection
        # that only the collector would free.
        fault.__traceback__ = fault.__context__ = fault.__cause__ = None
        self.error = fault
        debug = str(fault).encode("utf-8", "replace")[:256]
        self._write(fr.goaway(self._last_stream_id, fault.code, debug))
        self.goaway_sent = True
        self.closed = True
        self._buffer = b""
        self._reset_all(fault.code)

    def _reset_all(self, code: int) -> None:
        streams = list(self.streams.values())
        self.streams.clear()
        self._blocked.clear()
        self._waiting.clear()
        self._receive_budget.stop_waiting(self)
        self._held = self._reserved = self._opened = 0
        charged, self._charged = self._charged, 0
        for stream in streams:
            stream.local_closed = stream.remote_closed = True
            stream._pending = None
            stream.held = stream.reserved = stream.wanted = stream.opened = 0
        self._receive_budget.release(charged)
        for stream in streams:
            if stream.handler is not None:
                stream.handler.reset(code)

    # -- input --------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        """Handle bytes from the peer (any amount: partial frames wait for the rest)."""
        if self.closed:
            return
        buffer = self._buffer + data if self._buffer else data
        try:
            if not self._preface_seen:
                if len(buffer) < len(fr.PREFACE):
                    if not fr.PREFACE.startswith(buffer):
                        raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 preface")
                    self._buffer = buffer
                    return
                if not buffer.startswith(fr.PREFACE):
                    raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 preface")
                self._preface_seen = True
                buffer = buffer[len(fr.PREFACE) :]
            self._buffer = self._frames(buffer)
        except ConnectionFault as fault:
            self._fail(fault)

    def _frames(self, buffer: bytes) -> bytes:
        """Handle every whole frame in ``buffer``; returns what is left of a partial one."""
        unpack = fr.HEADER.unpack_from
        size = len(buffer)
        pos = 0
        max_frame = self.limits.max_frame_size
        while size - pos >= 9:
            word, flags, stream_id = unpack(buffer, pos)
            length = word >> 8
            if length > max_frame:
                raise ConnectionFault(
                    ErrorCode.FRAME_SIZE_ERROR,
                    f"a frame of {length} octets is over SETTINGS_MAX_FRAME_SIZE {max_frame}",
                )
            end = pos + 9 + length
            if end > size:
                break
            payload = buffer[pos + 9 : end]
            pos = end
            frame_type = word & 0xFF
            stream_id &= fr.STREAM_MASK
            if not self._settings_seen and frame_type != fr.SETTINGS:
                raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "the preface lacks SETTINGS")
            if self._block is not None and frame_type != fr.CONTINUATION:
                raise ConnectionFault(
                    ErrorCode.PROTOCOL_ERROR, "a header block was interrupted by another frame"
                )
            if frame_type == fr.DATA:
                self._data(flags, stream_id, payload, length)
                # What was not handed to a handler (padding, a closed stream's) goes back;
                # DATA into window no reservation needs any more lowers the claim.
                if self._charged:
                    self._recharge()
                self._give_back()
            elif frame_type == fr.HEADERS:
                self._headers(flags, stream_id, payload)
            elif frame_type == fr.CONTINUATION:
                self._continuation(flags, stream_id, payload)
            elif frame_type == fr.WINDOW_UPDATE:
                self._window_update(stream_id, payload)
            elif frame_type == fr.RST_STREAM:
                self._rst_stream(stream_id, payload)
            elif frame_type == fr.SETTINGS:
                self._settings(flags, stream_id, payload)
            elif frame_type == fr.PING:
                self._ping(flags, stream_id, payload)
            elif frame_type == fr.GOAWAY:
                if stream_id != 0:
                    raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
            elif frame_type == fr.PRIORITY:
                if stream_id == 0:
                    raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
                if length != 5:
                    self._stream_error(stream_id, ErrorCode.FRAME_SIZE_ERROR)
                elif fr.read_word(payload) & fr.STREAM_MASK == stream_id:
                    self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR)
            elif frame_type == fr.PUSH_PROMISE:
                raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "a client sent PUSH_PROMISE")
            # Unknown frame types are ignored (RFC 9113 section 4.1).
            if self.closed and self.error is not None:
                return b""
        return buffer[pos:] if pos < size else b""

    def _spend(self, what: str) -> None:
        if not self._budget.spend():
            raise ConnectionFault(
                ErrorCode.ENHANCE_YOUR_CALM, f"too many {what} in too short a time"
            )

    @staticmethod
    def _unpad(flags: int, payload: bytes) -> bytes:
        if not flags & fr.PADDED:
            return payload
        if not payload:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "a padded frame without its length")
        pad = payload[0]
        if pad >= len(payload):
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "padding longer than the frame")
        return payload[1 : len(payload) - pad]

    def _data(self, flags: int, stream_id: int, payload: bytes, length: int) -> None:
        if stream_id == 0:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        data = self._unpad(flags, payload)
        self._recv_window -= length
        if self._recv_window < 0:
            raise ConnectionFault(
                ErrorCode.FLOW_CONTROL_ERROR, "DATA past the connection's receive window"
            )
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id > self._last_stream_id:
                raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream")
            if stream is not None:
                self._stream_error(stream_id, ErrorCode.STREAM_CLOSED)
            else:
                self._closed_stream_frame(stream_id)
            return
        stream.recv_window -= length
        if stream.recv_window < 0:
            self._stream_error(stream_id, ErrorCode.FLOW_CONTROL_ERROR)
            return
        end_stream = bool(flags & fr.END_STREAM)
        if len(data) < length and not end_stream:
            # Padding is not the application's to give back.
            stream.grant(length - len(data))
        if stream.content_length >= 0:
            stream.received += len(data)
            if stream.received > stream.content_length or (
                end_stream and stream.received != stream.content_length
            ):
                self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR)
                return
        if not data and not end_stream:
            self._spend("empty DATA frames")
            return
        if end_stream:
            stream.remote_closed = True
        if stream.handler is not None:
            if data:
                stream.held += len(data)
                self._held += len(data)
            stream.handler.data_received(data, end_stream)

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0")
        if stream_id % 2 == 0:
            raise ConnectionFault(
                ErrorCode.PROTOCOL_ERROR, f"stream {stream_id} is not a client's (even)"
            )
        if flags & fr.PRIORITY_FLAG and len(payload) < (6 if flags & fr.PADDED else 5):
            raise ConnectionFault(ErrorCode.FRAME_SIZE_ERROR, "HEADERS too short")
        payload = self._unpad(flags, payload)
        if flags & fr.PRIORITY_FLAG:
            if len(payload) < 5:
                # Long enough for its fields, but the padding runs into them (RFC 9113 6.2).
                raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "padding over the priority fields")
            if fr.read_word(payload) & fr.STREAM_MASK == stream_id:
                # Decoded all the same, to keep the header table in step.
                self._self_dependent = stream_id
            payload = payload[5:]
        end_stream = bool(flags & fr.END_STREAM)
        if flags & fr.END_HEADERS:
            self._header_block(stream_id, end_stream, payload)
        else:
            self._block = (stream_id, end_stream, [payload], len(payload))

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        block = self._block
        if block is None or block[0] != stream_id:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        sid, end_stream, fragments, size = block
        size += len(payload)
        if size > self.limits.max_header_block:
            raise ConnectionFault(
                ErrorCode.ENHANCE_YOUR_CALM,
                f"a header block over {self.limits.max_header_block} octets",
            )
        if not payload and not flags & fr.END_HEADERS:
            self._spend("empty CONTINUATION frames")
        fragments.append(payload)
        if flags & fr.END_HEADERS:
            self._block = None
            self._header_block(sid, end_stream, b"".join(fragments))
        else:
            self._block = (sid, end_stream, fragments, size)

    def _header_block(self, stream_id: int, end_stream: bool, block: bytes) -> None:
        too_large = False
        try:
            headers = self._decoder.decode(block)
        except HeaderListTooLarge:
            if not self._oversized_budget.spend():
                raise ConnectionFault(
                    ErrorCode.ENHANCE_YOUR_CALM,
                    "too many header lists over SETTINGS_MAX_HEADER_LIST_SIZE "
                    f"({self.limits.max_header_list_size} octets) in too short a time",
                ) from None
            headers = []
            too_large = True
        except HpackError as exc:
            raise ConnectionFault(ErrorCode.COMPRESSION_ERROR, str(exc)) from None
        if self._self_dependent == stream_id:
            self._self_dependent = 0
            if stream_id > self._last_stream_id:
                self._last_stream_id = stream_id
            self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR)
            return
        stream = self.streams.get(stream_id)
        if stream is not None:
            # Trailers of a request: they end it.
            if stream.remote_closed:
                self._stream_error(stream_id, ErrorCode.STREAM_CLOSED)
                return
            if not end_stream:
                raise ConnectionFault(
                    ErrorCode.PROTOCOL_ERROR, "a second HEADERS without END_STREAM"
                )
            stream.remote_closed = True
            if stream.handler is not None:
                stream.handler.data_received(b"", True)
            return
        if stream_id <= self._last_stream_id:
            if stream_id in self._reset_here:
                # Sent before our reset reached the peer (trailers, say): decoded above,
                # so the table is in step, and otherwise ignored (RFC 9113 section 5.1).
                return
            raise ConnectionFault(ErrorCode.STREAM_CLOSED, f"stream {stream_id} was already used")
        self._last_stream_id = stream_id
        if stream_id > self._accept_up_to:
            # After GOAWAY: not processed, so the client may retry it elsewhere.
            self._refuse(stream_id)
            return
        if len(self.streams) >= self.limits.max_concurrent_streams:
            self._spend("streams over SETTINGS_MAX_CONCURRENT_STREAMS")
            self._refuse(stream_id)
            return
        stream = Stream(self, stream_id, self.peer_initial_window)
        stream.remote_closed = end_stream
        self.streams[stream_id] = stream
        if too_large:
            self._application.headers_too_large(stream)
            return
        if not headers:
            self._spend("empty header blocks")
        content_length = _request_problem(headers)
        if content_length == _MALFORMED or (end_stream and content_length > 0):
            self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR)
            return
        stream.content_length = content_length
        self._application.request(stream, headers, end_stream)

    def _refuse(self, stream_id: int) -> None:
        self._write(fr.rst_stream(stream_id, ErrorCode.REFUSED_STREAM))
        self._note_reset_here(stream_id)

    def _stream_error(self, stream_id: int, code: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            self._write(fr.rst_stream(stream_id, code))
            self._note_reset_here(stream_id)
            return
        handler = stream.handler
        stream.reset(code)
        if handler is not None:
            handler.reset(code)

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionFault(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 octets")
        increment = fr.read_word(payload) & fr.STREAM_MASK
        if stream_id == 0:
            if increment == 0:
                raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > fr.MAX_WINDOW:
                raise ConnectionFault(ErrorCode.FLOW_CONTROL_ERROR, "window over 2^31-1")
            self._unblock()
            return
        if stream_id > self._last_stream_id:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream")
        if increment == 0:
            self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR)
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        stream.send_window += increment
        if stream.send_window > fr.MAX_WINDOW:
            self._stream_error(stream_id, ErrorCode.FLOW_CONTROL_ERROR)
            return
        if stream._pending:
            self._resume(stream)

    def _resume(self, stream: Stream) -> None:
        if stream._flush():
            self._blocked.pop(stream.id, None)
            if stream.handler is not None:
                stream.handler.writable()

    def _unblock(self) -> None:
        """The connection's window grew: streams waiting on it go on, in order."""
        for stream in list(self._blocked.values()):
            if self.send_window <= 0:
                return
            self._blocked.pop(stream.id, None)
            if stream._pending:
                self._resume(stream)

    def _rst_stream(self, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise ConnectionFault(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM not 4 octets")
        if stream_id > self._last_stream_id:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on an idle stream")
        if stream_id not in self.streams:
            return
        # A stream reset while the server works on it: cheap to send, dear to serve.
        self._spend("streams reset while open")
        stream = self.streams.pop(stream_id)
        # Frames the peer sends on it from now on are its error, not in-flight leftovers.
        self._reset_here.pop(stream_id, None)
        self._blocked.pop(stream_id, None)
        self._drop_accounts(stream)
        stream.local_closed = stream.remote_closed = True
        stream._pending = None
        if stream.handler is not None:
            stream.handler.reset(fr.read_word(payload))
        if self.goaway_sent and not self.streams:
            self.closed = True

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & fr.ACK:
            if payload:
                raise ConnectionFault(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ConnectionFault(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6")
        if self._settings_seen:
            self._spend("SETTINGS frames")
        self._settings_seen = True
        for key, value in fr.parse_settings(payload):
            if key == fr.INITIAL_WINDOW_SIZE:
                if value > fr.MAX_WINDOW:
                    raise ConnectionFault(
                        ErrorCode.FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1"
                    )
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif key == fr.MAX_FRAME_SIZE:
                if not fr.DEFAULT_FRAME_SIZE <= value <= fr.MAX_FRAME_SIZE_LIMIT:
                    raise ConnectionFault(
                        ErrorCode.PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value} out of range"
                    )
                self.peer_max_frame_size = value
            elif key == fr.ENABLE_PUSH and value > 1:
                raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1")
            # The header table size concerns encoders that index; ours never does.
        self._write(fr.SETTINGS_ACK)
        for stream in [s for s in self.streams.values() if s._pending and s.send_window > 0]:
            self._resume(stream)

    def _ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise ConnectionFault(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ConnectionFault(ErrorCode.FRAME_SIZE_ERROR, "PING not 8 octets")
        if flags & fr.ACK:
            return
        # Clients measure bandwidth with a PING per burst of data they read (gRPC's BDP
        # estimate): a PING after an answer is work done, not a flood.
        if not self._answered_since_ping:
            self._spend("PING frames without requests")
        self._answered_since_ping = False
        self._write(fr.ping_ack(payload))


# How many streams reset by this side are remembered (see ``_reset_here``).
_RESET_MEMORY = 1024

_CONNECTION_SPECIFIC = frozenset(
    ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade")
)
_REQUEST_PSEUDO = frozenset((":method", ":scheme", ":path", ":authority"))


_MALFORMED = -2


def _request_problem(headers: Headers) -> int:
    """A request's content-length (-1: none), or _MALFORMED (RFC 9113 sections 8.2, 8.3)."""
    regular = False
    seen: set[str] = set()
    content_length = -1
    for name, value in headers:
        if name[:1] == ":":
            if regular or name not in _REQUEST_PSEUDO or name in seen:
                return _MALFORMED
            if name == ":path" and not value:
                return _MALFORMED
            seen.add(name)
            continue
        regular = True
        if not name or name != name.lower() or name in _CONNECTION_SPECIFIC:
            return _MALFORMED
        if "\r" in value or "\n" in value or "\x00" in value:
            return _MALFORMED
        if name == "te" and value != "trailers":
            return _MALFORMED
        if name == "content-length":
            if not value.isdigit() or content_length >= 0:
                return _MALFORMED
            content_length = int(value)
    if ":method" not in seen or ":path" not in seen or ":scheme" not in seen:
        return _MALFORMED
    return content_length
