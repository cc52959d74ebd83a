"""How long a connection may take to open or stay idle, and how many may be open at once.

The settings (``ConnectionLimits``) are the broker's; ``ConnectionCounts`` is what a
listener admits connections by. Defaults follow production gRPC servers and RocketMQ 5's
proxy: gRPC allows 120 s for a connection's handshakes, RocketMQ's proxy closes a
connection idle for 120 s (``grpcClientIdleTimeMills``, its gRPC ``maxConnectionIdle``),
and Netty (under both) stops accepting for 1 s when out of descriptors.

Invariants of ``ConnectionCounts``:
- ``open`` is the number of seats taken and not yet released; each ``Seat`` is released at
  most once, so a connection that ends twice (a failed handshake, then its close) is not
  counted off twice.
- A seat is refused, and nothing is counted, when the total or the address's count is at
  its limit; connections already seated are never closed by a refusal.
"""

from __future__ import annotations

import dataclasses

from ..wire.setting import option

PREFACE_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 120.0
MAX_CONNECTIONS = 10_000
MAX_CONNECTIONS_PER_ADDRESS = 1_000
ACCEPT_PAUSE_S = 1.0


@dataclasses.dataclass(slots=True)
class ConnectionLimits:
    preface_timeout_s: float = option(
        PREFACE_TIMEOUT_S,
        "--preface-timeout",
        "SKIFF_PREFACE_TIMEOUT",
        "Seconds a new client connection has to finish its TLS handshake and send the "
        "HTTP/2 preface and SETTINGS; one that has not is closed.",
        minimum=0,
        min_open=True,
    )
    idle_timeout_s: float = option(
        IDLE_TIMEOUT_S,
        "--idle-connection-timeout",
        "SKIFF_IDLE_CONNECTION_TIMEOUT",
        "Seconds a client connection may have no call open (gRPC max_connection_idle); "
        "then it is sent GOAWAY and closed, and clients reconnect when they next call. "
        "Long polls and telemetry streams are open calls. 0: never.",
        minimum=0,
    )
    max_connections: int = option(
        MAX_CONNECTIONS,
        "--max-connections",
        "SKIFF_MAX_CONNECTIONS",
        "Client connections open at once, TLS handshakes in progress included; past it a "
        "new connection is closed at once. Keep it under the process's descriptor limit "
        "(ulimit -n).",
        minimum=1,
    )
    max_connections_per_address: int = option(
        MAX_CONNECTIONS_PER_ADDRESS,
        "--max-connections-per-address",
        "SKIFF_MAX_CONNECTIONS_PER_ADDRESS",
        "Client connections open at once from one IP address; past it a new one from "
        "that address is closed at once. Clients behind one NAT share an address.",
        minimum=1,
    )
    accept_pause_s: float = option(
        ACCEPT_PAUSE_S,
        "--accept-pause",
        "SKIFF_ACCEPT_PAUSE",
        "Seconds the broker stops accepting connections when it is out of file "
        "descriptors or socket memory; waiting clients stay in the backlog.",
        minimum=0,
        min_open=True,
    )

    def validate(self) -> None:
        if self.preface_timeout_s <= 0 or self.accept_pause_s <= 0:
            raise ValueError("--preface-timeout and --accept-pause must be positive")
        if self.idle_timeout_s < 0:
            raise ValueError("--idle-connection-timeout cannot be negative (0: never)")
        if self.max_connections < 1 or self.max_connections_per_address < 1:
            raise ValueError(
                "--max-connections and --max-connections-per-address must be at least 1"
            )


class Seat:
    """One admitted connection's place in its counts."""

    __slots__ = ("_counts", "address")

    def __init__(self, counts: ConnectionCounts, address: str) -> None:
        self._counts: ConnectionCounts | None = counts
        self.address = address

    def release(self) -> None:
        counts, self._counts = self._counts, None
        if counts is not None:
            counts._leave(self.address)


class ConnectionCounts:
    """Connections open in total and per address, against their limits.

    One instance may serve several listeners (the client port and the external one), so
    the total is the broker's.
    """

    def __init__(self, max_total: int, max_per_address: int) -> None:
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.open = 0
        self._per_address: dict[str, int] = {}

    @classmethod
    def of(cls, limits: ConnectionLimits) -> ConnectionCounts:
        return cls(limits.max_connections, limits.max_connections_per_address)

    def seat(self, address: str) -> Seat | None:
        """A seat for a connection from ``address``, or None when a limit is reached."""
        if self.open >= self.max_total:
            return None
        held = self._per_address.get(address, 0)
        if held >= self.max_per_address:
            return None
        self._per_address[address] = held + 1
        self.open += 1
        return Seat(self, address)

    def of_address(self, address: str) -> int:
        return self._per_address.get(address, 0)

    def _leave(self, address: str) -> None:
        self.open -= 1
        held = self._per_address[address] - 1
        if held:
            self._per_address[address] = held
        else:
            del self._per_address[address]
