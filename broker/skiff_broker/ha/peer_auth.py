"""Mutual authentication of replication peers by a shared secret, before any log byte flows.

Every broker of a group holds the same secret. On a new connection:

1. the replica sends AUTH_HELLO: a fresh 32-byte nonce of its own;
2. the master answers AUTH_CHALLENGE: a fresh nonce of its own and its proof;
3. the replica checks the master's proof and sends AUTH_PROOF: its own proof.

A proof is HMAC-SHA256 keyed by the secret over a label naming the side that
proves ("master" or "replica"), the group's broker name and both nonces. The
labels keep either side's proof from being replayed as the other's; the fresh
nonces keep any proof from being replayed on another connection; the group
name keeps a broker of one group from following another group's master even
when the groups share a secret. Proofs are compared in constant time.

Invariants: the master reads HELLO (and so sends WELCOME or log bytes) only
after the replica's proof checked out; the replica writes nothing to its log
and tells nothing of it (HELLO) before the master's proof checked out. Frames
before that point have exact sizes, so an unauthenticated peer cannot make
either side buffer more than a few dozen bytes.

The handshake authenticates the peers, not the bytes that follow (there is no
encryption): it keeps strangers who can reach the port out; it does not guard
against someone who can alter traffic on the path between the brokers.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os

from .framing import HEADER, FrameType, encode

NONCE_BYTES = 32
PROOF_BYTES = hashlib.sha256().digest_size
# A secret shorter than this is refused at start (``head -c 32 /dev/urandom | base64`` is 44).
MIN_SECRET_BYTES = 16
MAKE_SECRET_HINT = (
    "create one with `head -c 32 /dev/urandom | base64 > ha.secret` and give the same file "
    "to every broker of the group with --ha-secret-file ha.secret (or set SKIFF_HA_SECRET "
    "to its contents)"
)


class AuthenticationFailed(Exception):
    """The peer did not prove it holds the group's secret; the connection is closed."""


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def proof(secret: bytes, side: str, group: str, replica_nonce: bytes, master_nonce: bytes) -> bytes:
    """What ``side`` ("master" or "replica") sends to show it holds ``secret``."""
    message = b"\0".join(
        (b"skiff-replication-v1", side.encode(), group.encode(), replica_nonce, master_nonce)
    )
    return hmac.new(secret, message, hashlib.sha256).digest()


async def _read_exact_frame(reader: asyncio.StreamReader, expected: FrameType, size: int) -> bytes:
    """The payload of the next frame, which must be ``expected`` with exactly ``size`` bytes."""
    raw_type, length = HEADER.unpack(await reader.readexactly(HEADER.size))
    if raw_type != expected or length != size:
        raise AuthenticationFailed(
            f"expected {expected.name} of {size} bytes, got frame type {raw_type} of "
            f"{length} bytes (a peer without replication authentication, or not Skiff)"
        )
    return await reader.readexactly(size)


async def prove_to_replica(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes, group: str
) -> None:
    """The master's side; returns once the replica proved it holds ``secret``."""
    replica_nonce = await _read_exact_frame(reader, FrameType.AUTH_HELLO, NONCE_BYTES)
    master_nonce = new_nonce()
    writer.write(
        encode(
            FrameType.AUTH_CHALLENGE,
            master_nonce + proof(secret, "master", group, replica_nonce, master_nonce),
        )
    )
    await writer.drain()
    claimed = await _read_exact_frame(reader, FrameType.AUTH_PROOF, PROOF_BYTES)
    expected = proof(secret, "replica", group, replica_nonce, master_nonce)
    if not hmac.compare_digest(claimed, expected):
        raise AuthenticationFailed(
            f"its proof does not match this group's secret (a different --ha-secret-file, "
            f"or a broker of another group than {group})"
        )


async def prove_to_master(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes, group: str
) -> None:
    """The replica's side; returns once the master proved it holds ``secret``."""
    replica_nonce = new_nonce()
    writer.write(encode(FrameType.AUTH_HELLO, replica_nonce))
    await writer.drain()
    try:
        challenge = await _read_exact_frame(
            reader, FrameType.AUTH_CHALLENGE, NONCE_BYTES + PROOF_BYTES
        )
    except asyncio.IncompleteReadError:
        raise AuthenticationFailed(
            "it closed the connection during authentication (it may run without replication "
            "authentication, or not be a master of this group)"
        ) from None
    master_nonce, claimed = challenge[:NONCE_BYTES], challenge[NONCE_BYTES:]
    expected = proof(secret, "master", group, replica_nonce, master_nonce)
    if not hmac.compare_digest(claimed, expected):
        raise AuthenticationFailed(
            f"its proof does not match this group's secret (a different --ha-secret-file, "
            f"or the master of another group than {group}); nothing was written"
        )
    writer.write(
        encode(FrameType.AUTH_PROOF, proof(secret, "replica", group, replica_nonce, master_nonce))
    )
    await writer.drain()
