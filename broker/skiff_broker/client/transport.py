"""How every Skiff client talks to brokers: one place for channels, headers, timeouts, errors.

A client (``MessagingClient``, ``PullConsumer``, ``AdminClient``) is a :class:`BrokerClient`,
holding a :class:`Transport` to its one broker; the ``BatchingProducer`` holds an
:class:`AioTransport`, which connects to every broker the producer reaches in the same way.
A transport owns:

- its channels, made by ``channels`` with :data:`CHANNEL_OPTIONS`, over the TLS settings
  given (or those ``channels.using`` puts in force when the transport is made);
- the signing of every call with the user's ``credentials`` (none: unsigned);
- the client's identity and the headers every RocketMQ 5 client sends with each call
  (:class:`ClientHeaders`: client ID, protocol, language, version, namespace, request ID);
- the default timeout of a call, which a call may replace with its own;
- turning a failed call into the :mod:`errors` exception that names the broker.

Invariants: a transport's client ID and TLS settings never change after it is made; every
call it makes carries the same headers but a fresh request ID; a call fails only with a
``SkiffError`` (never a bare ``grpc.RpcError``).
"""

from __future__ import annotations

import dataclasses
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Self, TypeVar

import grpc

from .. import __version__
from .channels import ClientTls, aio_channel, channel, current_tls
from .credentials import Credentials, signing_interceptors
from .errors import from_rpc_error

Response = TypeVar("Response")

# Brokers bound what they accept and send themselves (their maximum message size);
# gRPC's own 4 MiB receive limit would refuse a large fetch or query answer.
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
)


@dataclasses.dataclass(frozen=True, slots=True)
class ClientHeaders:
    """Who the client is, as the headers of each of its calls say it."""

    client_id: str
    namespace: str = ""

    @classmethod
    def for_client(cls, kind: str, namespace: str = "") -> ClientHeaders:
        """A new identity: brokers key a client's consumers and producers by its ID."""
        return cls(f"{socket.gethostname()}@{kind}@{uuid.uuid4().hex[:12]}", namespace)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (
            ("x-mq-client-id", self.client_id),
            ("x-mq-protocol", "GRPC_V2"),
            ("x-mq-language", "PYTHON"),
            ("x-mq-client-version", __version__),
            ("x-mq-namespace", self.namespace),
            ("x-mq-request-id", str(uuid.uuid4())),
        )


class PendingCall:
    """A call under way: wait for its response (``result``), or cancel it."""

    __slots__ = ("_call", "_endpoint")

    def __init__(self, call: grpc.Future, endpoint: str) -> None:
        self._call = call
        self._endpoint = endpoint

    def result(self) -> Any:
        try:
            return self._call.result()
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self._endpoint) from None

    def cancel(self) -> None:
        self._call.cancel()


class Transport:
    """A blocking-API connection to one broker, as every synchronous client uses it."""

    def __init__(
        self,
        endpoint: str,
        *,
        client_kind: str,
        timeout: float,
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
        namespace: str = "",
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.headers = ClientHeaders.for_client(client_kind, namespace)
        self.channel = channel(
            endpoint,
            tls=tls if tls is not None else current_tls(),
            credentials=credentials,
            options=CHANNEL_OPTIONS,
        )

    def close(self) -> None:
        self.channel.close()

    def _timeout(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    def call(
        self, method: Callable[..., Response], request: object, *, timeout: float | None = None
    ) -> Response:
        """The response of a unary call (``timeout``: this call's own instead of the default)."""
        try:
            return method(request, timeout=self._timeout(timeout), metadata=self.headers.metadata())
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.endpoint) from None

    def start(self, method: Any, request: object, *, timeout: float | None = None) -> PendingCall:
        """Start a unary call; gRPC carries it on its own threads until it is waited for."""
        future = method.future(
            request, timeout=self._timeout(timeout), metadata=self.headers.metadata()
        )
        return PendingCall(future, self.endpoint)

    def stream(
        self, method: Callable[..., Any], request: object, *, timeout: float | None = None
    ) -> Iterator[Any]:
        """The responses of a server-streaming call, as they arrive."""
        try:
            yield from method(
                request, timeout=self._timeout(timeout), metadata=self.headers.metadata()
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.endpoint) from None


class BrokerClient:
    """What every synchronous client is: a :class:`Transport` to one broker, closed by ``with``."""

    def __init__(
        self,
        endpoint: str,
        *,
        client_kind: str,
        timeout: float,
        tls: ClientTls | None,
        credentials: Credentials | None,
        namespace: str = "",
    ) -> None:
        self.endpoint = endpoint
        self._transport = Transport(
            endpoint,
            client_kind=client_kind,
            timeout=timeout,
            tls=tls,
            credentials=credentials,
            namespace=namespace,
        )

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AioTransport:
    """asyncio connections to any number of brokers, all made and called the same way.

    ``interceptors`` (tracing, metrics) see every call before it is signed.
    """

    def __init__(
        self,
        *,
        client_kind: str,
        timeout: float,
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
        namespace: str = "",
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    ) -> None:
        self.timeout = timeout
        self.headers = ClientHeaders.for_client(client_kind, namespace)
        self._tls = tls if tls is not None else current_tls()
        self._interceptors = [*interceptors, *signing_interceptors(credentials)]
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, endpoint: str) -> grpc.aio.Channel:
        """The channel to ``endpoint`` (HOST:PORT), made on first use."""
        made = self._channels.get(endpoint)
        if made is None:
            made = self._channels[endpoint] = aio_channel(
                endpoint,
                tls=self._tls,
                options=CHANNEL_OPTIONS,
                interceptors=self._interceptors or None,
            )
        return made

    async def call(self, endpoint: str, method: Callable[..., Any], request: object) -> Any:
        """The response of a unary call on ``endpoint``'s channel (``method`` of its stub)."""
        try:
            return await method(request, timeout=self.timeout, metadata=self.headers.metadata())
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc, endpoint) from None

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        for made in channels:
            await made.close()
