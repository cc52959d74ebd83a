"""The broker's gRPC server: grpc.aio's service registrations, served over ``http2``.

Services register as they would with ``grpc.aio.server()`` (generic handlers, the
generated ``add_*_to_server``, ``grpc.aio.ServerInterceptor``s); each call runs its
handler as a task on the event loop with a :class:`~.call.ServerCall` as its context,
in a copy of ``call_context`` when one is given (contextvars; the context current when
the call arrived otherwise).
The client port's listener (``frontdoor.listener``) hands over each connection, TLS already
unwrapped by the loop.

Invariants:
- A connection's output is written once per loop turn at most (answers completed in
  the same turn share one write), and at once after the input that caused it.
- While a client does not read what is written to it, nothing more is read from it,
  and streaming answers to it wait.
- ``stop(grace)``: no new connections, GOAWAY on every open one; calls in progress get
  ``grace`` seconds, then are cancelled and every connection closed.
- A connection with no call open for ``idle_timeout_s`` (gRPC's ``max_connection_idle``:
  counted from when its last call ended, or from its start) is sent GOAWAY and closed; a
  long poll or a telemetry stream is an open call. Idleness is noticed within one loop
  turn of the last call's end: when its answer is written or its reset read.
- ``opened`` (asked by the listener at the preface deadline) is true once the client's
  HTTP/2 preface and SETTINGS have arrived.
- Request octets not yet taken by handlers are bounded per connection
  (``buffer_per_connection``) and across every connection sharing ``buffer_budget``
  (the broker's servers share one); past them clients wait on flow control.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, NamedTuple

import grpc

from ... import send_timeline
from ...rate_limited_log import RateLimitedLog
from ..http2.connection import Limits, ServerConnection, Stream
from ..http2.hpack import encode_headers
from ..http2.receive_budget import ReceiveBudget
from ..listener import peer_string
from .call import ServerCall
from .grpc_headers import CODE_NUMBERS, Metadatum, RequestHeaders, trailers_only
from .request_window import StallWatch

log = logging.getLogger(__name__)

_FAULT_LOG_INTERVAL_S = 60.0
# The loop may run a timer this much early (its clock's resolution).
_TIMER_SLACK_S = 0.01
# How long an idle connection told to go (GOAWAY) may take to read it before it is cut off.
_GOAWAY_GRACE_S = 10.0


class HandlerCallDetails(NamedTuple):
    """What an interceptor is told of a call (``grpc.HandlerCallDetails``)."""

    method: str
    invocation_metadata: tuple[Metadatum, ...]


class RpcServer:
    """gRPC services on HTTP/2 connections handed to it by listeners."""

    def __init__(
        self,
        *,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        max_message: int = 4 * 1024 * 1024,
        max_concurrent_streams: int = 1000,
        call_context: contextvars.Context | None = None,
        idle_timeout_s: float = 0.0,
        buffer_per_connection: int = 32 << 20,
        buffer_budget: ReceiveBudget | None = None,
        message_timeout: float = 30.0,
    ) -> None:
        """``buffer_budget``: shared with other servers (else this server's own, four
        connections' worth); ``message_timeout``: seconds a request message may take to
        arrive from its first octet."""
        if buffer_per_connection < max_message + 5:
            raise ValueError(
                f"a connection's request buffer ({buffer_per_connection} octets) must hold "
                f"the largest request message ({max_message} octets and its 5-octet prefix)"
            )
        self.max_message = max_message
        # 0: connections are never closed for being idle.
        self.idle_timeout_s = idle_timeout_s
        # What each call's task starts from: telemetry's unsampled trace, so that calls
        # that start none need not set one (see telemetry.root_sampling).
        self.call_context = call_context
        self.limits = Limits(
            max_concurrent_streams=max_concurrent_streams, buffer_budget=buffer_per_connection
        )
        self.buffer_budget = buffer_budget or ReceiveBudget(4 * buffer_per_connection)
        self.message_timeout = message_timeout
        self._stall_watch: StallWatch | None = None
        self._interceptors = tuple(interceptors)
        self._generic: list[grpc.GenericRpcHandler] = []
        self._methods: dict[str, grpc.RpcMethodHandler | None] = {}
        self.connections: set[ServedConnection] = set()
        self._stopping = False
        self._faults = RateLimitedLog(_FAULT_LOG_INTERVAL_S)

    # -- registration (as grpc.aio.Server) ----------------------------------------

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)
        self._methods = {path: h for path, h in self._methods.items() if h is not None}

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        for name, handler in handlers.items():
            self._methods[f"/{service}/{name}"] = handler

    def method_handler(self, path: str) -> grpc.RpcMethodHandler | None:
        """The handler registered for ``path`` (looked up once per path)."""
        try:
            return self._methods[path]
        except KeyError:
            pass
        found = None
        details = HandlerCallDetails(path, ())
        for generic in self._generic:
            found = generic.service(details)
            if found is not None:
                break
        if found is not None or len(self._methods) < 10_000:
            # Unknown paths are remembered too, but only so many: clients choose them.
            self._methods[path] = found
        return found

    @property
    def intercepted(self) -> bool:
        return bool(self._interceptors)

    async def intercept(
        self, call: ServerCall, handler: grpc.RpcMethodHandler
    ) -> grpc.RpcMethodHandler | None:
        """The handler the interceptors give for ``call`` (they may wrap ``handler``)."""
        details = HandlerCallDetails(call.request_headers.path, call.invocation_metadata())
        interceptors = self._interceptors

        async def next_one(index: int, details: Any) -> grpc.RpcMethodHandler | None:
            if index == len(interceptors):
                return handler

            def continuation(d: Any) -> Awaitable[grpc.RpcMethodHandler | None]:
                return next_one(index + 1, d)

            return await interceptors[index].intercept_service(continuation, details)

        return await next_one(0, details)

    # -- stopping ------------------------------------------------------------------

    async def stop(self, grace: float | None) -> None:
        """GOAWAY on every connection; after ``grace`` seconds cancel what still runs."""
        self._stopping = True
        for connection in list(self.connections):
            connection.shut_down()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (grace or 0.0)
        while any(c.h2.streams for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        tasks = []
        for connection in list(self.connections):
            tasks.extend(connection.abort())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def stall_watch(self, loop: asyncio.AbstractEventLoop) -> StallWatch:
        """The one watch over this server's requests in flight (made on the first call)."""
        if self._stall_watch is None:
            self._stall_watch = StallWatch(loop, self.message_timeout)
        return self._stall_watch

    def protocol(self) -> ServedConnection:
        """A protocol for one accepted connection (a listener's factory)."""
        return ServedConnection(self)

    def note_fault(self, peer: str, fault: Exception) -> None:
        count = self._faults.due()
        if count is not None:
            log.info(
                "closed %d connection(s) that broke HTTP/2 (latest from %s: %s)",
                count,
                peer,
                fault,
            )


_NOT_GRPC = b"This port serves gRPC (the RocketMQ 5 protocol): connect a RocketMQ 5 client.\n"


class _NotGrpc:
    """A request that is not a gRPC call: read to its end, then answered in plain text.

    (Answering before the end would leave the peer sending on a stream already closed.)
    """

    __slots__ = ("_block", "_stream")

    def __init__(self, stream: Stream, status: int) -> None:
        self._stream = stream
        self._block = encode_headers(
            [(":status", str(status)), ("content-type", "text/plain; charset=utf-8")]
        )

    def data_received(self, data: bytes, end_stream: bool) -> None:
        self._stream.release(len(data))
        if end_stream:
            self._stream.send_headers(self._block)
            self._stream.send_data(_NOT_GRPC, end_stream=True)

    def reset(self, code: int) -> None:
        """Nothing was started."""

    def writable(self) -> None:
        """The answer is all queued already."""

    def room_reserved(self) -> None:
        """Nothing is reserved: what arrives is dropped."""


class ServedConnection(asyncio.Protocol):
    """One client connection: bytes to and from its HTTP/2 state, calls to the server."""

    def __init__(self, server: RpcServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.stall_watch = server.stall_watch(self.loop)
        self.transport: asyncio.Transport | None = None
        self.peer = "unknown"
        self.h2: ServerConnection = None  # type: ignore[assignment]
        self.paused = False
        # Calls whose streaming answers wait for the client to read.
        self.writers: set[ServerCall] = set()
        self._receiving = False
        self._flush_scheduled = False
        # When a call was last seen open (loop time), and whether one was at the last look.
        self._busy_at = 0.0
        self._had_calls = False
        self._idle_timer: asyncio.TimerHandle | None = None
        # With send_timeline on: when input last arrived, and calls answered since the last
        # write.
        self.received_ns = 0
        self.answered: list[send_timeline.Stamps] = []

    @property
    def opened(self) -> bool:
        """The client's preface and SETTINGS have arrived (see ``frontdoor.listener``)."""
        return self.h2 is not None and self.h2.preface_received

    # -- the socket ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        address = transport.get_extra_info("peername")
        if address:
            self.peer = peer_string(address)
        self.h2 = ServerConnection(
            self,
            self.server.limits,
            output_ready=self._output_ready,
            budget=self.server.buffer_budget,
        )
        self.server.connections.add(self)
        if self.server._stopping:
            self.h2.shut_down()
        idle = self.server.idle_timeout_s
        if idle > 0:
            self._busy_at = self.loop.time()
            self._idle_timer = self.loop.call_later(idle, self._idle_check)
        self._flush()

    def data_received(self, data: bytes) -> None:
        if send_timeline.ON:
            self.received_ns = send_timeline.now()
        self._receiving = True
        try:
            self.h2.receive(data)
        except Exception:
            # A fault of the broker's, not the client's: this connection ends, no other.
            log.exception("closing a connection from %s after an unexpected error", self.peer)
            self.abort()
            return
        finally:
            self._receiving = False
        if self.h2.error is not None:
            self.server.note_fault(self.peer, self.h2.error)
        self._note_calls()
        self._flush()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self.server.connections.discard(self)
        self.h2.connection_lost()
        self._wake_writers()

    def pause_writing(self) -> None:
        # The client is not reading: read nothing more from it until it does.
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        self._wake_writers()

    def _wake_writers(self) -> None:
        for call in list(self.writers):
            call.writable()

    def _output_ready(self) -> None:
        if not self._receiving and not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._note_calls()
        data = self.h2.take_output()
        if data:
            transport.write(data)
            if send_timeline.ON and self.answered:
                written = send_timeline.now()
                for stamps in self.answered:
                    send_timeline.finish(stamps, written)
                self.answered.clear()
        if self.h2.closed:
            transport.close()

    def shut_down(self) -> None:
        self.h2.shut_down()
        self._flush()

    # -- idleness ------------------------------------------------------------------

    def _note_calls(self) -> None:
        """A look at the open calls: busy now if any is open or one just ended."""
        if self._idle_timer is None:
            return
        calls = bool(self.h2.streams)
        if calls or self._had_calls:
            self._busy_at = self.loop.time()
        self._had_calls = calls

    def _cut_off(self) -> None:
        if self in self.server.connections and self.transport is not None:
            self.transport.abort()

    def _idle_check(self) -> None:
        self._idle_timer = None
        transport = self.transport
        if transport is None or transport.is_closing() or self.h2.closed:
            return
        idle = self.server.idle_timeout_s
        now = self.loop.time()
        if self.h2.streams:
            self._busy_at = now
        elif now - self._busy_at >= idle - _TIMER_SLACK_S:
            # Graceful: the client sees GOAWAY (a call it sent meanwhile is refused
            # unprocessed, so it may retry) and reconnects when it next calls.
            self.shut_down()
            # Closing waits for what is written to be read: a client that reads nothing
            # is cut off instead.
            self.loop.call_later(_GOAWAY_GRACE_S, self._cut_off)
            return
        self._idle_timer = self.loop.call_at(self._busy_at + idle, self._idle_check)

    def abort(self) -> list[asyncio.Task[None]]:
        """Cancel every call still running and close the connection; their tasks."""
        tasks = [
            call._task
            for call in (stream.handler for stream in self.h2.streams.values())
            if isinstance(call, ServerCall) and call._task is not None
        ]
        # Every stream's handler hears it ended; the calls' tasks are cancelled.
        self.h2.connection_lost()
        if self.transport is not None:
            self._flush()
            self.transport.close()
        return tasks

    # -- frontdoor.http2.connection.Application ---------------------------------------------

    def request(self, stream: Stream, headers: list[tuple[str, str]], end_stream: bool) -> None:
        request = RequestHeaders(headers)
        if request.method != "POST" or not request.content_type.startswith("application/grpc"):
            refusal = _NotGrpc(stream, 405 if request.method != "POST" else 415)
            stream.handler = refusal
            if end_stream:
                refusal.data_received(b"", True)
            return
        server = self.server
        handler = server.method_handler(request.path)
        if handler is None:
            _answer_status(stream, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        call = ServerCall(self, stream, request, handler, intercepted=server.intercepted)
        stream.handler = call
        if end_stream:
            call.data_received(b"", True)

    def headers_too_large(self, stream: Stream) -> None:
        _answer_status(
            stream,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the request's headers are over {self.server.limits.max_header_list_size} octets",
        )


def _answer_status(stream: Stream, code: grpc.StatusCode, message: str) -> None:
    """A call answered before it started: its status alone (trailers-only)."""
    stream.send_headers(trailers_only(CODE_NUMBERS[code], message), end_stream=True)
