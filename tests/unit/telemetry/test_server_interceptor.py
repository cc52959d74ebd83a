"""SERVER spans from the tracing interceptor, on the broker's gRPC server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from tests.support.rpc_serving import serving
from tests.unit.telemetry.pipelines import Pipelines

from skiff_broker.telemetry import conventions as cv
from skiff_broker.telemetry.server_interceptor import TracingInterceptor

SERVICE = "test.Probe"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN_ID = "00f067aa0ba902b7"


class Probe:
    """Handlers that report the span current while they run (as hex trace/span ids)."""

    @staticmethod
    def _current() -> bytes:
        context = trace.get_current_span().get_span_context()
        return f"{context.trace_id:032x}/{context.span_id:016x}".encode()

    async def unary(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return self._current()

    def sync_unary(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return self._current()

    async def stream(
        self, request: bytes, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        for _ in range(3):
            await asyncio.sleep(0)
            yield self._current()

    async def bidi(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request + b":" + self._current()

    async def refuse(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad probe")
        return b""

    async def fail(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise RuntimeError("probe broke")


@pytest.fixture
def call(pipelines: Pipelines) -> Iterator:
    """``await call(method, metadata, kind)`` against a server with the interceptor."""

    probe = Probe()
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(probe.unary),
        "SyncUnary": grpc.unary_unary_rpc_method_handler(probe.sync_unary),
        "Stream": grpc.unary_stream_rpc_method_handler(probe.stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(probe.bidi),
        "Refuse": grpc.unary_unary_rpc_method_handler(probe.refuse),
        "Fail": grpc.unary_unary_rpc_method_handler(probe.fail),
    }

    async def run(method: str, metadata: tuple = (), kind: str = "unary") -> list[bytes]:
        generic = grpc.method_handlers_generic_handler(SERVICE, handlers)
        async with (
            serving(
                lambda server: server.add_generic_rpc_handlers((generic,)),
                interceptors=[TracingInterceptor(pipelines.tracer_provider, "broker-t")],
            ) as port,
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            path = f"/{SERVICE}/{method}"
            if kind == "unary":
                return [await channel.unary_unary(path)(b"hi", metadata=metadata)]
            if kind == "stream":
                return [r async for r in channel.unary_stream(path)(b"hi", metadata=metadata)]

            async def requests() -> AsyncIterator[bytes]:
                for word in (b"a", b"b"):
                    yield word

            bidi = channel.stream_stream(path)(requests(), metadata=metadata)
            return [r async for r in bidi]

    yield run


def server_span(pipelines: Pipelines) -> ReadableSpan:
    (span,) = pipelines.spans()
    assert span.kind is SpanKind.SERVER
    return span


def ids(span: ReadableSpan) -> bytes:
    return f"{span.context.trace_id:032x}/{span.context.span_id:016x}".encode()


def test_a_sampled_caller_trace_is_continued(call, pipelines: Pipelines) -> None:
    traceparent = f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01"
    (seen,) = asyncio.run(call("Unary", (("traceparent", traceparent),)))
    span = server_span(pipelines)
    assert span.name == f"{SERVICE}/Unary"
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None and span.parent.is_remote
    assert f"{span.parent.span_id:016x}" == CALLER_SPAN_ID
    # The handler ran inside the span: what it starts becomes the span's child.
    assert seen == ids(span)
    assert dict(span.attributes) == {
        "rpc.system": "grpc",
        "rpc.service": SERVICE,
        "rpc.method": "Unary",
        cv.BROKER: "broker-t",
        "rpc.grpc.status_code": 0,
    }
    assert span.status.status_code is StatusCode.UNSET


def test_tracestate_is_carried_along(call, pipelines: Pipelines) -> None:
    metadata = (("traceparent", f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01"), ("tracestate", "k=v"))
    asyncio.run(call("Unary", metadata))
    assert server_span(pipelines).context.trace_state.get("k") == "v"


def test_without_trace_context_the_span_is_a_root(call, pipelines: Pipelines) -> None:
    (seen,) = asyncio.run(call("Unary"))
    span = server_span(pipelines)
    assert span.parent is None
    assert seen == ids(span)


def test_an_unsampled_caller_trace_records_nothing_but_propagates(
    call, pipelines: Pipelines
) -> None:
    traceparent = f"00-{TRACE_ID}-{CALLER_SPAN_ID}-00"
    (seen,) = asyncio.run(call("Unary", (("traceparent", traceparent),)))
    assert pipelines.spans() == []
    assert seen.decode().startswith(TRACE_ID + "/")


def test_a_malformed_traceparent_starts_a_new_trace(call, pipelines: Pipelines) -> None:
    asyncio.run(call("Unary", (("traceparent", "not-a-trace"),)))
    span = server_span(pipelines)
    assert span.parent is None
    assert f"{span.context.trace_id:032x}" != TRACE_ID


def test_synchronous_handlers_are_traced_too(call, pipelines: Pipelines) -> None:
    (seen,) = asyncio.run(call("SyncUnary"))
    assert seen == ids(server_span(pipelines))


def test_a_server_stream_runs_inside_one_span(call, pipelines: Pipelines) -> None:
    seen = asyncio.run(call("Stream", kind="stream"))
    span = server_span(pipelines)
    assert span.name == f"{SERVICE}/Stream"
    assert seen == [ids(span)] * 3


def test_a_bidi_stream_runs_inside_one_span(call, pipelines: Pipelines) -> None:
    seen = asyncio.run(call("Bidi", kind="bidi"))
    span = server_span(pipelines)
    assert seen == [b"a:" + ids(span), b"b:" + ids(span)]


def test_a_refused_request_keeps_its_code_without_failing_the_span(
    call, pipelines: Pipelines
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        asyncio.run(call("Refuse"))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    span = server_span(pipelines)
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    # The caller's mistake, not the server's.
    assert span.status.status_code is StatusCode.UNSET


def test_a_handler_that_raises_fails_the_span(call, pipelines: Pipelines) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        asyncio.run(call("Fail"))
    assert failed.value.code() is grpc.StatusCode.UNKNOWN
    span = server_span(pipelines)
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNKNOWN.value[0]
    assert span.status.status_code is StatusCode.ERROR
    (event,) = span.events
    assert event.name == "exception"
    assert event.attributes["exception.message"] == "probe broke"
