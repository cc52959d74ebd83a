"""The broker's gRPC server fed random HTTP/2: frames of every type with random flags and
payloads, on streams a client may and may not use, around well-formed calls.

Whatever a connection sends, the server answers it or closes it as a protocol error; it
never fails inside (which it would log as an unexpected error), and a real client is served
afterwards. Seeded: a failure is reproduced by its seed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct

import grpc
import pytest
import uvloop

from skiff_broker.frontdoor.grpc.server import RpcServer
from skiff_broker.frontdoor.http2 import frames as fr
from skiff_broker.frontdoor.http2.hpack import encode_headers
from skiff_broker.frontdoor.listener import ClientListener

SERVICE = "test.Fuzz"
CALL = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", f"/{SERVICE}/Echo"),
    (":authority", "localhost"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("grpc-timeout", "5S"),
]
STREAMING_CALL = [(n, f"/{SERVICE}/Chat" if n == ":path" else v) for n, v in CALL]


def _message(rng: random.Random) -> bytes:
    """A gRPC message as a client might send it, or nearly."""
    body = rng.randbytes(rng.choice([0, 0, 1, 10, 200, 3000]))
    flag = rng.choice([0, 0, 0, 1])
    length = len(body) if rng.random() < 0.8 else rng.choice([0, 5, 70_000, 1 << 30])
    message = struct.pack(">BI", flag, length) + body
    if rng.random() < 0.15:
        message = message[: rng.randrange(len(message) + 1)]
    return message


def _call_frames(rng: random.Random, stream_id: int) -> list[bytes]:
    """One call on ``stream_id``: well-formed most of the time, broken in one place else."""
    headers = rng.choice([CALL, CALL, STREAMING_CALL, CALL[:3], [*CALL, ("X-Upper", "v")]])
    block = encode_headers(headers)
    frames = []
    if rng.random() < 0.15 and len(block) > 2:
        cut = rng.randrange(1, len(block))
        frames.append(fr.frame(fr.HEADERS, 0, stream_id, block[:cut]))
        frames.append(fr.frame(fr.CONTINUATION, fr.END_HEADERS, stream_id, block[cut:]))
    else:
        frames.append(fr.frame(fr.HEADERS, fr.END_HEADERS, stream_id, block))
    data = b"".join(_message(rng) for _ in range(rng.choice([0, 1, 1, 1, 2, 3])))
    pieces = [data[k : k + 1000] for k in range(0, len(data), 1000)] or [b""]
    for n, piece in enumerate(pieces):
        last = n == len(pieces) - 1 and rng.random() < 0.9
        frames.append(fr.frame(fr.DATA, fr.END_STREAM if last else 0, stream_id, piece))
    roll = rng.random()
    if roll < 0.1:
        frames.insert(rng.randrange(1, len(frames) + 1), fr.rst_stream(stream_id, 8))
    elif roll < 0.2:
        increment = rng.choice([0, 1, 1 << 20, 2**31 - 1])
        frames.append(fr.window_update(stream_id, increment))
    return frames


def _noise(rng: random.Random, stream_id: int) -> bytes:
    """A frame of any type, random flags and payload, on the connection or a stream."""
    frame_type = rng.randrange(0, 12)
    payload = rng.randbytes(rng.choice([0, 4, 5, 6, 8, 12, rng.randrange(0, 64)]))
    return fr.frame(frame_type, rng.randrange(256), rng.choice([0, stream_id]), payload)


async def _connection(port: int, rng: random.Random) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    frames = [fr.PREFACE, fr.settings({})]
    stream_id = 1
    for _ in range(rng.randrange(1, 12)):
        frames += _call_frames(rng, stream_id)
        if rng.random() < 0.3:
            frames.append(_noise(rng, stream_id))
        # Now and then a stream id used before, or an even one.
        stream_id += rng.choice([2, 2, 2, 2, 0, 1])
    try:
        writer.write(b"".join(frames))
        await writer.drain()
        # Read whatever comes back for a moment, then go.
        await asyncio.wait_for(reader.read(1 << 20), 0.05)
    except (TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.mark.parametrize("seed", range(4))
def test_random_frames_never_fail_the_server_and_it_serves_on(seed, caplog):
    caplog.set_level(logging.WARNING)

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def chat(requests, context):  # type: ignore[no-untyped-def]
        async for request in requests:
            yield request

    async def scenario() -> None:
        server = RpcServer(max_message=64 * 1024)
        handlers = {
            "Echo": grpc.unary_unary_rpc_method_handler(echo),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        listener = ClientListener("127.0.0.1:0", server.protocol)
        port = listener.bind()
        await listener.start()
        rng = random.Random(seed)
        try:
            for _ in range(100):
                await _connection(port, rng)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                assert await channel.unary_unary(f"/{SERVICE}/Echo")(b"ok", timeout=10) == b"ok"
        finally:
            listener.stop_accepting()
            await server.stop(0)
            await listener.stop()

    uvloop.run(scenario())
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failures, [r.getMessage() for r in failures]
