"""One remoting client connection: frames in, each request handled, responses out.

Invariants (the door's budgets):
- What a connection holds of a client's requests is bounded: the decoder holds at most
  one unfinished frame (at most ``max_frame_length``), and decoded requests not yet
  answered claim their bytes (body plus ``REQUEST_OVERHEAD``) from the broker-wide
  ``budget`` and from the connection's own ``per_connection`` allowance, and at most
  ``MAX_OPEN_REQUESTS`` are open at once. While any of these is spent, the connection
  reads nothing more (TCP pushes back on the client) until answers give room back.
- A client that does not read its responses makes the transport pause writing; the
  connection then stops reading requests too, so unread answers pile up no further than
  those of the requests already taken.
- A malformed frame closes the connection (the stream cannot be resynchronised); what
  was decoded before it is still answered. The broker keeps serving everyone else.
- A connection with no bytes read and no request open for ``idle_timeout_s`` is closed;
  a long-polling pull is an open request.
- A oneway request is never answered; every other request is answered exactly once.
- Answers given in one turn of the event loop go to the transport together, at the start
  of the next turn, in the order given (one write where there were many); before the
  connection closes itself, what was given is written.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable

from ..frontdoor.http2.receive_budget import ReceiveBudget
from ..frontdoor.listener import peer_string
from ..rate_limited_log import RateLimitedLog
from .frames import FrameDecoder, FrameError, RemotingCommand, encode

log = logging.getLogger(__name__)

_MALFORMED_LOG = RateLimitedLog(60.0)
# What a request costs beyond its body while it is open: the decoded command, its task
# and its answer, as Python holds them.
REQUEST_OVERHEAD = 1024
# Requests open at once on one connection (long polls and unanswered sends included);
# past it the connection reads nothing more until answers go out.
MAX_OPEN_REQUESTS = 1024

# What the dispatcher does with one request: its response, or None (oneway, or unanswerable).
Dispatch = Callable[[RemotingCommand, "RemotingConnection"], Awaitable[RemotingCommand | None]]


class RemotingConnection(asyncio.Protocol):
    def __init__(
        self,
        dispatch: Dispatch,
        *,
        max_frame_length: int,
        budget: ReceiveBudget,
        per_connection: int,
        idle_timeout_s: float,
        on_close: Callable[[RemotingConnection], None] | None = None,
        external: bool = False,
    ) -> None:
        """``external``: it came in on the external remoting port (routes name the groups'
        external addresses)."""
        self.external = external
        self._dispatch = dispatch
        self._decoder = FrameDecoder(max_frame_length)
        self._budget = budget
        self._per_connection = per_connection
        self._idle_timeout_s = idle_timeout_s
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Encoded answers of this loop turn, written at the start of the next.
        self._unwritten: list[bytes] = []
        # Bytes of requests taken and not yet answered, claimed from the budget.
        self._held = 0
        # Requests decoded while the budget was spent: taken once it frees up.
        self._parked: collections.deque[tuple[RemotingCommand, int]] = collections.deque()
        self._open_requests = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._write_paused = False
        self._read_paused = False
        self._last_activity = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        self.peer = ""
        # The client's host:port, and this end's (where the client reached the broker).
        self.address = ""
        self.local_address = ""
        # The listener's opening deadline applies until a first whole frame arrives.
        self.opened = False
        self.closed = False

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self._transport = transport  # type: ignore[assignment]
        # Once: each lookup of the running loop costs a getpid() system call.
        self._loop = asyncio.get_running_loop()
        peername = transport.get_extra_info("peername")
        if peername:
            self.peer = peer_string(peername)
            host, port = peername[0], peername[1]
            self.address = _host_port(host, port)
        sockname = transport.get_extra_info("sockname")
        if sockname:
            self.local_address = _host_port(sockname[0], sockname[1])
        self._arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        self._last_activity = time.monotonic()
        try:
            commands = self._decoder.feed(data)
        except FrameError as exc:
            self._malformed(exc)
            return
        if commands:
            self.opened = True
        for command in commands:
            size = len(command.body) + REQUEST_OVERHEAD
            if self._parked or not self._claim(size):
                self._parked.append((command, size))
            else:
                self._start(command, size)
        failed = self._decoder.failed
        if failed is not None:
            # Commands before the bad frame are being answered; nothing after it is read.
            self._malformed(failed)
            return
        self._update_reading()

    def eof_received(self) -> bool | None:
        # Answer what was asked, then close (the client half-closed).
        if not self._open_requests and self._transport is not None:
            self._write_out()
            self._transport.close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._budget.stop_waiting(self)
        for task in self._tasks:
            task.cancel()
        # Parked requests claimed nothing: dropping them gives nothing back.
        self._parked.clear()
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # -- the budget ---------------------------------------------------------

    def budget_freed(self) -> None:
        while self._parked:
            command, size = self._parked[0]
            if not self._claim(size):
                return
            self._parked.popleft()
            self._start(command, size)
        self._budget.stop_waiting(self)
        self._update_reading()

    def _claim(self, size: int) -> bool:
        if self._open_requests >= MAX_OPEN_REQUESTS:
            return False
        if self._held and self._held + size > self._per_connection:
            return False
        if not self._budget.claim(size):
            self._budget.wait(self)
            return False
        self._held += size
        return True

    def _release(self, size: int) -> None:
        self._held -= size
        self._budget.release(size)
        if self._parked:
            self.budget_freed()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        stop = self._write_paused or bool(self._parked)
        if stop and not self._read_paused:
            transport.pause_reading()
            self._read_paused = True
        elif not stop and self._read_paused:
            transport.resume_reading()
            self._read_paused = False

    # -- requests -----------------------------------------------------------

    def _start(self, command: RemotingCommand, size: int) -> None:
        self._open_requests += 1
        assert self._loop is not None  # set when the connection was made
        task = self._loop.create_task(self._serve(command, size))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, command: RemotingCommand, size: int) -> None:
        try:
            response = await self._dispatch(command, self)
            if response is not None and not command.is_oneway:
                self.send(response)
        finally:
            self._open_requests -= 1
            self._last_activity = time.monotonic()
            self._release(size)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def send(self, command: RemotingCommand) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self._loop is None:
            return
        if not self._unwritten:
            self._loop.call_soon(self._write_out)
        self._unwritten.append(encode(command))

    def _write_out(self) -> None:
        frames, self._unwritten = self._unwritten, []
        transport = self._transport
        if not frames or transport is None or transport.is_closing():
            return
        transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def _malformed(self, exc: FrameError) -> None:
        line = _MALFORMED_LOG.line(f"closing remoting connection from {self.peer}: {exc}")
        if line is not None:
            log.warning("%s", line)
        transport = self._transport
        if transport is None:
            return
        if self._open_requests:
            # Answers to what came before the bad frame still go out.
            self._write_out()
            transport.close()
        else:
            transport.abort()

    # -- idleness -----------------------------------------------------------

    def _arm_idle_timer(self) -> None:
        if self._idle_timeout_s <= 0:
            return
        self._idle_timer = asyncio.get_running_loop().call_later(
            self._idle_timeout_s, self._check_idle
        )

    def _check_idle(self) -> None:
        self._idle_timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        idle_for = time.monotonic() - self._last_activity
        if self._open_requests == 0 and idle_for >= self._idle_timeout_s:
            transport.close()
            return
        # Check again once the last activity is a whole timeout old.
        wait = max(self._idle_timeout_s - idle_for, 0.5)
        self._idle_timer = asyncio.get_running_loop().call_later(wait, self._check_idle)


def _host_port(host: str, port: int) -> str:
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
