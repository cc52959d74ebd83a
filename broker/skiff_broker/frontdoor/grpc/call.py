"""One gRPC call on one HTTP/2 stream: its messages, its handler, its answer.

A call is the stream's handler (it hears the request's DATA, a reset, room to write) and
the handler's ``context`` (the subset of ``grpc.aio.ServicerContext`` the broker's
services, interceptors and grpc's health service use), so services written for grpc.aio
run unchanged.

Invariants:
- A call answers exactly once: trailers with a status, or a reset; never both, never
  twice. A call the client reset, or whose deadline passed, sends nothing more.
- A request message is taken whole, and held against the connection's and the broker's
  budgets until its handler takes it (``request_window``): a large one is granted
  window in steps once room for it is reserved, never for the whole announced message at
  once; a streaming call's window is given back only as its handler takes messages, so a
  handler that stops reading stops the client. A message that does not arrive in full
  within the server's ``message_timeout`` ends its call (DEADLINE_EXCEEDED, saying so).
- A streaming response waits while its stream or the connection cannot take more.
- The handler's failures become statuses: an abort its code, anything else UNKNOWN
  (logged); the broker's services answer their own errors before that (``boundary``).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from ... import send_timeline
from ..http2 import frames as fr
from ..http2.connection import Stream
from .grpc_headers import (
    CODE_NUMBERS,
    OK_TRAILERS,
    RESPONSE_HEADERS,
    Metadatum,
    RequestHeaders,
    response_headers,
    trailers,
    trailers_only,
)
from .message_framing import PREFIX as _PREFIX
from .message_framing import MessageTooLarge
from .request_window import RequestWindow

if TYPE_CHECKING:
    from .server import ServedConnection

log = logging.getLogger(__name__)

_OK = grpc.StatusCode.OK

# A response's headers frame and the header of its one DATA frame, for a unary answer.
_HEADERS_FRAME = struct.Struct(f">IBI{len(RESPONSE_HEADERS)}s")
_DATA_FRAME = struct.Struct(">IBIBI")


class ServerCall(grpc.aio.ServicerContext):
    __slots__ = (
        "_cancelled",
        "_code",
        "_connection",
        "_deadline",
        "_deadline_timer",
        "_details",
        "_done_callbacks",
        "_handler",
        "_headers_sent",
        "_initial_metadata",
        "_intercepted",
        "_message",
        "_metadata",
        "_requests",
        "_stamps",
        "_task",
        "_trailing_metadata",
        "_window",
        "_writable",
        "finished",
        "request_headers",
        "stream",
    )

    def __init__(
        self,
        connection: ServedConnection,
        stream: Stream,
        request_headers: RequestHeaders,
        handler: grpc.RpcMethodHandler,
        *,
        intercepted: bool = False,
    ) -> None:
        """``handler`` is the method's own; ``intercepted``: the server's interceptors
        give the one to run (in the call's task: they are coroutines)."""
        self._connection = connection
        self.stream = stream
        self.request_headers = request_headers
        self._handler = handler
        self._intercepted = intercepted
        self._cancelled = False
        server = connection.server
        self._window = RequestWindow(
            stream, server.max_message, connection.stall_watch, self._stalled
        )
        self._message: bytes | None = None
        self._task: asyncio.Task[None] | None = None
        self.finished = False
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._metadata: tuple[Metadatum, ...] | None = None
        self._trailing_metadata: tuple = ()
        self._initial_metadata: tuple = ()
        self._headers_sent = False
        self._done_callbacks: list[Callable[[Any], None]] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._requests: _RequestStream | None = None
        self._deadline: float | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._stamps: send_timeline.Stamps | None = None
        timeout = request_headers.timeout
        if timeout is not None:
            loop = connection.loop
            self._deadline = loop.time() + timeout
            self._deadline_timer = loop.call_at(self._deadline, self._deadline_passed)
        if handler.request_streaming:
            self._requests = _RequestStream(self)
            self._start()
        else:
            # A unary call's request must end in time, from its headers on.
            self._window.start()

    # -- the stream's events ------------------------------------------------------

    def data_received(self, data: bytes, end_stream: bool) -> None:
        if self.finished:
            return
        if self._requests is not None:
            self._requests.received(data, end_stream)
            return
        window = self._window
        try:
            messages = window.feed(data)
        except MessageTooLarge as large:
            self._refuse_large(large.length)
            return
        if messages:
            if len(messages) > 1 or self._message is not None:
                self._fail_now(grpc.StatusCode.INTERNAL, "a unary call carried two messages")
                return
            flags, message, _ = messages[0]
            self._message = self._inflate(flags, message)
            if self._message is None:
                return
        window.arrived(end_stream)
        if end_stream:
            if self._message is None:
                self._fail_now(grpc.StatusCode.INTERNAL, "the request ended without its message")
                return
            if not window.reader.between_messages:
                self._fail_now(grpc.StatusCode.INTERNAL, "a unary call carried two messages")
                return
            self._start()

    def reset(self, code: int) -> None:
        """The client reset the stream (or the connection is gone): nothing more is sent."""
        if self.finished:
            return
        self.finished = True
        self._cancelled = True
        self._cancel_work()
        self._call_done_callbacks()

    def writable(self) -> None:
        _release(self._writable)

    def room_reserved(self) -> None:
        if not self.finished:
            self._window.room_reserved()

    def _stalled(self) -> None:
        """The request message did not arrive in time: the call ends, its buffer freed."""
        if self.finished:
            return
        timeout = self._connection.server.message_timeout
        self._fail_now(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"the request message did not arrive in full within {timeout:g} s (the broker's "
            "--request-message-timeout), so the broker dropped it; send it again, and for a "
            "large message over a slow link raise that limit",
        )

    # -- running the handler -----------------------------------------------------

    def _start(self) -> None:
        base = self._connection.server.call_context
        context = None if base is None else base.copy()
        if send_timeline.ON and self.request_headers.path == send_timeline.SEND_METHOD:
            self._stamps = send_timeline.start(self._connection.received_ns)
        # Named for its method: a slow-callback report then says which call held the loop.
        self._task = self._connection.loop.create_task(
            self._run(), name=self.request_headers.path, context=context
        )

    async def _run(self) -> None:
        if send_timeline.ON and self._stamps is not None:
            send_timeline.enter(self._stamps)
        try:
            handler = self._handler
            if self._intercepted:
                handler = await self._connection.server.intercept(self, handler)
                if handler is None:
                    self._finish(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
                    return
                if handler.request_streaming != self._handler.request_streaming:
                    raise RuntimeError("an interceptor changed whether the method streams")
                self._handler = handler
            if handler.request_streaming:
                request: Any = self._requests
            else:
                request = _deserialized(handler, self._message)
                self._message = None
                # Taken: the client may send as much again. (Unreserved first: a release
                # under the reservation would open the window for it again.)
                stream = self.stream
                stream.unreserve()
                stream.release(stream.held)
            if handler.response_streaming:
                await self._serve_stream(handler, request)
            else:
                await self._serve_unary(handler, request)
        except grpc.aio.AbortError:
            self._finish(self._code or grpc.StatusCode.UNKNOWN, self._details)
        except asyncio.CancelledError:
            if not self.finished:
                # Cancelled from outside (the server stopping): the stream is reset.
                self.finished = self._cancelled = True
                self.stream.reset(fr.ErrorCode.CANCEL)
                self._call_done_callbacks()
            raise
        except _BadRequest as bad:
            self._finish(bad.code, bad.details)
        except Exception as exc:
            if self.finished:
                # The client went away or the deadline passed: nobody hears of it.
                log.debug("%s failed after its call ended: %r", self.request_headers.path, exc)
                return
            log.exception("%s failed", self.request_headers.path)
            self._finish(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc).__name__}: {exc}")

    async def _serve_unary(self, handler: grpc.RpcMethodHandler, request: Any) -> None:
        behavior = handler.stream_unary if handler.request_streaming else handler.unary_unary
        response = behavior(request, self)
        if inspect.isawaitable(response):
            response = await response
        if self.finished:
            return
        if self._code is not None and self._code is not _OK:
            self._finish(self._code, self._details)
            return
        serialize = handler.response_serializer
        body = serialize(response) if serialize is not None else response
        self._send_unary(body)

    def _send_unary(self, body: bytes) -> None:
        """Headers, the one message and the trailers: one write when the windows allow."""
        self.finished = True
        self._close_timer()
        if send_timeline.ON and self._stamps is not None:
            self._stamps[send_timeline.ANSWERED] = send_timeline.now()
            self._connection.answered.append(self._stamps)
        stream = self.stream
        size = len(body) + 5
        sid = stream.id
        if not self._headers_sent and not self._trailing_metadata and not self._details:
            framed = b"".join(
                (
                    _HEADERS_FRAME.pack(
                        len(RESPONSE_HEADERS) << 8 | fr.HEADERS,
                        fr.END_HEADERS,
                        sid,
                        RESPONSE_HEADERS,
                    ),
                    _DATA_FRAME.pack(size << 8 | fr.DATA, 0, sid, 0, len(body)),
                    body,
                    fr.HEADER.pack(
                        len(OK_TRAILERS) << 8 | fr.HEADERS, fr.END_HEADERS | fr.END_STREAM, sid
                    ),
                    OK_TRAILERS,
                )
            )
            if stream.send_response(framed, size):
                self._call_done_callbacks()
                return
        self._send_headers()
        stream.send_data(_PREFIX.pack(0, len(body)) + body)
        stream.send_trailers(trailers(0, self._details, self._trailing_metadata))
        self._call_done_callbacks()

    async def _serve_stream(self, handler: grpc.RpcMethodHandler, request: Any) -> None:
        behavior = handler.stream_stream if handler.request_streaming else handler.unary_stream
        responses = behavior(request, self)
        if inspect.isasyncgen(responses):
            async for response in responses:
                await self.write(response)
        elif inspect.isawaitable(responses):
            await responses  # the handler wrote with context.write()
        elif responses is not None:
            for response in responses:
                await self.write(response)
        if not self.finished:
            self._finish(self._code or _OK, self._details)

    def _finish(self, code: grpc.StatusCode, details: str) -> None:
        """End the call with ``code`` (the trailers, or a trailers-only answer)."""
        if self.finished:
            return
        self.finished = True
        self._close_timer()
        number = CODE_NUMBERS.get(code, 2)
        if self._headers_sent:
            self.stream.send_trailers(trailers(number, details, self._trailing_metadata))
        else:
            self.stream.send_headers(
                trailers_only(number, details, self._trailing_metadata), end_stream=True
            )
        self._call_done_callbacks()

    def _fail_now(self, code: grpc.StatusCode, details: str) -> None:
        """End a call whose request broke the rules before a handler ran."""
        self._finish(code, details)
        self._cancel_work()

    def _refuse_large(self, length: int) -> None:
        limit = self._connection.server.max_message
        self._fail_now(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the request message is {length} bytes, over the broker's limit of {limit}",
        )

    def _inflate(self, flags: int, message: bytes) -> bytes | None:
        """The message's bytes, decompressed if its prefix says so (None: refused)."""
        if not flags:
            return message
        encoding = self.request_headers.encoding
        limit = self._connection.server.max_message
        try:
            if encoding == "gzip":
                inflated = _bounded(zlib.decompressobj(16 + zlib.MAX_WBITS), message, limit)
            elif encoding == "deflate":
                inflated = _bounded(zlib.decompressobj(), message, limit)
            else:
                self._fail_now(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"messages compressed as {encoding or 'identity'!r} are not supported; "
                    "send gzip or uncompressed",
                )
                return None
        except (zlib.error, ValueError) as exc:
            self._fail_now(grpc.StatusCode.INTERNAL, f"the compressed message is corrupt: {exc}")
            return None
        if inflated is None:
            self._refuse_large(limit + 1)
        return inflated

    def _deadline_passed(self) -> None:
        self._deadline_timer = None
        if self.finished:
            return
        self._cancelled = True
        self._finish(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        self._cancel_work()

    def _cancel_work(self) -> None:
        self._close_timer()
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        if self._requests is not None:
            self._requests.cancel()
        self.writable()

    def _close_timer(self) -> None:
        self._window.stop()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    def _call_done_callbacks(self) -> None:
        callbacks = self._done_callbacks
        if callbacks:
            self._done_callbacks = None
            for callback in callbacks:
                try:
                    callback(self)
                except Exception:
                    log.exception("a done callback of %s failed", self.request_headers.path)

    def _send_headers(self) -> None:
        if not self._headers_sent:
            self._headers_sent = True
            self.stream.send_headers(response_headers(self._initial_metadata))

    # -- grpc.aio.ServicerContext ------------------------------------------------

    def invocation_metadata(self) -> tuple[Metadatum, ...]:
        if self._metadata is None:
            self._metadata = self.request_headers.metadata()
        return self._metadata

    def metadata_value(self, key: str) -> str | None:
        """One text metadata value, without building ``invocation_metadata()`` (which
        costs a few microseconds a call): what the broker reads per request."""
        return self.request_headers.value(key)

    def peer(self) -> str:
        return self._connection.peer

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - self._connection.loop.time())

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: tuple = ()
    ) -> None:
        if code is _OK:
            raise ValueError("abort() needs an error code, not OK")
        self._code = code
        self._details = details
        if trailing_metadata:
            self._trailing_metadata = tuple(trailing_metadata)
        raise grpc.aio.AbortError(details)

    async def abort_with_status(self, status: Any) -> None:
        """``abort`` from a ``grpc.Status`` (code, details, trailing metadata)."""
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, trailing_metadata: tuple) -> None:
        self._trailing_metadata = tuple(trailing_metadata)

    def trailing_metadata(self) -> tuple:
        return self._trailing_metadata

    async def send_initial_metadata(self, initial_metadata: tuple) -> None:
        if self._headers_sent:
            raise RuntimeError("the response's headers were already sent")
        self._initial_metadata = tuple(initial_metadata)
        self._send_headers()

    async def write(self, message: Any) -> None:
        """Send one response message; waits while the client is not taking them."""
        if self.finished:
            raise asyncio.CancelledError
        serialize = self._handler.response_serializer
        body = serialize(message) if serialize is not None else message
        self._send_headers()
        stream = self.stream
        stream.send_data(_PREFIX.pack(0, len(body)) + body)
        connection = self._connection
        while not self.finished and (stream.blocked or connection.paused):
            self._writable = connection.loop.create_future()
            if connection.paused:
                connection.writers.add(self)
            try:
                await self._writable
            finally:
                self._writable = None
                connection.writers.discard(self)

    async def read(self) -> Any:
        if self._requests is None:
            raise RuntimeError("read() is for calls that stream their requests")
        try:
            return await self._requests.__anext__()
        except StopAsyncIteration:
            return grpc.aio.EOF

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self.finished

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self.finished:
            callback(self)
            return
        if self._done_callbacks is None:
            self._done_callbacks = []
        self._done_callbacks.append(callback)

    def set_compression(self, compression: Any) -> None:
        """Responses go uncompressed."""

    def disable_next_message_compression(self) -> None:
        """Responses go uncompressed."""

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None


def _deserialized(handler: grpc.RpcMethodHandler, message: bytes | None) -> Any:
    """A request message as the handler takes it; a message that does not parse is the
    client's error (INTERNAL, as gRPC answers it)."""
    deserialize = handler.request_deserializer
    if deserialize is None:
        return message
    try:
        return deserialize(message)
    except Exception as exc:
        raise _BadRequest(
            grpc.StatusCode.INTERNAL, f"a request message could not be deserialized: {exc}"
        ) from None


def _release(waiter: asyncio.Future[None] | None) -> None:
    """Let whoever awaits ``waiter`` go on (once)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class _BadRequest(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def _bounded(inflater: Any, data: bytes, limit: int) -> bytes | None:
    """``data`` inflated, or None when it would be over ``limit`` bytes."""
    out = inflater.decompress(data, limit + 1)
    if len(out) > limit or inflater.unconsumed_tail:
        return None
    if not inflater.eof:
        raise ValueError("the compressed data ends early")
    return out


class _RequestStream:
    """A streaming call's request messages, as an async iterator for its handler."""

    def __init__(self, call: ServerCall) -> None:
        self._call = call
        self._window = call._window
        self._reader = call._window.reader
        # Each waiting message, its framed size and the room reserved for it.
        self._messages: collections.deque[tuple[bytes, int, int]] = collections.deque()
        self._queued = 0  # octets of the messages waiting to be taken
        self._ended = False
        self._cancelled = False
        self._waiter: asyncio.Future[None] | None = None

    def received(self, data: bytes, end_stream: bool) -> None:
        call = self._call
        window = self._window
        try:
            messages = window.feed(data)
        except MessageTooLarge as large:
            call._refuse_large(large.length)
            return
        for flags, message, claim in messages:
            inflated = call._inflate(flags, message)
            if inflated is None:
                return
            self._messages.append((inflated, len(message) + 5, claim))
            self._queued += len(message) + 5
        between = self._reader.between_messages
        window.arrived(between or end_stream, began=bool(messages) and not between)
        if end_stream:
            self._ended = True
            if not self._reader.between_messages:
                call._fail_now(grpc.StatusCode.INTERNAL, "the request ended inside a message")
                return
        self._wake()

    def cancel(self) -> None:
        self._cancelled = True
        self._wake()

    def _wake(self) -> None:
        _release(self._waiter)

    def __aiter__(self) -> _RequestStream:
        return self

    async def __anext__(self) -> Any:
        while not self._messages:
            if self._cancelled:
                raise asyncio.CancelledError
            if self._ended:
                raise StopAsyncIteration
            self._waiter = self._call._connection.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        message, size, claim = self._messages.popleft()
        self._queued -= size
        self._window.taken(size, claim)
        # Taken: the client may send again, as far as what waits here and what it may
        # still send stay within the stream's usual window.
        stream = self._call.stream
        stream.grant(fr.DEFAULT_WINDOW - stream.recv_window - self._queued - self._reader.buffered)
        return _deserialized(self._call._handler, message)
