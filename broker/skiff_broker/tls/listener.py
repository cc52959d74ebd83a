"""The client port: one listener; each connection's first byte says TLS or plaintext.

The replication port uses it too, TLS only, under mutual TLS (``ha.master_service``).

A TLS connection starts with a handshake record (first byte 0x16); an HTTP/2 (gRPC)
plaintext connection starts with its preface ("PRI * HTTP/2.0", first byte 0x50). The
listener peeks at that byte without taking it, then hands the socket to the event loop
with TLS (the handshake runs in the loop's native SSL) or without, for the server's
protocol to read from its first byte. No connection is relayed: the server talks to the
client's own socket.

Invariants:
- A connection that sends nothing within its first-byte timeout is closed.
- In enforcing mode a plaintext connection is closed before the server sees it, and the
  broker says so in at most one log line per REFUSAL_LOG_INTERVAL_S; failed TLS
  handshakes are counted the same way, in lines of their own.
- Nothing waits on one connection at the expense of another: accepting, peeking and each
  handshake are callbacks and tasks of their own on the event loop.
- The certificate is asked for at every handshake (``tls_context``), so a renewed one is
  used from the next connection on.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable

from ..rate_limited_log import RateLimitedLog

log = logging.getLogger(__name__)

TLS_HANDSHAKE = 0x16
FIRST_BYTE_TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = 10.0
REFUSAL_LOG_INTERVAL_S = 60.0
_ACCEPT_BACKLOG = 1024

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
    log lines for another port (replication).
    """

    def __init__(
        self,
        listen: str,
        protocol_factory: ProtocolFactory,
        *,
        tls_context: Callable[[], ssl.SSLContext] | None = None,
        plaintext: bool = True,
        name: str = "--listen",
        first_byte_timeout_s: float = FIRST_BYTE_TIMEOUT_S,
        on_failed_handshake: HandshakeFailed | None = None,
        on_plaintext_refused: PlaintextRefused | None = None,
    ) -> None:
        self.listen = listen
        self.port = 0
        self.first_byte_timeout_s = first_byte_timeout_s
        self._factory = protocol_factory
        self._tls_context = tls_context
        self._plaintext = plaintext
        self._port_name = f"{name} {listen}"
        self._refusals = RateLimitedLog(REFUSAL_LOG_INTERVAL_S)
        self._handshake_failures = RateLimitedLog(REFUSAL_LOG_INTERVAL_S)
        self._on_failed_handshake = on_failed_handshake or self._failed_handshake
        self._on_plaintext_refused = on_plaintext_refused or self._refused_plaintext
        self._socket: socket.socket | None = None
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Accepted, still waiting for a first byte or a handshake.
        self._waiting: dict[socket.socket, asyncio.TimerHandle | asyncio.Task[None]] = {}

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
        loop = self._loop = asyncio.get_running_loop()
        if self._tls_context is None:
            # Nothing to tell apart: the loop accepts straight into the server's protocol.
            self._server = await loop.create_server(self._factory, sock=self._socket)
            return
        loop.add_reader(self._socket.fileno(), self._accept)

    def stop_accepting(self) -> None:
        """No new connections (those being accepted are dropped)."""
        if self._server is not None:
            self._server.close()
        elif self._socket is not None:
            if self._loop is not None:
                self._loop.remove_reader(self._socket.fileno())
            self._socket.close()
        self._socket = None
        for sock, waiting in list(self._waiting.items()):
            waiting.cancel()
            self._drop(sock)

    async def stop(self) -> None:
        self.stop_accepting()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

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
                sock, _ = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of descriptors, say: the rest wait in the backlog.
                if exc.errno not in (errno.ECONNABORTED, errno.EPROTO):
                    log.warning("cannot accept on %s: %s", self._port_name, exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            timer = loop.call_later(self.first_byte_timeout_s, self._drop, sock)
            self._waiting[sock] = timer
            loop.add_reader(sock.fileno(), self._first_byte, sock)

    def _drop(self, sock: socket.socket) -> None:
        self._waiting.pop(sock, None)
        if self._loop is not None and sock.fileno() >= 0:
            self._loop.remove_reader(sock.fileno())
        sock.close()

    def _first_byte(self, sock: socket.socket) -> None:
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
            self._waiting[sock] = loop.create_task(self._hand_over(sock, context))
            return
        if not self._plaintext:
            self._on_plaintext_refused(_address_of(sock))
            self._drop(sock)
            return
        self._waiting[sock] = loop.create_task(self._hand_over(sock, None))

    async def _hand_over(self, sock: socket.socket, context: ssl.SSLContext | None) -> None:
        loop = self._loop
        assert loop is not None
        # Read now: a failed handshake closes the socket.
        address = _address_of(sock)
        try:
            if context is None:
                await loop.connect_accepted_socket(self._factory, sock)
            else:
                await loop.connect_accepted_socket(
                    self._factory,
                    sock,
                    ssl=context,
                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
                )
        except (TimeoutError, OSError, ssl.SSLError, ConnectionError) as exc:
            if context is not None:
                self._on_failed_handshake(address, exc)
            sock.close()
        finally:
            self._waiting.pop(sock, None)

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
