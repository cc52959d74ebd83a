"""The client port: one listener; each connection's first byte says TLS or plaintext.

The replication port uses it too, TLS only, under mutual TLS (``ha.master_service``).

A TLS connection starts with a handshake record (first byte 0x16); an HTTP/2 (gRPC)
plaintext connection starts with its preface ("PRI * HTTP/2.0", first byte 0x50). The
listener peeks at that byte without taking it, then hands the socket to the event loop
with TLS (the handshake runs in the loop's native SSL) or without, for the server's
protocol to read from its first byte. No connection is relayed: the server talks to the
client's own socket. Without TLS there is nothing to tell apart and nothing is peeked.

Invariants:
- A connection that has not opened within ``preface_timeout_s`` of being accepted is
  closed: no first byte, an unfinished TLS handshake, or (for a protocol with an
  ``opened`` attribute, the gRPC server's) an unfinished opening of its own.
- A connection over ``counts``' limits is closed as soon as it is accepted; connections
  already open are untouched. Every connection accepted holds one seat in ``counts`` until
  its socket is closed, whichever way it ends.
- Out of descriptors or socket memory at accept, the listener stops accepting for
  ``accept_pause_s`` (the waiting connections stay in the kernel's backlog) instead of
  being woken again at once, and says so in at most one line per RESOURCE_LOG_INTERVAL_S.
- In enforcing mode a plaintext connection is closed before the server sees it, and the
  broker says so in at most one log line per REFUSAL_LOG_INTERVAL_S; failed TLS
  handshakes, preface timeouts and refusals over the limits are counted the same way, in
  lines of their own.
- Nothing waits on one connection at the expense of another: accepting, peeking and each
  handshake are callbacks and tasks of their own on the event loop.
- The certificate is asked for at every handshake (``tls_context``), so a renewed one is
  used from the next connection on.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import ssl
from collections.abc import Callable
from typing import cast

from ..rate_limited_log import RateLimitedLog
from .connection_limits import (
    ACCEPT_PAUSE_S,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_ADDRESS,
    PREFACE_TIMEOUT_S,
    ConnectionCounts,
    Seat,
)

log = logging.getLogger(__name__)

TLS_HANDSHAKE = 0x16
REFUSAL_LOG_INTERVAL_S = 60.0
# Running out of descriptors is urgent and may last: a line at once, then every 10 s.
RESOURCE_LOG_INTERVAL_S = 10.0
_ACCEPT_BACKLOG = 1024
# The loop may run a timer this much early (its clock's resolution).
_TIMER_SLACK_S = 0.01
# accept() errors that say the process or system is short of something: accepting again at
# once fails the same way.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

ProtocolFactory = Callable[[], asyncio.Protocol]
# What the port's owner says about a connection it refused, given the peer's address (None
# if it was gone): the TLS handshake failed (with why), or (enforcing) the connection did
# not start with one.
HandshakeFailed = Callable[[tuple | None, BaseException], None]
PlaintextRefused = Callable[[tuple | None], None]


class ClientListener:
    """Listens on ``listen`` for ``protocol_factory``'s connections.

    ``tls_context`` None: plaintext only. ``plaintext`` False (enforcing): only TLS.
    ``on_failed_handshake`` and ``on_plaintext_refused`` replace the client port's own
    log lines for another port (replication). ``counts`` admits connections (one
    instance may be shared by several listeners); None: a count of this listener's own
    with the default limits.
    """

    def __init__(
        self,
        listen: str,
        protocol_factory: ProtocolFactory,
        *,
        tls_context: Callable[[], ssl.SSLContext] | None = None,
        plaintext: bool = True,
        name: str = "--listen",
        preface_timeout_s: float = PREFACE_TIMEOUT_S,
        accept_pause_s: float = ACCEPT_PAUSE_S,
        counts: ConnectionCounts | None = None,
        on_failed_handshake: HandshakeFailed | None = None,
        on_plaintext_refused: PlaintextRefused | None = None,
    ) -> None:
        self.listen = listen
        self.port = 0
        self.preface_timeout_s = preface_timeout_s
        self.accept_pause_s = accept_pause_s
        self.counts = counts or ConnectionCounts(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS)
        self._factory = protocol_factory
        self._tls_context = tls_context
        self._plaintext = plaintext
        self._port_name = f"{name} {listen}"
        self._refusals = RateLimitedLog(REFUSAL_LOG_INTERVAL_S)
        self._handshake_failures = RateLimitedLog(REFUSAL_LOG_INTERVAL_S)
        self._over_limit = RateLimitedLog(REFUSAL_LOG_INTERVAL_S)
        self._preface_timeouts = RateLimitedLog(REFUSAL_LOG_INTERVAL_S)
        self._out_of_resources = RateLimitedLog(RESOURCE_LOG_INTERVAL_S)
        self._on_failed_handshake = on_failed_handshake or self._failed_handshake
        self._on_plaintext_refused = on_plaintext_refused or self._refused_plaintext
        self._socket: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Accepting stopped for a while (out of descriptors): the timer that resumes it.
        self._paused: asyncio.TimerHandle | None = None
        # Accepted, still waiting for a first byte or a handshake: what ends the wait,
        # and the connection's seat in ``counts``.
        self._waiting: dict[socket.socket, asyncio.TimerHandle | asyncio.Task[None]] = {}
        self._seats: dict[socket.socket, Seat] = {}

    def bind(self) -> int:
        """Take the port now (connections wait in the backlog until ``start``)."""
        host, _, port = self.listen.rpartition(":")
        try:
            self._socket = _listening_socket(host.strip("[]"), int(port))
        except OSError as exc:
            raise OSError(f"cannot listen on {self.listen}: {exc.strerror}") from None
        self.port = self._socket.getsockname()[1]
        return self.port

    async def start(self) -> None:
        assert self._socket is not None, "bind() first"
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._socket.fileno(), self._accept)

    def stop_accepting(self) -> None:
        """No new connections (those being accepted are dropped)."""
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        elif self._socket is not None and self._loop is not None:
            self._loop.remove_reader(self._socket.fileno())
        if self._socket is not None:
            self._socket.close()
        self._socket = None
        for sock, waiting in list(self._waiting.items()):
            waiting.cancel()
            if isinstance(waiting, asyncio.Task) and sock not in self._seats:
                # Its hand-over has begun (it took the seat): the loop's transport owns
                # the descriptor now and closes it as the cancellation reaches it.
                continue
            self._drop(sock)

    async def stop(self) -> None:
        self.stop_accepting()

    @property
    def waiting_connections(self) -> int:
        """Connections accepted that have not yet reached the server."""
        return len(self._waiting)

    # -- accepting ----------------------------------------------------------------

    def _accept(self) -> None:
        listening = self._socket
        loop = self._loop
        assert loop is not None
        for _ in range(64):
            if listening is None:
                return
            try:
                sock, address = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    # The connection stays in the backlog and the socket stays readable:
                    # waiting for readiness again would spin. Stop listening a while.
                    self._pause_accepting(exc)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    # That client gave up before it was accepted; the next may not have.
                    continue
                log.warning("cannot accept on %s: %s", self._port_name, exc)
                return
            seat = self.counts.seat(address[0])
            if seat is None:
                sock.close()
                self._refused_over_limit(address)
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._seats[sock] = seat
            deadline = loop.time() + self.preface_timeout_s
            if self._tls_context is None:
                # Nothing to tell apart: the server's protocol reads from the first byte.
                self._waiting[sock] = loop.create_task(self._hand_over(sock, None, deadline))
                continue
            timer = loop.call_later(self.preface_timeout_s, self._preface_timed_out, sock)
            self._waiting[sock] = timer
            loop.add_reader(sock.fileno(), self._first_byte, sock, deadline)

    def _pause_accepting(self, exc: OSError) -> None:
        loop = self._loop
        listening = self._socket
        assert loop is not None and listening is not None
        loop.remove_reader(listening.fileno())
        self._paused = loop.call_later(self.accept_pause_s, self._resume_accepting)
        count = self._out_of_resources.due()
        if count is None:
            return
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.error(
            "out of resources accepting on %s (%s; %d connection(s) open, descriptor limit "
            "%d): accepting paused for %gs (%d pause(s) since the last such line); raise the "
            "broker's descriptor limit (ulimit -n) or lower --max-connections",
            self._port_name,
            exc.strerror or exc,
            self.counts.open,
            soft,
            self.accept_pause_s,
            count,
        )

    def _resume_accepting(self) -> None:
        self._paused = None
        if self._socket is not None and self._loop is not None:
            self._loop.add_reader(self._socket.fileno(), self._accept)

    def _release(self, sock: socket.socket) -> None:
        seat = self._seats.pop(sock, None)
        if seat is not None:
            seat.release()

    def _drop(self, sock: socket.socket) -> None:
        self._waiting.pop(sock, None)
        self._release(sock)
        if self._loop is not None and sock.fileno() >= 0:
            self._loop.remove_reader(sock.fileno())
        sock.close()

    def _preface_timed_out(self, sock: socket.socket) -> None:
        self.note_preface_timeout(_address_of(sock))
        self._drop(sock)

    def _first_byte(self, sock: socket.socket, deadline: float) -> None:
        loop = self._loop
        assert loop is not None
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        timer = self._waiting.get(sock)
        if timer is not None:
            timer.cancel()
        loop.remove_reader(sock.fileno())
        if not first:
            self._drop(sock)
            return
        if first[0] == TLS_HANDSHAKE:
            assert self._tls_context is not None
            try:
                context = self._tls_context()
            except Exception:
                log.exception("no TLS certificate to answer a handshake with")
                self._drop(sock)
                return
            self._waiting[sock] = loop.create_task(self._hand_over(sock, context, deadline))
            return
        if not self._plaintext:
            self._on_plaintext_refused(_address_of(sock))
            self._drop(sock)
            return
        self._waiting[sock] = loop.create_task(self._hand_over(sock, None, deadline))

    async def _hand_over(
        self, sock: socket.socket, context: ssl.SSLContext | None, deadline: float
    ) -> None:
        loop = self._loop
        assert loop is not None
        # Read now: a failed handshake closes the socket.
        address = _address_of(sock)
        seat = self._seats.pop(sock)
        try:
            if context is None:
                await loop.connect_accepted_socket(
                    lambda: _Opening(self, self._factory(), seat, deadline), sock
                )
            else:
                await loop.connect_accepted_socket(
                    lambda: _Opening(self, self._factory(), seat, deadline),
                    sock,
                    ssl=context,
                    # What is left of the preface's time (the handshake is part of it).
                    ssl_handshake_timeout=max(deadline - loop.time(), 0.001),
                )
        except (TimeoutError, OSError, ssl.SSLError, ConnectionError) as exc:
            seat.release()
            # The loop reports a handshake past its timeout as an abort: tell it by the time.
            if isinstance(exc, TimeoutError) or loop.time() >= deadline - _TIMER_SLACK_S:
                self.note_preface_timeout(address)
            elif context is not None:
                self._on_failed_handshake(address, exc)
            sock.close()
        except BaseException:
            seat.release()
            raise
        finally:
            self._waiting.pop(sock, None)

    # -- log lines ----------------------------------------------------------------

    def note_preface_timeout(self, address: tuple | None) -> None:
        count = self._preface_timeouts.due()
        if count is None:
            return
        log.info(
            "closed %d connection(s) on %s that did not open within %gs (latest from %s): "
            "a client must finish TLS and send the HTTP/2 preface in that time "
            "(--preface-timeout)",
            count,
            self._port_name,
            self.preface_timeout_s,
            _peer_of(address),
        )

    def _refused_over_limit(self, address: tuple) -> None:
        count = self._over_limit.due()
        if count is None:
            return
        counts = self.counts
        log.warning(
            "refused %d connection(s) on %s over the connection limits (latest from %s, "
            "which has %d open; %d open in all, limits %d per address and %d in all): "
            "raise --max-connections-per-address or --max-connections if these clients "
            "are expected",
            count,
            self._port_name,
            _peer_of(address),
            counts.of_address(address[0]),
            counts.open,
            counts.max_per_address,
            counts.max_total,
        )

    def _failed_handshake(self, address: tuple | None, exc: BaseException) -> None:
        count = self._handshake_failures.due()
        if count is None:
            return
        log.info(
            "%d TLS handshake(s) failed on %s (latest from %s: %s); a client that cannot "
            "connect should offer TLS 1.2 or newer and HTTP/2 (gRPC clients do)",
            count,
            self._port_name,
            _peer_of(address),
            str(exc) or type(exc).__name__,
        )

    def _refused_plaintext(self, address: tuple | None) -> None:
        count = self._refusals.due()
        if count is None:
            return
        log.warning(
            "refused %d plaintext connection(s) on %s (latest from %s): the broker runs with "
            "--tls-mode enforcing; connect with TLS, or start the broker with --tls-mode "
            "permissive to allow plaintext too",
            count,
            self._port_name,
            _peer_of(address),
        )


class _Opening(asyncio.Protocol):
    """A connection handed to its protocol (``inner``), still holding its seat.

    The seat is released when the connection is lost. If ``inner`` has an ``opened``
    attribute, the connection is closed at ``deadline`` unless ``opened`` is true by
    then. Data and flow control go to ``inner`` straight (its own bound methods), so the
    wrapper costs nothing per read.
    """

    def __init__(
        self, listener: ClientListener, inner: asyncio.Protocol, seat: Seat, deadline: float
    ) -> None:
        self._listener = listener
        self._inner = inner
        self._seat = seat
        self._deadline = deadline
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.data_received = inner.data_received  # type: ignore[method-assign]
        self.eof_received = inner.eof_received  # type: ignore[method-assign]
        self.pause_writing = inner.pause_writing  # type: ignore[method-assign]
        self.resume_writing = inner.resume_writing  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server's connections are full transports (they can be aborted).
        self._transport = cast(asyncio.Transport, transport)
        self._inner.connection_made(transport)
        if not getattr(self._inner, "opened", True):
            self._timer = asyncio.get_running_loop().call_at(self._deadline, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._seat.release()
        self._inner.connection_lost(exc)

    def _check(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None or transport.is_closing() or getattr(self._inner, "opened", True):
            return
        self._listener.note_preface_timeout(transport.get_extra_info("peername"))
        transport.abort()


def _address_of(sock: socket.socket) -> tuple | None:
    try:
        return sock.getpeername()
    except OSError:
        return None


def _peer_of(address: tuple | None) -> str:
    return "an unknown address" if address is None else peer_string(address)


def peer_string(address: tuple) -> str:
    """A socket address as gRPC names peers: ``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``."""
    host, port = address[0], address[1]
    if ":" in host:
        if host.startswith("::ffff:") and "." in host:
            return f"ipv4:{host[7:]}:{port}"
        return f"ipv6:[{host}]:{port}"
    return f"ipv4:{host}:{port}"


def _listening_socket(host: str, port: int) -> socket.socket:
    """One socket for HOST:PORT; "::" or "" takes IPv4 too (dual stack), like gRPC's."""
    if host in ("", "::"):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        host = "::"
    else:
        family, _, _, _, _ = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_ACCEPT_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
