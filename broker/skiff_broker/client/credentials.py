"""Signing requests as RocketMQ 5's clients do, for every call of a channel.

``Credentials("ak", "sk")`` hold a user's keys; ``signed_channel`` and
``signing_interceptors`` add the ``authorization`` and ``x-mq-date-time``
headers (MQv2-HMAC-SHA1, signed at call time) to each call. Brokers with
authentication disabled ignore them.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Sequence
from typing import Any

import grpc

from ..wire.request_signature import signed_headers
from .environment import ACCESS_KEY_ENV, SECRET_KEY_ENV


@dataclasses.dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    session_token: str = dataclasses.field(default="", repr=False)

    def headers(self) -> list[tuple[str, str]]:
        return signed_headers(
            self.access_key,
            self.secret_key,
            datetime.datetime.now(datetime.UTC),
            self.session_token,
        )

    @classmethod
    def of(cls, access_key: str, secret_key: str) -> Credentials | None:
        """Credentials when both keys are given, None when neither; ValueError for one."""
        if bool(access_key) != bool(secret_key):
            raise ValueError("give both an access key and a secret key, or neither")
        return cls(access_key, secret_key) if access_key else None

    @classmethod
    def from_env(cls) -> Credentials | None:
        return cls.of(os.environ.get(ACCESS_KEY_ENV, ""), os.environ.get(SECRET_KEY_ENV, ""))


def _signed(details: Any, credentials: Credentials, details_type: type) -> Any:
    metadata: Any = [*(details.metadata or ()), *credentials.headers()]
    if details_type is grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*metadata)
    return details_type(
        method=details.method,
        timeout=details.timeout,
        metadata=metadata,
        credentials=details.credentials,
        wait_for_ready=details.wait_for_ready,
    )


@dataclasses.dataclass(frozen=True)
class _CallDetails(grpc.ClientCallDetails):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any = None


class _SyncSigner(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def _details(self, details: Any) -> Any:
        return _signed(details, self._credentials, _CallDetails)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


def signed_channel(channel: grpc.Channel, credentials: Credentials | None) -> grpc.Channel:
    """``channel`` signing every call with ``credentials`` (unchanged when None)."""
    if credentials is None:
        return channel
    return grpc.intercept_channel(channel, _SyncSigner(credentials))


class _AioUnaryUnarySigner(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        details = _signed(client_call_details, self._credentials, grpc.aio.ClientCallDetails)
        return await continuation(details, request)


class _AioUnaryStreamSigner(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        details = _signed(client_call_details, self._credentials, grpc.aio.ClientCallDetails)
        return await continuation(details, request)


def signing_interceptors(credentials: Credentials | None) -> Sequence[grpc.aio.ClientInterceptor]:
    """grpc.aio interceptors signing every unary and server-streaming call."""
    if credentials is None:
        return ()
    return (_AioUnaryUnarySigner(credentials), _AioUnaryStreamSigner(credentials))
