"""Where requests enter: every RPC of every service is authenticated, then authorized.

A gRPC server interceptor, so no service can be registered around it. A refused
call never reaches its service. How a refusal is answered:

* apache.rocketmq.v2: gRPC OK with the response's ``Status`` set to
  UNAUTHORIZED (40100, not signed right) or FORBIDDEN (40300, not allowed), which
  the official clients report as such; a refused Telemetry stream ends with
  gRPC UNAUTHENTICATED / PERMISSION_DENIED (it has no status field to use),
  also when a Settings it carries later claims topics or a group the user may not
  use.
* skiff.admin.v1 and skiff.records.v1: gRPC UNAUTHENTICATED / PERMISSION_DENIED.

Every message says what to do. Requests whose bytes do not parse pass through after
authentication: their service refuses them without touching any data. A disabled user
gets the answer an unknown access key or a wrong secret gets (UNAUTHORIZED, the
signature does not match): the answer never tells that the secret was right.

A call that passes is served knowing who signed it (``caller.signed_by``): a client's
session belongs to that access key.

The one exception is grpc.health.v1.Health: probes (the kubelet's among them) sign
nothing, and it tells only whether the broker serves.
"""

from __future__ import annotations

import datetime
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..error_text import bounded
from ..frontdoor.grpc.health_service import HEALTH_SERVICE
from ..frontdoor.grpc.undecodable import Undecodable
from .caller import verified
from .decision import Need, decide
from .rights import needs_of, telemetry_needs
from .signature import SignatureError, not_matching, verify
from .user_store import UserStore

_MESSAGING = spb.DESCRIPTOR.services_by_name["MessagingService"]
_MESSAGING_PREFIX = f"/{_MESSAGING.full_name}/"
_TELEMETRY = _MESSAGING_PREFIX + "Telemetry"
# Exactly this service's methods pass unauthenticated (see the module docstring): the
# standard health service, whose probes carry no signature.
_UNGUARDED_PREFIX = f"/{HEALTH_SERVICE}/"


class _Refused(Exception):
    def __init__(self, authenticated: bool, message: str) -> None:
        super().__init__(message)
        self.authenticated = authenticated
        self.message = bounded(message)


def caller_ip(peer: str) -> str:
    """The address part of a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        host = rest.rpartition(":")[0]
        return host.strip("[]")
    return ""


class AuthGate(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        users: UserStore,
        *,
        max_skew_s: float,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._users = users
        self._max_skew_s = max_skew_s
        self._clock = clock
        self._guarded: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(_UNGUARDED_PREFIX):
            return handler
        guarded = self._guarded.get(method)
        if guarded is None:
            guarded = self._guarded[method] = self._guard(handler, method)
        return guarded

    # -- the check ------------------------------------------------------------

    def _check(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> str:
        """The access key that signed the call; _Refused if it may not make it."""
        headers = {}
        for item in context.invocation_metadata() or ():
            value = item.value
            headers[item.key] = value if isinstance(value, str) else value.decode("latin-1")
        try:
            access_key = verify(headers, self._enabled_secret, self._clock(), self._max_skew_s)
        except SignatureError as exc:
            raise _Refused(False, str(exc)) from None
        verified(access_key)
        if request is None or isinstance(request, Undecodable):
            return access_key
        self._authorize(access_key, needs_of(method, request), context)
        return access_key

    def _enabled_secret(self, access_key: str) -> str | None:
        """The secret of an admitted user; None for an unknown, disabled or unvetted one."""
        user = self._users.admitted(access_key)
        return None if user is None else user.secret_key

    def _authorize(
        self, access_key: str, needs: tuple[Need, ...], context: grpc.aio.ServicerContext
    ) -> None:
        user = self._users.admitted(access_key)
        if user is None:  # deleted or disabled since the signature check
            raise _Refused(False, not_matching(access_key))
        refusal = decide(user, self._users.acl(access_key), needs, caller_ip(context.peer()))
        if refusal is not None:
            raise _Refused(True, refusal.reason)

    # -- wrapping handlers ----------------------------------------------------

    def _guard(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        answer = _answerer(method)
        kwargs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    self._check(method, request, context)
                except _Refused as refused:
                    return await answer(refused, context)
                result = inner(request, context)
                return await result if inspect.isawaitable(result) else result

            return grpc.unary_unary_rpc_method_handler(unary_unary, **kwargs)
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    self._check(method, request, context)
                except _Refused as refused:
                    yield await answer(refused, context)
                    return
                async for response in inner_stream(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(unary_stream, **kwargs)
        streaming = handler.stream_stream or handler.stream_unary
        is_stream_stream = handler.stream_stream is not None

        async def check_stream(context: grpc.aio.ServicerContext) -> str:
            try:
                return self._check(method, None, context)
            except _Refused as refused:
                await _abort(refused, context)
                raise

        if is_stream_stream:

            async def stream_stream(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                access_key = await check_stream(context)
                if method == _TELEMETRY:
                    requests = self._authorized_commands(access_key, requests, context)
                async for response in streaming(requests, context):
                    yield response

            return grpc.stream_stream_rpc_method_handler(stream_stream, **kwargs)

        async def stream_unary(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            await check_stream(context)
            result = streaming(requests, context)
            return await result if inspect.isawaitable(result) else result

        return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)

    async def _authorized_commands(
        self, access_key: str, commands: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        """The stream's commands, each Settings allowed first; a refusal ends the stream."""
        async for command in commands:
            try:
                self._authorize(access_key, telemetry_needs(command), context)
            except _Refused as refused:
                await _abort(refused, context)
            yield command


def may(users: UserStore, access_key: str, needs: tuple[Need, ...], peer: str) -> bool:
    """Whether ``access_key`` may now do what ``needs`` say from ``peer`` (a gRPC peer).

    For what the broker sends on its own, long after the request that set it up: the
    user's policies may have changed since.
    """
    user = users.admitted(access_key)
    if user is None:
        return False
    return decide(user, users.acl(access_key), needs, caller_ip(peer)) is None


async def _abort(refused: _Refused, context: grpc.aio.ServicerContext) -> None:
    code = (
        grpc.StatusCode.PERMISSION_DENIED
        if refused.authenticated
        else (grpc.StatusCode.UNAUTHENTICATED)
    )
    await context.abort(code, refused.message)


def _answerer(method: str) -> Callable[[_Refused, grpc.aio.ServicerContext], Awaitable[Any]]:
    """How a refused call of ``method`` is answered (see the module docstring)."""
    if method.startswith(_MESSAGING_PREFIX):
        name = method[len(_MESSAGING_PREFIX) :]
        rpc = _MESSAGING.methods_by_name.get(name)
        if rpc is not None and not rpc.client_streaming:
            response_type = getattr(spb, rpc.output_type.name)

            async def in_status(refused: _Refused, context: grpc.aio.ServicerContext) -> Any:
                code = pb.Code.FORBIDDEN if refused.authenticated else pb.Code.UNAUTHORIZED
                return response_type(status=pb.Status(code=code, message=refused.message))

            return in_status

    async def aborting(refused: _Refused, context: grpc.aio.ServicerContext) -> Any:
        await _abort(refused, context)

    return aborting
