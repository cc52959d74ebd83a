"""The one place Skiff's clients make gRPC channels: plaintext or TLS, signed or not.

``ClientTls`` says how to connect: plaintext (the default, which a permissive broker
accepts), TLS verified against a CA file (or the system's roots), or TLS trusting whatever
certificate the broker presents (``verify=False``: encrypted, but not authenticated; the
certificate is fetched with a blocking handshake when the channel is made). A verified
channel may check the certificate for a fixed ``server_name`` instead of the dialled host.

``credentials`` (a user's keys) sign every call of the channel, as RocketMQ 5's clients
do; brokers with authentication off ignore the signature.

``ClientTls.from_env()`` reads SKIFF_TLS, SKIFF_TLS_CA and SKIFF_TLS_INSECURE; the CLI sets
the settings for the clients a command makes with ``using(tls)``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import ssl
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from .credentials import Credentials, signed_channel
from .environment import TLS_CA_ENV, TLS_ENV, TLS_INSECURE_ENV

_TRUE = {"1", "true", "yes", "on"}


@dataclasses.dataclass(frozen=True, slots=True)
class ClientTls:
    enabled: bool = False
    # PEM file of the CA (or the broker's self-signed certificate) to verify the broker with.
    ca_file: str = ""
    # False: trust the certificate the broker presents without checking it.
    verify: bool = True
    # The name the broker's certificate must carry, instead of the host it is dialled at
    # (brokers calling each other, the operator calling brokers: see PEER_NAME).
    server_name: str = ""
    # The CA itself (PEM), for callers that hold it in memory rather than in a file.
    ca_pem: bytes = b""

    @classmethod
    def from_env(cls) -> ClientTls:
        ca = os.environ.get(TLS_CA_ENV, "")
        insecure = os.environ.get(TLS_INSECURE_ENV, "").lower() in _TRUE
        enabled = os.environ.get(TLS_ENV, "").lower() in _TRUE or bool(ca) or insecure
        return cls(enabled=enabled, ca_file=ca, verify=not insecure)


PLAINTEXT = ClientTls()

# The DNS name every broker certificate signed by a cluster's CA carries (subjectAltName).
# Brokers are dialled by IP, pod or Service name, which change with every rescheduling,
# so the brokers calling each other and the operator calling them check this name.
PEER_NAME = "skiff-broker"
_current: contextvars.ContextVar[ClientTls] = contextvars.ContextVar("skiff_tls", default=PLAINTEXT)


@contextlib.contextmanager
def using(tls: ClientTls) -> Iterator[None]:
    """Clients made inside the block (with no ``tls`` of their own) connect this way."""
    token = _current.set(tls)
    try:
        yield
    finally:
        _current.reset(token)


def _credentials(endpoint: str, tls: ClientTls) -> tuple[grpc.ChannelCredentials, list]:
    if tls.verify:
        roots = tls.ca_pem or None
        if roots is None and tls.ca_file:
            try:
                with open(tls.ca_file, "rb") as f:
                    roots = f.read()
            except OSError as exc:
                raise OSError(
                    f"cannot read the TLS CA file {tls.ca_file}: {exc.strerror}"
                ) from None
        options = [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
        return grpc.ssl_channel_credentials(root_certificates=roots), options
    # gRPC always verifies: trust the broker's own certificate, under a name it carries.
    host, _, port = endpoint.rpartition(":")
    try:
        pem = ssl.get_server_certificate((host.strip("[]"), int(port)), timeout=10)
    except (OSError, ValueError) as exc:
        raise OSError(f"cannot fetch the TLS certificate of {endpoint}: {exc}") from None
    options = [("grpc.ssl_target_name_override", _a_name_of(pem.encode()))]
    return grpc.ssl_channel_credentials(root_certificates=pem.encode()), options


def _a_name_of(cert_pem: bytes) -> str:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n.value) for n in san if isinstance(n, x509.DNSName | x509.IPAddress)]
        if names:
            return names[0]
    except x509.ExtensionNotFound:
        pass
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common[0].value) if common else "localhost"


def _settings(
    endpoint: str, tls: ClientTls | None, options: Sequence[tuple[str, Any]]
) -> tuple[ClientTls, grpc.ChannelCredentials | None, list]:
    tls = tls if tls is not None else _current.get()
    if not tls.enabled:
        return tls, None, list(options)
    credentials, extra = _credentials(endpoint, tls)
    return tls, credentials, [*options, *extra]


def channel(
    endpoint: str,
    *,
    tls: ClientTls | None = None,
    credentials: Credentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A blocking-API channel to ``endpoint`` (HOST:PORT)."""
    _, channel_credentials, opts = _settings(endpoint, tls, options)
    if channel_credentials is None:
        made = grpc.insecure_channel(endpoint, options=opts)
    else:
        made = grpc.secure_channel(endpoint, channel_credentials, options=opts)
    return signed_channel(made, credentials)


def aio_channel(
    endpoint: str,
    *,
    tls: ClientTls | None = None,
    options: Sequence[tuple[str, Any]] = (),
    interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel to ``endpoint`` (HOST:PORT)."""
    _, credentials, opts = _settings(endpoint, tls, options)
    if credentials is None:
        return grpc.aio.insecure_channel(endpoint, options=opts, interceptors=interceptors)
    return grpc.aio.secure_channel(endpoint, credentials, options=opts, interceptors=interceptors)


def current_tls() -> ClientTls:
    """The settings ``using`` put in force here (plaintext outside any ``using`` block)."""
    return _current.get()
