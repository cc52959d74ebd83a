"""Whether the addresses a broker will listen on are free, checked before its store opens.

A busy port found only after recovery would have cost the whole start (and, on a fresh
data directory, its pre-allocated files). Each address is bound once with a throwaway
socket; the error names the port, the host and the option that changes it. Port 0 (any
free port) always passes. The check cannot reserve the port: another process may still
take it before the broker binds, which then fails with the server's own error.
"""

from __future__ import annotations

import errno
import socket


class PortUnavailable(Exception):
    """An address the broker was told to listen on cannot be bound; says which option."""


def check_can_listen(address: str, option: str) -> None:
    """Raise PortUnavailable if ``address`` (HOST:PORT) cannot be bound now."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return
    host = host.strip("[]")
    try:
        places = socket.getaddrinfo(
            host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise PortUnavailable(
            f"cannot listen on {address}: the host {host!r} is unknown ({exc.strerror}); "
            f"give {option} an address of this machine, e.g. 127.0.0.1:{port}"
        ) from None
    for family, kind, proto, _, place in places:
        with socket.socket(family, kind, proto) as probe:
            # As the server binds: a port left in TIME_WAIT by a stopped broker is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(place)
            except OSError as exc:
                raise PortUnavailable(_why(exc, host or str(place[0]), port, option)) from None


def _why(exc: OSError, host: str, port: str, option: str) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is in use by another process; "
            f"pick another with {option} (or stop that process)"
        )
    if exc.errno == errno.EACCES:
        return (
            f"port {port} on {host} needs privileges this user lacks; "
            f"pick one above 1023 with {option}"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host} is no address of this machine; pick one that is with {option}"
    return f"cannot listen on port {port} on {host}: {exc.strerror}; pick another with {option}"
