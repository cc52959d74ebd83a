"""Requests whose bytes do not parse as the method's request message.

Protobuf refuses to decode a string field holding invalid UTF-8, or a
truncated or garbled message. Left to gRPC, that failure answers UNKNOWN and
logs a traceback as if the broker had failed; the client's bytes are at fault.
Each service registers its methods through :func:`lenient_rpc_handler`, so such
a request reaches the method's handler as an :class:`Undecodable`, which the
handler answers with INVALID_ARGUMENT and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError

from ...error_text import bounded

_HANDLER_KINDS = {
    # (client streaming, server streaming)
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


class Undecodable:
    """Stands for request bytes that do not parse; ``reason`` says why, briefly."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def lenient_parser(request_type: Any, hint: str) -> Callable[[bytes], object]:
    """Parse ``request_type``, or give an Undecodable naming it; ``hint`` says what to do."""

    def parse(data: bytes) -> object:
        try:
            return request_type.FromString(data)
        except DecodeError as exc:
            return Undecodable(
                bounded(
                    f"the request is not a valid {request_type.DESCRIPTOR.full_name} ({exc}); "
                    f"{hint}"
                )
            )

    return parse


async def refuse(context: grpc.aio.ServicerContext, request: Undecodable) -> None:
    """End the call with INVALID_ARGUMENT (raises, as ``context.abort`` does)."""
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)


def lenient_rpc_handler(
    service: ServiceDescriptor,
    servicer: object,
    messages: ModuleType,
    *,
    hint: str,
    trace: Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler] | None = None,
) -> grpc.GenericRpcHandler:
    """``servicer``'s methods, registered as the generated ``add_*_to_server`` would,
    except that undecodable requests reach them as Undecodable.

    ``messages`` is the module holding the request and response types; ``trace``
    wraps each method's handler (given its path) once, here, rather than in an
    interceptor on every call.
    """
    handlers = {}
    for method in service.methods:
        handler = _HANDLER_KINDS[(method.client_streaming, method.server_streaming)](
            getattr(servicer, method.name),
            request_deserializer=lenient_parser(getattr(messages, method.input_type.name), hint),
            response_serializer=getattr(messages, method.output_type.name).SerializeToString,
        )
        if trace is not None:
            handler = trace(handler, f"/{service.full_name}/{method.name}")
        handlers[method.name] = handler
    return grpc.method_handlers_generic_handler(service.full_name, handlers)
