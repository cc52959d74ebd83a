"""``host:port`` text and apache.rocketmq.v2 ``Endpoints``, both ways (broker and clients)."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb


def endpoints_of(address: str) -> pb.Endpoints:
    """``"10.0.0.1:8081"``, ``"[::1]:8081"`` or ``"broker-0.skiff:8081"`` as Endpoints."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if ":" in host:
        scheme = pb.AddressScheme.IPv6
    elif host.replace(".", "").isdigit():
        scheme = pb.AddressScheme.IPv4
    else:
        scheme = pb.AddressScheme.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


def address_of(endpoints: pb.Endpoints) -> str | None:
    """The first address of ``endpoints`` as ``host:port`` (None if it has none)."""
    if not endpoints.addresses:
        return None
    address = endpoints.addresses[0]
    host = f"[{address.host}]" if endpoints.scheme == pb.AddressScheme.IPv6 else address.host
    return f"{host}:{address.port}"
