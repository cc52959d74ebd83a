"""A SERVER span around every gRPC handler, continuing the caller's W3C trace.

The caller's ``traceparent``/``tracestate`` metadata (W3C Trace Context) become
the span's parent; the span is current while the handler runs, so the store's
append spans become its children. Without a caller's trace, under the broker's
default sampler, the ratio decision comes first (``root_sampling``): an unsampled
request runs in the one unsampled context without a call into the SDK. Unary and streaming
handlers alike: a streaming RPC's span lasts as long as the stream.

The wrapped handlers are for the broker's own server (``frontdoor.grpc.server``), which awaits
whatever a handler returns: a coroutine handler's wrapper is a plain function that
hands back either the handler's own coroutine (an unsampled call, on a server whose calls
start in the unsampled context: ``RpcServer.call_context``) or one that traces it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import conventions as cv
from .messaging_attributes import method_attributes, request_reader
from .root_sampling import RootSampling

_PROPAGATED = ("traceparent", "tracestate")
# Server-side codes that mark the span as failed (OpenTelemetry's gRPC conventions);
# the rest are the caller's mistakes, not the server's.
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_CODES_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}
# A call's SERVER span, and the context that makes it current while the handler runs;
# no span for an unsampled new trace, which only runs in the one unsampled context.
_Started = tuple[Span | None, Context]
_PROPAGATOR = TraceContextTextMapPropagator()


def _parent_context(context: Any, headers: Any) -> Context | None:
    """The caller's trace context; None when the caller sent none. ``headers``: the
    request's ``RequestHeaders`` on the broker's own server (None elsewhere), which kept
    traceparent when it read them and answers one key without building the metadata."""
    if headers is not None:
        traceparent = headers.traceparent
        value_of = headers.value
    else:
        value_of = _propagated(context.invocation_metadata()).get
        traceparent = value_of("traceparent")
    if traceparent is None:
        return None
    carrier = {"traceparent": traceparent}
    tracestate = value_of("tracestate")
    if tracestate is not None:
        carrier["tracestate"] = tracestate
    # A fresh context: a request's trace never continues anything but its own caller's.
    return _PROPAGATOR.extract(carrier, context=Context())


def _propagated(metadata: Any) -> dict[str, str]:
    """The W3C Trace Context entries of a call's whole metadata."""
    return {
        key: value.decode() if isinstance(value, bytes) else value
        for key, value in metadata or ()
        if key in _PROPAGATED
    }


def _status_code(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    # The context of a synchronous handler (run on a thread) cannot tell its code.
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, int):
        code = _CODES_BY_VALUE.get(code)
    if isinstance(code, grpc.StatusCode):
        return code
    if error is None:
        return grpc.StatusCode.OK
    if isinstance(error, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


def _finish(span: Span, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
    code = _status_code(context, error)
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if error is not None and not isinstance(error, asyncio.CancelledError | grpc.aio.AbortError):
        span.record_exception(error)
    if code in _SERVER_ERRORS:
        details = context.details() if hasattr(context, "details") else None
        span.set_status(Status(StatusCode.ERROR, details or code.name))


def _end(span: Span | None, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
    # An unsampled span records nothing: no status to work out.
    if span is not None and span.is_recording():
        _finish(span, context, error)
        span.end()


# Distinct handlers wrapped and kept; servers register a few dozen methods.
_MAX_WRAPPED = 1024


class TracingInterceptor(grpc.aio.ServerInterceptor):
    """``roots``: the ratio decision of new traces, when the provider's sampler is
    parent-based trace-id ratio with that ratio and the provider's id generator is
    ``roots.ids``; None leaves every decision to the SDK. ``calls_start_unsampled``: the
    server runs every call in ``roots.unsampled`` already, so an unsampled call's handler
    runs as it is, with nothing to make current."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider,
        broker_name: str,
        roots: RootSampling | None = None,
        *,
        calls_start_unsampled: bool = False,
    ) -> None:
        self._tracer = tracer_provider.get_tracer(cv.SERVER_SCOPE)
        self._broker_name = broker_name
        self._roots = roots
        self._calls_start_unsampled = calls_start_unsampled and roots is not None
        # Wrapping costs more than a small request; a method's handler is the same object
        # on every call, so its traced version is made once.
        self._wrapped: dict[int, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        known = self._wrapped.get(id(handler))
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self.trace(handler, handler_call_details.method)
        if len(self._wrapped) < _MAX_WRAPPED:
            self._wrapped[id(handler)] = (handler, wrapped)
        return wrapped

    def trace(self, handler: grpc.RpcMethodHandler, path: str) -> grpc.RpcMethodHandler:
        """``handler`` inside a SERVER span, for a server that registers it itself.

        Cheaper than intercepting: the server runs the interceptor chain as extra
        coroutines on every call, which costs a busy broker a few percent.
        """
        return _wrap(handler, self._starter(path), self._calls_start_unsampled)

    def _starter(self, path: str) -> Callable[[grpc.aio.ServicerContext, Any], _Started]:
        """What opens the SERVER span of one call of the method at ``path``: the span and the
        context to make current while the handler runs.

        An unsampled new trace gets no span, only the one unsampled context, which still
        has to become current so that what the handler does under it (the store's
        append) follows its decision instead of sampling a trace of its own.
        """
        full_method = path.lstrip("/")
        service, _, method = full_method.rpartition("/")
        attributes = {
            "rpc.system": "grpc",
            "rpc.service": service,
            "rpc.method": method,
            cv.BROKER: self._broker_name,
            **method_attributes(service, method),
        }
        from_request = request_reader(service, method)
        tracer = self._tracer
        roots = self._roots
        no_parent = Context()

        def start(context: grpc.aio.ServicerContext, request: Any) -> _Started:
            headers = getattr(context, "request_headers", None)
            # A new trace, on the broker's own server, is known without a call.
            parent = (
                None
                if headers is not None and headers.traceparent is None
                else _parent_context(context, headers)
            )
            if parent is None:
                if roots is not None:
                    unsampled = roots.unsampled_context()
                    if unsampled is not None:
                        return None, unsampled
                parent = no_parent
            span = tracer.start_span(full_method, context=parent, kind=SpanKind.SERVER)
            # Attributes only once sampled: building them costs more than the decision
            # (the broker's samplers do not look at attributes).
            if span.is_recording():
                span.set_attributes(attributes)
                if from_request is not None:
                    span.set_attributes(from_request(request))
            return span, trace.set_span_in_context(span)

        return start


def _wrap(
    handler: grpc.RpcMethodHandler,
    start: Callable[[Any, Any], _Started],
    calls_start_unsampled: bool,
) -> grpc.RpcMethodHandler:
    if handler.request_streaming and handler.response_streaming:
        make, behavior = grpc.stream_stream_rpc_method_handler, handler.stream_stream
    elif handler.request_streaming:
        make, behavior = grpc.stream_unary_rpc_method_handler, handler.stream_unary
    elif handler.response_streaming:
        make, behavior = grpc.unary_stream_rpc_method_handler, handler.unary_stream
    else:
        make, behavior = grpc.unary_unary_rpc_method_handler, handler.unary_unary
    if handler.response_streaming:
        traced = _traced_stream(behavior, start)
    elif inspect.iscoroutinefunction(behavior):
        traced = _traced_coroutine(behavior, start, calls_start_unsampled)
    else:
        traced = _traced_function(behavior, start)
    return make(
        traced,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _traced_coroutine(
    behavior: Callable, start: Callable[[Any, Any], _Started], calls_start_unsampled: bool
) -> Callable:
    async def traced(request: Any, context: Any, span: Span | None, current: Context) -> Any:
        token = otel_context.attach(current)
        try:
            response = await behavior(request, context)
        except BaseException as exc:
            _end(span, context, exc)
            raise
        finally:
            otel_context.detach(token)
        _end(span, context, None)
        return response

    def call(request: Any, context: grpc.aio.ServicerContext) -> Awaitable[Any]:
        span, current = start(context, request)
        if span is None and calls_start_unsampled:
            # Unsampled, and already current: nothing to set and nothing to record, so
            # the handler's own coroutine, unwrapped.
            return behavior(request, context)
        return traced(request, context, span, current)

    return call


def _traced_function(behavior: Callable, start: Callable[[Any, Any], _Started]) -> Callable:
    def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        span, current = start(context, request)
        token = otel_context.attach(current)
        try:
            response = behavior(request, context)
        except BaseException as exc:
            _end(span, context, exc)
            raise
        finally:
            otel_context.detach(token)
        _end(span, context, None)
        return response

    return call


def _traced_stream(behavior: Callable, start: Callable[[Any, Any], _Started]) -> Callable:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        span, current = start(context, request)
        token = otel_context.attach(current)
        try:
            responses = behavior(request, context)
            if inspect.isasyncgen(responses):
                async for response in responses:
                    yield response
            elif inspect.isawaitable(responses):
                # A handler that writes with context.write() and returns nothing.
                await responses
            else:
                for response in responses:
                    yield response
        except BaseException as exc:
            _end(span, context, exc)
            raise
        finally:
            otel_context.detach(token)
        _end(span, context, None)

    return call
