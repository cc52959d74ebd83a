"""What the gRPC server holds of requests that have not arrived in full: window granted in
steps, budgets shared between connections, and a time limit per message.

The server runs on its own loop in a thread; hostile clients are written frame by frame
(tests/support/raw_http2.py), well-behaved ones are grpcio's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import uvloop
from tests.support.raw_http2 import DEADLINE_EXCEEDED, RawClient, message_prefix
from tests.support.waiting import wait_for

from skiff_broker.frontdoor.grpc.request_window import READ_AHEAD
from skiff_broker.frontdoor.grpc.server import RpcServer
from skiff_broker.frontdoor.http2.frames import DEFAULT_WINDOW, ErrorCode
from skiff_broker.frontdoor.http2.receive_budget import ReceiveBudget
from skiff_broker.frontdoor.listener import ClientListener

SERVICE = "test.Buffers"
ECHO = f"/{SERVICE}/Echo"
TOTAL = f"/{SERVICE}/Total"
MiB = 1 << 20


async def echo(request: bytes, context: Any) -> bytes:
    return request


async def total(requests: Any, context: Any) -> bytes:
    return str(sum([len(r) async for r in requests])).encode()


@contextlib.contextmanager
def served(**options: Any) -> Iterator[dict[str, Any]]:
    """A server on loopback, on its own loop in a thread: its ``server`` and ``address``."""
    state: dict[str, Any] = {}
    ready = threading.Event()

    async def main() -> None:
        server = RpcServer(**options)
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    SERVICE,
                    {
                        "Echo": grpc.unary_unary_rpc_method_handler(echo),
                        "Total": grpc.stream_unary_rpc_method_handler(total),
                    },
                ),
            )
        )
        listener = ClientListener("127.0.0.1:0", server.protocol)
        port = listener.bind()
        await listener.start()
        stop = asyncio.Event()
        state.update(
            server=server, address=f"127.0.0.1:{port}", loop=asyncio.get_running_loop(), stop=stop
        )
        ready.set()
        await stop.wait()
        listener.stop_accepting()
        await server.stop(0)
        await listener.stop()

    thread = threading.Thread(target=uvloop.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(30), "the server did not start"
    try:
        yield state
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(30)


def send_all(client: RawClient, stream_id: int, payload: bytes, end_stream: bool = True) -> None:
    """Send ``payload`` as the server's windows let it through."""
    sent = 0
    while sent < len(payload):
        pushed = client.push(stream_id, payload[sent:])
        sent += pushed
        if not pushed:
            assert client.read_until(
                lambda: client.streams[stream_id].send_window > 0 and client.send_window > 0
            ), f"the server stopped granting window after {sent} octets"
    if end_stream:
        client.send(client.data_frames(stream_id, b"", end_stream=True))


def test_a_large_message_is_granted_window_in_steps_not_for_its_announced_length():
    with served(max_message=16 * MiB) as state:
        client = RawClient(state["address"])
        stream_id = client.open_call(ECHO)
        body = bytes(range(256)) * (8 * MiB // 256)
        client.push(stream_id, message_prefix(len(body)) + body[:60_000])
        seen = client.streams[stream_id]
        assert client.read_until(lambda: seen.window_granted > 0)
        client.read_for(0.2)
        # Eight MiB announced: the window opens a step ahead of what arrived, no more.
        assert seen.window_granted <= READ_AHEAD
        send_all(client, stream_id, body[60_000:])
        assert client.read_until(lambda: seen.ended)
        assert seen.header("grpc-status") == "0"
        assert seen.data == len(body) + 5
        wait_for(lambda: state["server"].buffer_budget.used == 0, "the room given back")
        client.close()


def test_past_the_shared_budget_a_client_waits_on_flow_control_then_is_served():
    budget = ReceiveBudget(3 * MiB)
    with served(max_message=2 * MiB, buffer_per_connection=3 * MiB, buffer_budget=budget) as state:
        hostile = RawClient(state["address"])
        stalled = hostile.open_call(ECHO)
        body = b"h" * (2 * MiB)
        hostile.push(stalled, message_prefix(len(body)))
        hostile.read_until(lambda: hostile.streams[stalled].window_granted > 0)
        wait_for(lambda: budget.used >= 2 * MiB, "the first message's room reserved")
        channel = grpc.insecure_channel(state["address"])
        polite = channel.unary_unary(ECHO)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(polite, b"p" * (3 * MiB // 2), timeout=60)
            # Its message does not fit what is left: it waits, nothing of it buffered.
            wait_for(lambda: budget.waiting == 1, "the second client waiting for room")
            assert not answer.done()
            assert budget.used <= budget.capacity
            send_all(hostile, stalled, body)
            seen = hostile.streams[stalled]
            assert hostile.read_until(lambda: seen.ended)
            assert seen.header("grpc-status") == "0"
            assert answer.result() == b"p" * (3 * MiB // 2)
        channel.close()
        wait_for(lambda: budget.used == 0, "every reservation given back")
        hostile.close()


def test_a_message_that_stalls_ends_its_call_after_the_limit_and_frees_its_room():
    with served(max_message=4 * MiB, message_timeout=0.5) as state:
        client = RawClient(state["address"])
        stream_id = client.open_call(ECHO)
        client.push(stream_id, message_prefix(MiB) + b"s" * 50_000)
        client.read_until(lambda: client.streams[stream_id].window_granted > 0)
        client.push(stream_id, b"s" * 100_000)
        seen = client.streams[stream_id]
        assert client.read_until(lambda: seen.reset is not None)
        assert seen.header("grpc-status") == str(DEADLINE_EXCEEDED)
        assert "did not arrive in full within 0.5 s" in (seen.header("grpc-message") or "")
        assert seen.reset == ErrorCode.NO_ERROR
        server = state["server"]
        wait_for(lambda: all(c.h2.held == 0 for c in server.connections), "the buffer freed")
        # What stays claimed is what the client may still send on its connection (a window
        # once given cannot be taken back): never more than the step granted ahead.
        client.read_for(0.2)
        still_open = client.send_window - DEFAULT_WINDOW
        assert server.buffer_budget.used == max(still_open, 0) <= READ_AHEAD
        # The connection goes on serving.
        again = client.open_call(ECHO)
        client.send(client.data_frames(again, message_prefix(2) + b"ok", end_stream=True))
        assert client.read_until(lambda: client.streams[again].ended)
        assert client.streams[again].header("grpc-status") == "0"
        client.close()


def test_a_stream_idle_between_messages_is_not_timed_but_one_stalled_inside_is():
    with served(max_message=MiB, message_timeout=0.3) as state:
        client = RawClient(state["address"])
        idle = client.open_call(TOTAL)
        client.send(client.data_frames(idle, message_prefix(10) + b"x" * 10))
        client.read_for(1.0)
        client.send(client.data_frames(idle, message_prefix(7) + b"y" * 7, end_stream=True))
        assert client.read_until(lambda: client.streams[idle].ended)
        assert client.streams[idle].header("grpc-status") == "0"
        stalled = client.open_call(TOTAL)
        client.send(client.data_frames(stalled, message_prefix(10) + b"x" * 10))
        client.send(client.data_frames(stalled, message_prefix(10) + b"x" * 3))
        assert client.read_until(lambda: client.streams[stalled].ended)
        assert client.streams[stalled].header("grpc-status") == str(DEADLINE_EXCEEDED)
        client.close()


def test_the_budgets_in_effect_always_hold_the_largest_request():
    from skiff_broker.frontdoor.grpc.request_buffers import RequestBufferConfig

    defaults = RequestBufferConfig()
    # The defaults: 32 MiB a connection, 128 MiB in all, a 16 MiB request fits either.
    assert defaults.in_effect(16 * MiB) == (32 * MiB, 128 * MiB)
    # A larger --max-message-size raises what one connection may hold, not the total...
    assert defaults.in_effect(64 * MiB) == (64 * MiB + 5, 128 * MiB)
    # ...unless the total is below it too.
    assert RequestBufferConfig(total=8 * MiB).in_effect(16 * MiB) == (32 * MiB, 32 * MiB)
