"""Who is calling: the client's address as a record stores it (BORNHOST)."""

from __future__ import annotations


def peer_host(peer: str) -> str:
    """A record host from a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest
    if kind == "ipv6":
        return rest if rest.startswith("[") else f"[{rest}]"
    return "127.0.0.1:0"
