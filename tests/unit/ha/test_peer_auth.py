"""Replication peers authenticate each other over a real loopback TCP connection."""

from __future__ import annotations

import asyncio

import pytest

from skiff_broker.ha import framing
from skiff_broker.ha.framing import FrameType
from skiff_broker.ha.peer_auth import (
    AuthenticationFailed,
    proof,
    prove_to_master,
    prove_to_replica,
)

SECRET = b"the-group-secret-0123456789abcdef"


async def _handshake(
    master_secret: bytes, replica_secret: bytes, master_group: str = "g", replica_group: str = "g"
) -> tuple[BaseException | None, BaseException | None]:
    """What each side raised (None: it was satisfied with its peer)."""
    master_outcome: asyncio.Future = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await prove_to_replica(reader, writer, master_secret, master_group)
            master_outcome.set_result(None)
        except Exception as exc:
            master_outcome.set_result(exc)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    replica_error = None
    try:
        await prove_to_master(reader, writer, replica_secret, replica_group)
    except Exception as exc:
        replica_error = exc
    writer.close()
    master_error = await master_outcome
    server.close()
    await server.wait_closed()
    return master_error, replica_error


async def _master_facing(client) -> BaseException | None:
    """What a master's prove_to_replica raised against ``client(reader, writer)``."""
    outcome: asyncio.Future = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await prove_to_replica(reader, writer, SECRET, "g")
            outcome.set_result(None)
        except Exception as exc:
            outcome.set_result(exc)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    await client(reader, writer)
    result = await outcome
    writer.close()
    server.close()
    return result


def test_peers_with_the_same_secret_and_group_accept_each_other() -> None:
    assert asyncio.run(_handshake(SECRET, SECRET)) == (None, None)


def test_a_replica_with_another_secret_is_refused_by_the_master_and_refuses_it() -> None:
    master_error, replica_error = asyncio.run(_handshake(SECRET, b"another-secret-0123456789"))
    # The replica checks the master's proof first: it never sends one of its own.
    assert isinstance(replica_error, AuthenticationFailed)
    assert "nothing was written" in str(replica_error)
    assert isinstance(master_error, (AuthenticationFailed, asyncio.IncompleteReadError))


def test_a_broker_of_another_group_is_refused_even_with_the_same_secret() -> None:
    _, replica_error = asyncio.run(_handshake(SECRET, SECRET, "broker-a", "broker-b"))
    assert isinstance(replica_error, AuthenticationFailed)


def test_the_master_refuses_a_wrong_proof_from_a_peer_that_skipped_the_check() -> None:
    async def replay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(framing.encode(FrameType.AUTH_HELLO, bytes(32)))
        challenge = await framing.read_frame(reader)
        # Replaying the master's own proof as the replica's: the side label tells them apart.
        writer.write(framing.encode(FrameType.AUTH_PROOF, challenge.payload[32:]))

    assert isinstance(asyncio.run(_master_facing(replay)), AuthenticationFailed)


def test_a_peer_skipping_authentication_is_refused_at_its_first_frame() -> None:
    async def hello(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(framing.encode_json(FrameType.HELLO, {"replica": "x", "max_offset": 0}))

    error = asyncio.run(_master_facing(hello))
    assert isinstance(error, AuthenticationFailed)
    assert "expected AUTH_HELLO" in str(error)


def test_proofs_depend_on_side_group_secret_and_both_nonces() -> None:
    base = proof(SECRET, "master", "g", b"r" * 32, b"m" * 32)
    assert base == proof(SECRET, "master", "g", b"r" * 32, b"m" * 32)
    for other in (
        proof(SECRET, "replica", "g", b"r" * 32, b"m" * 32),
        proof(SECRET, "master", "h", b"r" * 32, b"m" * 32),
        proof(b"x" + SECRET, "master", "g", b"r" * 32, b"m" * 32),
        proof(SECRET, "master", "g", b"s" * 32, b"m" * 32),
        proof(SECRET, "master", "g", b"r" * 32, b"n" * 32),
    ):
        assert other != base


@pytest.mark.parametrize("size", [0, 31, 33])
def test_a_hello_nonce_of_the_wrong_size_is_refused(size: int) -> None:
    async def short_hello(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(framing.encode(FrameType.AUTH_HELLO, bytes(size)))

    assert isinstance(asyncio.run(_master_facing(short_hello)), AuthenticationFailed)
