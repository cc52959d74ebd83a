"""The client port's listener with the broker's gRPC server and real client sockets."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import socket
import ssl
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import uvloop

from skiff_broker.client.channels import ClientTls, aio_channel, channel
from skiff_broker.frontdoor import listener as listener_module
from skiff_broker.frontdoor.grpc.server import RpcServer
from skiff_broker.frontdoor.listener import ClientListener
from skiff_broker.tls.certificates import ReloadingCertificate, self_signed

SERVICE = "test.Echo"
LOOPS = ["asyncio", "uvloop"]


def _run(loop: str, scenario) -> None:  # type: ignore[no-untyped-def]
    if loop == "uvloop":
        uvloop.run(scenario())
    else:
        asyncio.run(scenario())


def _echo_server(seen_peers: list[str]) -> RpcServer:
    """Echoes; notes each caller's address as the service sees it."""

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen_peers.append(context.peer())
        return request

    handlers = {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    server = RpcServer()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    return server


async def _call(endpoint: str, tls: ClientTls) -> bytes:
    if not tls.verify:
        # Fetching the certificate to trust blocks; the server runs on this loop.
        return await asyncio.to_thread(_blocking_call, endpoint, tls)
    async with aio_channel(endpoint, tls=tls) as ch:
        echo = ch.unary_unary(f"/{SERVICE}/Echo")
        return await echo(b"ping", timeout=30)


def _blocking_call(endpoint: str, tls: ClientTls) -> bytes:
    with channel(endpoint, tls=tls) as ch:
        return ch.unary_unary(f"/{SERVICE}/Echo")(b"ping", timeout=30)


async def _closed_by_peer(sock: socket.socket) -> bool:
    loop = asyncio.get_running_loop()
    try:
        while await loop.sock_recv(sock, 4096):
            pass
    except ConnectionResetError:
        pass
    return True


@dataclasses.dataclass
class Served:
    server: RpcServer
    listener: ClientListener
    port: int
    cert: str

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, *, plaintext: bool, timeout: float = 10.0, seen: list[str] | None = None
) -> AsyncIterator[Served]:
    """The echo server behind a listening client port: TLS with a self-signed certificate,
    and plaintext too if ``plaintext``; ``timeout`` is the preface timeout."""
    server = _echo_server(seen if seen is not None else [])
    cert, key = self_signed(str(tmp_path), ["localhost", "127.0.0.1"])
    listener = ClientListener(
        "127.0.0.1:0",
        server.protocol,
        tls_context=ReloadingCertificate(cert, key).ssl_context,
        plaintext=plaintext,
        preface_timeout_s=timeout,
    )
    port = listener.bind()
    await listener.start()
    try:
        yield Served(server, listener, port, cert)
    finally:
        await listener.stop()
        await server.stop(0)


@pytest.mark.parametrize("loop", LOOPS)
def test_tls_and_plaintext_share_the_port_and_the_service_sees_the_client(tmp_path, loop):
    seen: list[str] = []

    async def scenario() -> None:
        async with serving(tmp_path, plaintext=True, seen=seen) as served:
            assert await _call(served.endpoint, ClientTls()) == b"ping"
            assert await _call(served.endpoint, ClientTls(True, served.cert)) == b"ping"
            assert await _call(served.endpoint, ClientTls(True, verify=False)) == b"ping"

    _run(loop, scenario)
    # No relay in between: each call comes from the client's own socket.
    assert len(seen) == 3
    assert all(p.startswith("ipv4:127.0.0.1:") for p in seen)


def test_tls_offers_http2_by_alpn_and_nothing_older_than_tls_1_2(tmp_path):
    async def scenario() -> None:
        async with serving(tmp_path, plaintext=False) as served:
            port = served.port
            client = ssl.create_default_context()
            client.check_hostname = False
            client.verify_mode = ssl.CERT_NONE
            client.set_alpn_protocols(["h2", "http/1.1"])
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
            assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
            writer.close()
            old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            old.check_hostname = False
            old.verify_mode = ssl.CERT_NONE
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1 is, indeed
                old.maximum_version = ssl.TLSVersion.TLSv1_1
                old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await asyncio.open_connection("127.0.0.1", port, ssl=old)

    uvloop.run(scenario())


@pytest.mark.parametrize("loop", LOOPS)
def test_a_silent_connection_neither_blocks_others_nor_stays_open(tmp_path, loop):
    async def scenario() -> None:
        async with serving(tmp_path, plaintext=True, timeout=0.5) as served:
            with socket.create_connection(("127.0.0.1", served.port)) as silent:
                silent.setblocking(False)
                # While the silent one says nothing, another client is served.
                assert await _call(served.endpoint, ClientTls()) == b"ping"
                assert await asyncio.wait_for(_closed_by_peer(silent), 30)
                assert served.listener.waiting_connections == 0

    _run(loop, scenario)


def test_enforcing_closes_plaintext_and_counts_it_in_one_log_line(tmp_path, caplog):
    async def scenario() -> None:
        async with serving(tmp_path, plaintext=False) as served:
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await _call(served.endpoint, ClientTls())
                assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
            assert await _call(served.endpoint, ClientTls(True, served.cert)) == b"ping"

    caplog.set_level("WARNING", logger=listener_module.__name__)
    uvloop.run(scenario())
    lines = [r.getMessage() for r in caplog.records if "plaintext" in r.getMessage()]
    assert len(lines) == 1
    assert "--tls-mode permissive" in lines[0]


def test_failed_handshakes_are_counted_in_one_log_line(tmp_path, caplog):
    async def scenario() -> None:
        async with serving(tmp_path, plaintext=False) as served:
            port, listener = served.port, served.listener
            for _ in range(3):
                # A handshake record whose content is no ClientHello.
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"\x16\x03\x01\x00\x05hello")
                # The broker answers with an alert, or closes.
                await asyncio.wait_for(reader.read(4096), 10)
                writer.close()
            deadline = asyncio.get_running_loop().time() + 10
            while listener.waiting_connections and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)

    caplog.set_level("INFO", logger=listener_module.__name__)
    uvloop.run(scenario())
    lines = [r.getMessage() for r in caplog.records if "handshake" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("1 TLS handshake(s) failed") and "TLS 1.2 or newer" in lines[0]


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("loop", LOOPS)
def test_hostile_connections_are_closed_and_leave_nothing_open(tmp_path, loop):
    """Garbage, truncated handshakes and early closes: each ends, none is left behind,
    and a real client is served throughout."""

    async def scenario() -> None:
        rng = random.Random(7)
        async with serving(tmp_path, plaintext=True, timeout=1.0) as served:
            server, listener, port, endpoint = (
                served.server,
                served.listener,
                served.port,
                served.endpoint,
            )
            assert await _call(endpoint, ClientTls()) == b"ping"
            before = _open_descriptors()
            for i in range(60):
                _reader, writer = await asyncio.open_connection("127.0.0.1", port)
                kind = i % 5
                if kind == 1:
                    writer.write(bytes([rng.randrange(256)]))
                elif kind == 2:
                    writer.write(os.urandom(rng.randrange(1, 5000)))
                elif kind == 3:
                    # A TLS record header, then noise.
                    writer.write(b"\x16\x03\x01" + os.urandom(300))
                elif kind == 4:
                    # The HTTP/2 preface, then noise where frames belong.
                    writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(200))
                if kind:
                    with contextlib.suppress(ConnectionError):
                        await writer.drain()
                writer.close()
            assert await _call(endpoint, ClientTls()) == b"ping"
            deadline = asyncio.get_running_loop().time() + 20
            while (
                listener.waiting_connections or server.connections or _open_descriptors() > before
            ) and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            assert listener.waiting_connections == 0
            assert not server.connections
            assert _open_descriptors() <= before

    _run(loop, scenario)


class _StopsItsListener(asyncio.Protocol):
    """A server protocol that stops the listener as its connection is handed over, as a
    replication master stepping down does while replicas are reconnecting."""

    def __init__(self, listener: list[ClientListener], stopped: list[BaseException | None]):
        self._listener = listener
        self._stopped = stopped

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        try:
            self._listener[0].stop_accepting()
        except BaseException as exc:  # reported by the test
            self._stopped.append(exc)
        else:
            self._stopped.append(None)


@pytest.mark.parametrize("loop", LOOPS)
def test_stopping_while_a_connection_is_handed_over_closes_it(loop: str) -> None:
    async def scenario() -> None:
        holder: list[ClientListener] = []
        stopped: list[BaseException | None] = []
        listener = ClientListener("127.0.0.1:0", lambda: _StopsItsListener(holder, stopped))
        holder.append(listener)
        port = listener.bind()
        await listener.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # The listener closes the connection it was handing over: the client reads EOF.
        assert await asyncio.wait_for(reader.read(), 20) == b""
        writer.close()
        assert stopped == [None], f"stop_accepting raised {stopped[0]!r}"
        assert listener.waiting_connections == 0
        assert listener.counts.open == 0

    _run(loop, scenario)
