"""The client port when TLS is on: one listener, routed by each connection's first byte.

A TLS connection starts with a handshake record (first byte 0x16); an HTTP/2 (gRPC)
plaintext connection starts with its preface ("PRI * HTTP/2.0", first byte 0x50). The front
door reads that byte, then joins the connection to gRPC's TLS or plaintext port on loopback
and copies bytes both ways until either side closes.

Invariants:
- Nothing waits on one connection at the expense of another: every connection is its own
  set of callbacks on the event loop.
- A connection that sends nothing within its first-byte timeout is closed; when either side
  of a joined pair closes, the other is closed too (after what is already buffered for it is
  written), so no socket outlives its partner.
- Copying is flow-controlled: a side whose outgoing buffer is full stops reading the other.
- In enforcing mode (no plaintext port) a plaintext connection is closed before it reaches
  gRPC, and the broker says so in at most one log line per REFUSAL_LOG_INTERVAL_S.
- gRPC sees the front door's loopback address as the peer; ``client_peer`` maps it back to
  the client's own address while the pair is open.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from ..rate_limited_log import RateLimitedLog

log = logging.getLogger(__name__)

TLS_HANDSHAKE = 0x16
FIRST_BYTE_TIMEOUT_S = 10.0
REFUSAL_LOG_INTERVAL_S = 60.0

# The loopback address gRPC sees ("ipv4:127.0.0.1:PORT") -> the client's address.
_joined_peers: dict[str, str] = {}


def client_peer(peer: str) -> str:
    """The client's own gRPC peer string when ``peer`` is the front door's side of a pair."""
    return _joined_peers.get(peer, peer)


def _peer_string(address: tuple) -> str:
    host, port = address[0], address[1]
    if ":" in host:
        return f"ipv6:[{host}]:{port}"
    return f"ipv4:{host}:{port}"


class _Side(asyncio.Protocol):
    """One socket of a joined pair; what it reads goes to its partner."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.partner: _Side | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        partner = self.partner
        if partner is not None and partner.transport is not None and not partner.closed:
            partner.transport.write(data)

    def eof_received(self) -> bool:
        return False  # close this side; connection_lost closes the partner

    def pause_writing(self) -> None:
        # Our outgoing buffer is full: stop reading what would be written to it.
        if self.partner is not None and self.partner.transport is not None:
            self.partner.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.partner is not None and self.partner.transport is not None:
            self.partner.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        partner = self.partner
        if partner is not None and partner.transport is not None and not partner.closed:
            partner.transport.close()


class _Backend(_Side):
    """The door's connection to a gRPC port: what gRPC sends goes to the client at once.

    gRPC speaks first (its SETTINGS), possibly before the door's join resumes, so the
    partner is set from the start.
    """

    def __init__(self, joined_as: list[str], client: _Client) -> None:
        super().__init__()
        self._joined_as = joined_as
        self.partner = client

    def connection_lost(self, exc: Exception | None) -> None:
        for key in self._joined_as:
            _joined_peers.pop(key, None)
        super().connection_lost(exc)


class _Client(_Side):
    """A client's connection: waits for its first byte, then is joined to a gRPC port."""

    def __init__(self, door: FrontDoor) -> None:
        super().__init__()
        self.door = door
        self._timer: asyncio.TimerHandle | None = None
        self._routed = False
        self._peer = ""
        # Held so the task is not collected before it runs.
        self._joining: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.door._clients.add(self)
        self._peer = _peer_string(transport.get_extra_info("peername") or ("?", 0))
        timeout = self.door.first_byte_timeout_s
        self._timer = asyncio.get_running_loop().call_later(timeout, transport.close)

    def data_received(self, data: bytes) -> None:
        if self._routed:
            super().data_received(data)
            return
        self._routed = True
        if self._timer is not None:
            self._timer.cancel()
        assert self.transport is not None
        target = self.door.tls_port if data[0] == TLS_HANDSHAKE else self.door.plaintext_port
        if target is None:
            self.door._refused_plaintext(self._peer)
            self.transport.abort()
            return
        # Nothing more is read until the pair is joined; then this chunk goes first.
        self.transport.pause_reading()
        self._joining = asyncio.get_running_loop().create_task(self._join(target, data))

    async def _join(self, port: int, first: bytes) -> None:
        joined_as: list[str] = []
        try:
            _, backend = await asyncio.get_running_loop().create_connection(
                lambda: _Backend(joined_as, self), "127.0.0.1", port
            )
        except OSError as exc:
            log.warning("cannot reach the broker's own gRPC port %d: %s", port, exc)
            if self.transport is not None:
                self.transport.close()
            return
        assert backend.transport is not None
        if self.closed:
            backend.transport.close()
            return
        local = backend.transport.get_extra_info("sockname")
        if local:
            key = _peer_string(local)
            joined_as.append(key)
            _joined_peers[key] = self._peer
        self.partner = backend
        backend.transport.write(first)
        if self.transport is not None:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.door._clients.discard(self)
        super().connection_lost(exc)


class FrontDoor:
    """Listens on ``listen`` and joins connections to gRPC's loopback ports.

    ``plaintext_port`` None: plaintext is refused (enforcing mode).
    """

    def __init__(
        self,
        listen: str,
        tls_port: int,
        plaintext_port: int | None,
        *,
        name: str = "--listen",
        first_byte_timeout_s: float = FIRST_BYTE_TIMEOUT_S,
    ) -> None:
        self.listen = listen
        self.tls_port = tls_port
        self.plaintext_port = plaintext_port
        self.port = 0
        self.first_byte_timeout_s = first_byte_timeout_s
        self._port_name = f"{name} {listen}"
        self._refusals = RateLimitedLog(REFUSAL_LOG_INTERVAL_S)
        self._clients: set[_Client] = set()
        self._server: asyncio.Server | None = None
        self._socket: socket.socket | None = None

    def _refused_plaintext(self, peer: str) -> None:
        count = self._refusals.due()
        if count is None:
            return
        log.warning(
            "refused %d plaintext connection(s) on %s (latest from %s): the broker runs with "
            "--tls-mode enforcing; connect with TLS, or start the broker with --tls-mode "
            "permissive to allow plaintext too",
            count,
            self._port_name,
            peer,
        )

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
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Client(self), sock=self._socket)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
        elif self._socket is not None:
            self._socket.close()

    @property
    def open_connections(self) -> int:
        """Client connections open through the door (waiting for a first byte or joined)."""
        return len(self._clients)

    async def stop(self) -> None:
        """Close the listener and every connection still open through it."""
        self.stop_accepting()
        if self.open_connections:
            log.info("closing %d connection(s) open on %s", self.open_connections, self.listen)
        for client in list(self._clients):
            if client.transport is not None:
                client.transport.close()
            if client.partner is not None and client.partner.transport is not None:
                client.partner.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


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
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
