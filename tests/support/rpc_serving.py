"""The broker's gRPC server on a plaintext loopback port, for tests of what runs on it."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable, Sequence

import grpc

from skiff_broker.frontdoor.grpc.server import RpcServer
from skiff_broker.frontdoor.listener import ClientListener


@contextlib.asynccontextmanager
async def serving(
    register: Callable[[RpcServer], object],
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    call_context: contextvars.Context | None = None,
) -> AsyncIterator[int]:
    """Yields the port of a server ``register`` added its services to; stops it after."""
    server = RpcServer(interceptors=interceptors, call_context=call_context)
    register(server)
    listener = ClientListener("127.0.0.1:0", server.protocol)
    port = listener.bind()
    await listener.start()
    try:
        yield port
    finally:
        listener.stop_accepting()
        await server.stop(None)
        await listener.stop()
