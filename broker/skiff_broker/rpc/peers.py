"""Who is calling: the client's address as a record stores it (BORNHOST)."""

from __future__ import annotations

from ..tls.front_door import client_peer


def peer_host(peer: str) -> str:
    """A record host from a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``).

    Behind the TLS front door gRPC's peer is the door's loopback side; the client's own
    address is used instead."""
    kind, _, rest = client_peer(peer).partition(":")
    if kind == "ipv4":
        return rest
    if kind == "ipv6":
        return rest if rest.startswith("[") else f"[{rest}]"
    return "127.0.0.1:0"
