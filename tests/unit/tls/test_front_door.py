"""The front door with a real gRPC server on loopback and real client sockets."""

from __future__ import annotations

import asyncio
import socket

import grpc
import pytest

from skiff_broker.client.channels import ClientTls, aio_channel, channel
from skiff_broker.tls import front_door
from skiff_broker.tls.certificates import ReloadingCertificate, self_signed
from skiff_broker.tls.front_door import FrontDoor, client_peer

SERVICE = "test.Echo"


def _echo_server(seen_peers: list[str], door_sides: list[str] | None = None) -> grpc.aio.Server:
    """Echoes; notes each caller's address, and the door's side of it gRPC saw."""

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen_peers.append(client_peer(context.peer()))
        if door_sides is not None:
            door_sides.append(context.peer())
        return request

    handlers = {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    return server


async def _call(endpoint: str, tls: ClientTls) -> bytes:
    if not tls.verify:
        # Fetching the certificate to trust blocks; the door runs on this loop.
        return await asyncio.to_thread(_blocking_call, endpoint, tls)
    async with aio_channel(endpoint, tls=tls) as ch:
        echo = ch.unary_unary(f"/{SERVICE}/Echo")
        return await echo(b"ping", timeout=30)


def _blocking_call(endpoint: str, tls: ClientTls) -> bytes:
    with channel(endpoint, tls=tls) as ch:
        return ch.unary_unary(f"/{SERVICE}/Echo")(b"ping", timeout=30)


async def _closed_by_peer(sock: socket.socket) -> bool:
    loop = asyncio.get_running_loop()
    return await loop.sock_recv(sock, 1) == b""


def _door_for(tmp_path, server, seen, *, plaintext: bool, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    cert, key = self_signed(str(tmp_path), ["localhost", "127.0.0.1"])
    tls_port = server.add_secure_port("127.0.0.1:0", ReloadingCertificate(cert, key).credentials())
    plain_port = server.add_insecure_port("127.0.0.1:0") if plaintext else None
    door = FrontDoor("127.0.0.1:0", tls_port, plain_port, first_byte_timeout_s=timeout)
    return door, cert


def test_tls_and_plaintext_share_the_port_and_the_client_address_is_kept(tmp_path):
    async def scenario() -> None:
        seen: list[str] = []
        door_sides: list[str] = []
        server = _echo_server(seen, door_sides)
        door, cert = _door_for(tmp_path, server, seen, plaintext=True)
        port = door.bind()
        await server.start()
        await door.start()
        endpoint = f"127.0.0.1:{port}"
        try:
            assert await _call(endpoint, ClientTls()) == b"ping"
            assert await _call(endpoint, ClientTls(True, cert)) == b"ping"
            assert await _call(endpoint, ClientTls(True, verify=False)) == b"ping"
        finally:
            await server.stop(0)
            await door.stop()
        # gRPC saw the door's loopback side; the services see the clients' own addresses,
        # which are not the door's gRPC ports.
        assert len(seen) == 3
        assert all(p.startswith("ipv4:127.0.0.1:") for p in seen)
        assert not any(p.endswith((f":{door.tls_port}", f":{door.plaintext_port}")) for p in seen)
        # Once the pairs are closed, the door's sides map to no client any more (each is
        # let go in its connection's close callback, a loop turn or more after stop()).
        assert len(door_sides) == 3 and door_sides != seen
        deadline = asyncio.get_running_loop().time() + 10
        while [client_peer(side) for side in door_sides] != door_sides:
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.02)
        assert [client_peer(side) for side in door_sides] == door_sides

    asyncio.run(scenario())


def test_a_silent_connection_neither_blocks_others_nor_stays_open(tmp_path):
    async def scenario() -> None:
        server = _echo_server([])
        door, _ = _door_for(tmp_path, server, [], plaintext=True, timeout=0.5)
        port = door.bind()
        await server.start()
        await door.start()
        silent = socket.create_connection(("127.0.0.1", port))
        silent.setblocking(False)
        try:
            # While the silent one says nothing, another client is served.
            assert await _call(f"127.0.0.1:{port}", ClientTls()) == b"ping"
            assert await asyncio.wait_for(_closed_by_peer(silent), 30)
        finally:
            silent.close()
            await server.stop(0)
            await door.stop()

    asyncio.run(scenario())


def test_enforcing_closes_plaintext_and_counts_it_in_one_log_line(tmp_path, caplog):
    async def scenario() -> None:
        server = _echo_server([])
        door, cert = _door_for(tmp_path, server, [], plaintext=False)
        port = door.bind()
        await server.start()
        await door.start()
        endpoint = f"127.0.0.1:{port}"
        try:
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await _call(endpoint, ClientTls())
                assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
            assert await _call(endpoint, ClientTls(True, cert)) == b"ping"
        finally:
            await server.stop(0)
            await door.stop()

    caplog.set_level("WARNING", logger=front_door.__name__)
    asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if "plaintext" in r.getMessage()]
    assert len(lines) == 1
    assert "--tls-mode permissive" in lines[0]


def test_closing_the_client_closes_its_grpc_side(tmp_path):
    async def scenario() -> None:
        door_sides: list[str] = []
        server = _echo_server([], door_sides)
        door, _ = _door_for(tmp_path, server, [], plaintext=True)
        port = door.bind()
        await server.start()
        await door.start()
        try:
            assert await _call(f"127.0.0.1:{port}", ClientTls()) == b"ping"
            # The channel is closed; the door lets go of both of its sockets.
            while door.open_connections:
                await asyncio.sleep(0.05)
            assert [client_peer(side) for side in door_sides] == door_sides
        finally:
            await server.stop(0)
            await door.stop()

    asyncio.run(scenario())


class _SpeaksFirst(asyncio.Protocol):
    """A backend that greets each connection at once, as gRPC sends its SETTINGS."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(b"greeting")  # type: ignore[attr-defined]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_what_the_grpc_side_sends_before_the_join_completes_reaches_the_client(
    loop: str,
) -> None:
    """gRPC speaks first on a new connection; the door must not drop that while its join
    is still resuming. The broker runs on uvloop, where that data can come first."""

    async def scenario() -> None:
        running = asyncio.get_running_loop()
        backend = await running.create_server(_SpeaksFirst, "127.0.0.1", 0)
        backend_port = backend.sockets[0].getsockname()[1]
        door = FrontDoor("127.0.0.1:0", backend_port, backend_port)
        port = door.bind()
        await door.start()
        try:
            for _ in range(100):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"P")
                assert await asyncio.wait_for(reader.readexactly(8), 10) == b"greeting"
                writer.close()
        finally:
            await door.stop()
            backend.close()

    if loop == "uvloop":
        import uvloop

        uvloop.run(scenario())
    else:
        asyncio.run(scenario())
