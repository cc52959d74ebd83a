"""The broker's gRPC server, called by grpcio's own client over loopback (uvloop, as the
broker runs): unary and streaming calls, metadata, deadlines, cancellation, limits,
interceptors and a graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
import uvloop
from tests.support.waiting import until

from skiff_broker.frontdoor.grpc.server import RpcServer
from skiff_broker.frontdoor.listener import ClientListener

SERVICE = "test.Rig"
LIMIT = 1024 * 1024
# Set in a server's call_context; the Mark handler reports it and then changes it.
MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


class Rig:
    """Handlers that note what they saw, for the assertions."""

    def __init__(self) -> None:
        self.metadata: list[tuple] = []
        self.peers: list[str] = []
        self.cancelled = asyncio.Event()
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.remaining: list[float | None] = []
        self.done_callbacks = 0

    async def echo(self, request: bytes, context) -> bytes:  # type: ignore[no-untyped-def]
        self.metadata.append(tuple(context.invocation_metadata()))
        self.peers.append(context.peer())
        self.remaining.append(context.time_remaining())
        return request

    async def fail(self, request: bytes, context) -> bytes:  # type: ignore[no-untyped-def]
        if request == b"abort":
            context.set_trailing_metadata((("why-bin", b"\x00\xff"), ("why", "because")))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not now: 100% busy ✗")
        if request == b"code":
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details("nothing here")
            return b""
        raise RuntimeError("the handler broke")

    async def wait(self, request: bytes, context) -> bytes:  # type: ignore[no-untyped-def]
        context.add_done_callback(lambda _: self._count_done())
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return request

    def _count_done(self) -> None:
        self.done_callbacks += 1

    async def count(self, request: bytes, context) -> AsyncIterator[bytes]:  # type: ignore[no-untyped-def]
        n, size = (int(x) for x in request.split(b"x"))
        for i in range(n):
            yield i.to_bytes(4, "big") + b"." * size

    async def written(self, request: bytes, context) -> None:  # type: ignore[no-untyped-def]
        for i in range(3):
            await context.write(bytes([i]))

    async def mark(self, request: bytes, context) -> bytes:  # type: ignore[no-untyped-def]
        seen = MARK.get()
        MARK.set(request.decode())
        return seen.encode()

    async def total(self, requests, context) -> bytes:  # type: ignore[no-untyped-def]
        return str(sum([len(r) async for r in requests])).encode()

    async def chat(self, requests, context) -> AsyncIterator[bytes]:  # type: ignore[no-untyped-def]
        async for request in requests:
            yield request.upper()

    def handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Echo": grpc.unary_unary_rpc_method_handler(self.echo),
                "Fail": grpc.unary_unary_rpc_method_handler(self.fail),
                "Wait": grpc.unary_unary_rpc_method_handler(self.wait),
                "Mark": grpc.unary_unary_rpc_method_handler(self.mark),
                "Count": grpc.unary_stream_rpc_method_handler(self.count),
                "Written": grpc.unary_stream_rpc_method_handler(self.written),
                "Total": grpc.stream_unary_rpc_method_handler(self.total),
                "Chat": grpc.stream_stream_rpc_method_handler(self.chat),
            },
        )


@contextlib.asynccontextmanager
async def serving(rig: Rig, **options):  # type: ignore[no-untyped-def]
    server = RpcServer(max_message=LIMIT, **options)
    server.add_generic_rpc_handlers((rig.handlers(),))
    listener = ClientListener("127.0.0.1:0", server.protocol)
    port = listener.bind()
    await listener.start()
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", -1)]
    )
    try:
        yield server, channel
    finally:
        await channel.close()
        listener.stop_accepting()
        await server.stop(0)
        await listener.stop()


def run(scenario) -> None:  # type: ignore[no-untyped-def]
    uvloop.run(scenario())


def run_for(scenario):  # type: ignore[no-untyped-def]
    """What ``scenario`` returns, run on uvloop."""
    return uvloop.run(scenario())


def test_a_unary_call_carries_its_message_metadata_peer_and_deadline():
    rig = Rig()

    async def scenario() -> None:
        async with serving(rig) as (_, channel):
            echo = channel.unary_unary(f"/{SERVICE}/Echo")
            answer = await echo(
                b"hello",
                metadata=(("x-mq-client-id", "c1"), ("blob-bin", b"\x00\x01\xfe")),
                timeout=20,
            )
            assert answer == b"hello"
            assert await echo(b"") == b""

    run(scenario)
    metadata = dict(rig.metadata[0])
    assert metadata["x-mq-client-id"] == "c1"
    assert metadata["blob-bin"] == b"\x00\x01\xfe"
    assert metadata["user-agent"].startswith("grpc-python")
    assert not any(key.startswith(":") or key == "grpc-timeout" for key in metadata)
    assert rig.peers[0].startswith("ipv4:127.0.0.1:")
    # gRPC core may round the timeout it sends up to a coarser unit (20.1 s was seen).
    assert 0 < rig.remaining[0] <= 20.5
    assert rig.remaining[1] is None


def test_messages_past_the_windows_both_ways_arrive_whole():
    rig = Rig()

    async def scenario() -> None:
        async with serving(rig) as (_, channel):
            echo = channel.unary_unary(f"/{SERVICE}/Echo")
            big = bytes(range(256)) * 3000  # 768 KiB: many frames, windows granted
            assert await echo(big) == big
            count = channel.unary_stream(f"/{SERVICE}/Count")
            got = [m async for m in count(b"40x100000")]
            assert [int.from_bytes(m[:4], "big") for m in got] == list(range(40))
            assert all(len(m) == 100_004 for m in got)

    run(scenario)


def test_many_calls_at_once_each_get_their_own_answer():
    rig = Rig()

    async def scenario() -> None:
        async with serving(rig) as (_, channel):
            echo = channel.unary_unary(f"/{SERVICE}/Echo")
            bodies = [b"%d" % i * (i % 50 + 1) for i in range(2000)]
            answers = await asyncio.gather(*(echo(b) for b in bodies))
            assert answers == bodies

    run(scenario)


def test_streams_both_ways():
    rig = Rig()

    async def scenario() -> None:
        async with serving(rig) as (_, channel):
            total = channel.stream_unary(f"/{SERVICE}/Total")

            async def parts() -> AsyncIterator[bytes]:
                for n in (1, 10, 100_000, 0, 5):
                    yield b"x" * n

            assert await total(parts()) == b"100016"
            chat = channel.stream_stream(f"/{SERVICE}/Chat")
            call = chat()
            for word in (b"one", b"two", b"three"):
                await call.write(word)
                assert await call.read() == word.upper()
            await call.done_writing()
            assert await call.read() is grpc.aio.EOF
            assert await call.code() is grpc.StatusCode.OK
            written = channel.unary_stream(f"/{SERVICE}/Written")
            assert [m async for m in written(b"")] == [b"\x00", b"\x01", b"\x02"]

    run(scenario)


def test_failures_become_statuses_and_the_server_goes_on(caplog):
    rig = Rig()
    caplog.set_level(logging.ERROR)

    async def scenario() -> None:
        async with serving(rig) as (_, channel):
            fail = channel.unary_unary(f"/{SERVICE}/Fail")
            with pytest.raises(grpc.aio.AioRpcError) as aborted:
                await fail(b"abort")
            assert aborted.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert aborted.value.details() == "not now: 100% busy ✗"
            trailing = dict(aborted.value.trailing_metadata())
            assert trailing["why-bin"] == b"\x00\xff" and trailing["why"] == "because"
            with pytest.raises(grpc.aio.AioRpcError) as coded:
                await fail(b"code")
            assert coded.value.code() is grpc.StatusCode.NOT_FOUND
            assert coded.value.details() == "nothing here"
            with pytest.raises(grpc.aio.AioRpcError) as broke:
                await fail(b"")
            assert broke.value.code() is grpc.StatusCode.UNKNOWN
            assert "the handler broke" in broke.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await channel.unary_unary("/test.Rig/Nope")(b"")
            assert unknown.value.code() is grpc.StatusCode.UNIMPLEMENTED
            assert await channel.unary_unary(f"/{SERVICE}/Echo")(b"still") == b"still"

    run(scenario)
    assert any("the handler broke" in r.getMessage() or r.exc_info for r in caplog.records)


def test_a_message_over_the_limit_is_refused_and_the_connection_serves_on():
    rig = Rig()

    async def scenario() -> None:
        async with serving(rig) as (_, channel):
            echo = channel.unary_unary(f"/{SERVICE}/Echo")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await echo(b"x" * (LIMIT + 1))
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert f"limit of {LIMIT}" in refused.value.details()
            assert await echo(b"x" * LIMIT) == b"x" * LIMIT

    run(scenario)


def test_gzip_compressed_requests_are_read():
    rig = Rig()

    async def scenario() -> None:
        async with serving(rig) as (_, channel):
            echo = channel.unary_unary(f"/{SERVICE}/Echo")
            body = b"compress me " * 1000
            assert await echo(body, compression=grpc.Compression.Gzip) == body

    run(scenario)


def test_a_passed_deadline_answers_and_cancels_the_handler():
    rig = Rig()

    async def scenario() -> None:
        async with serving(rig) as (_, channel):
            wait = channel.unary_unary(f"/{SERVICE}/Wait")
            with pytest.raises(grpc.aio.AioRpcError) as late:
                await wait(b"", timeout=0.3)
            assert late.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            await asyncio.wait_for(rig.cancelled.wait(), 10)

    run(scenario)
    assert rig.done_callbacks == 1


def test_a_call_the_client_cancels_cancels_its_handler():
    rig = Rig()

    async def scenario() -> None:
        async with serving(rig) as (server, channel):
            call = channel.unary_unary(f"/{SERVICE}/Wait")(b"")
            await asyncio.wait_for(rig.started.wait(), 10)
            call.cancel()
            await asyncio.wait_for(rig.cancelled.wait(), 10)
            echo = channel.unary_unary(f"/{SERVICE}/Echo")
            assert await echo(b"after") == b"after"
            assert all(not c.h2.streams for c in server.connections)

    run(scenario)


class Counting(grpc.aio.ServerInterceptor):
    """Counts calls by method and refuses those without a ``let-in`` header."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def intercept_service(self, continuation, details):  # type: ignore[no-untyped-def]
        self.seen.append(details.method)
        handler = await continuation(details)
        if dict(details.invocation_metadata).get("let-in") == "yes":
            return handler

        async def refuse(request, context):  # type: ignore[no-untyped-def]
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "no")

        if handler.request_streaming:
            return grpc.stream_stream_rpc_method_handler(refuse)
        return grpc.unary_unary_rpc_method_handler(refuse)


def test_interceptors_see_each_call_and_may_replace_its_handler():
    rig = Rig()
    gate = Counting()

    async def scenario() -> None:
        async with serving(rig, interceptors=[gate]) as (_, channel):
            echo = channel.unary_unary(f"/{SERVICE}/Echo")
            assert await echo(b"in", metadata=(("let-in", "yes"),)) == b"in"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await echo(b"out")
            assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
            chat = channel.stream_stream(f"/{SERVICE}/Chat")
            call = chat(metadata=(("let-in", "yes"),))
            await call.write(b"a")
            assert await call.read() == b"A"
            await call.done_writing()
            assert await call.code() is grpc.StatusCode.OK

    run(scenario)
    assert gate.seen == [f"/{SERVICE}/Echo", f"/{SERVICE}/Echo", f"/{SERVICE}/Chat"]


def test_each_call_starts_from_its_own_copy_of_the_call_context():
    base = contextvars.copy_context()
    base.run(MARK.set, "from-the-server")

    async def scenario() -> list[bytes]:
        async with serving(Rig(), call_context=base) as (_, channel):
            mark = channel.unary_unary(f"/{SERVICE}/Mark")
            return [await mark(b"changed-by-call-%d" % i) for i in range(3)]

    # What one call sets stays in its own copy: the next starts from the server's again.
    assert run_for(scenario) == [b"from-the-server"] * 3
    assert base.run(MARK.get) == "from-the-server"


def test_without_a_call_context_calls_start_from_the_servers_own():
    async def scenario() -> list[bytes]:
        MARK.set("where-the-server-started")
        async with serving(Rig()) as (_, channel):
            mark = channel.unary_unary(f"/{SERVICE}/Mark")
            return [await mark(b"changed-by-call-%d" % i) for i in range(2)]

    assert run_for(scenario) == [b"where-the-server-started"] * 2


async def _listening(rig: Rig) -> tuple[RpcServer, ClientListener, int]:
    server = RpcServer()
    server.add_generic_rpc_handlers((rig.handlers(),))
    listener = ClientListener("127.0.0.1:0", server.protocol)
    port = listener.bind()
    await listener.start()
    return server, listener, port


def test_stop_lets_calls_finish_within_grace():
    rig = Rig()

    async def scenario() -> None:
        server, listener, port = await _listening(rig)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            wait = channel.unary_unary(f"/{SERVICE}/Wait")
            first = asyncio.ensure_future(wait(b"first"))
            await asyncio.wait_for(rig.started.wait(), 10)
            listener.stop_accepting()
            stopping = asyncio.ensure_future(server.stop(30))
            # The call is released only once the server has said GOAWAY: stopping, not yet
            # stopped, it lets the call finish.
            await until(
                lambda: server.connections and all(c.h2.goaway_sent for c in server.connections),
                "the server to send GOAWAY",
            )
            assert not stopping.done()
            rig.release.set()
            assert await first == b"first"
            await asyncio.wait_for(stopping, 10)
        await listener.stop()

    run(scenario)
    assert not rig.cancelled.is_set()


def test_stop_cancels_what_still_runs_when_grace_ends():
    rig = Rig()

    async def scenario() -> None:
        server, listener, port = await _listening(rig)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            late = asyncio.ensure_future(channel.unary_unary(f"/{SERVICE}/Wait")(b""))
            await asyncio.wait_for(rig.started.wait(), 10)
            listener.stop_accepting()
            await server.stop(0.2)
            with pytest.raises(grpc.aio.AioRpcError):
                await late
        await listener.stop()

    run(scenario)
    assert rig.cancelled.is_set()
