"""A record's BORNHOST and STOREHOST fields: address and port, IPv4 or IPv6.

Invariant: ``decode_host(encode_host(h))`` names the same address and port as ``h``;
an IPv4 host takes 8 bytes, an IPv6 host 20 (its SYSFLAG bit says which).
"""

from __future__ import annotations

import functools
import socket

from .record_layout import BORNHOST_V6, INT, STOREHOST_V6


@functools.lru_cache(maxsize=1024)
def encode_host(host: str) -> bytes:
    """``"ip:port"`` (``"[v6]:port"`` for IPv6) as the record's host field."""
    address, _, port = host.rpartition(":")
    if not address:
        raise ValueError(f"host {host!r} must look like ip:port")
    address = address.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        packed = socket.inet_pton(family, address)
    except OSError as exc:
        raise ValueError(f"host {host!r} has an invalid IP address") from exc
    if not port.isdecimal() or int(port) > 65535:
        raise ValueError(f"host {host!r} must end with a port from 0 to 65535")
    return packed + INT.pack(int(port))


def decode_host(raw: bytes) -> str:
    if len(raw) == 20:
        return f"[{socket.inet_ntop(socket.AF_INET6, raw[:16])}]:{INT.unpack(raw[16:])[0]}"
    return f"{socket.inet_ntop(socket.AF_INET, raw[:4])}:{INT.unpack(raw[4:])[0]}"


def host_flags(born_host: bytes, store_host: bytes) -> int:
    """The SYSFLAG bits that say which of the two hosts are IPv6."""
    return (BORNHOST_V6 if len(born_host) == 20 else 0) | (
        STOREHOST_V6 if len(store_host) == 20 else 0
    )
