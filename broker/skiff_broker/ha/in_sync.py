"""Which replicas are in sync, and SYNC-mode writers waiting for enough of them.

A replica is in sync while it is connected and no further behind the master's
log than the configured gap. The replicated watermark is the offset that at
least ``required`` in-sync replicas have acknowledged; a SYNC write waits until
the watermark passes the end of its records. The waiting itself is the store's
group-commit waiter list, fed with this watermark instead of the flushed offset:
one release per acknowledgement, however many writers it covers.

Under a Lease the in-sync set is also published, and who may become master is
decided from it. Then only the published replicas' acknowledgements count, and
all of them: every replica named there holds every write that was acknowledged.
A replica joins the set only once it holds everything acknowledged so far; one
that falls behind holds writes back until a set without it is published. A
fenced master (it could not renew its Lease) releases no writer at all.

A replica is known by its name. A new connection under the name of a replica
that is connected and was heard from within the heartbeat timeout is refused:
it cannot take over that replica's entry (and so its acknowledgements). One
whose old connection closed, or went silent that long, takes its place.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ..store.flush_waiters import FlushOutcome, FlushWaiters


@dataclasses.dataclass(slots=True)
class ReplicaState:
    name: str
    address: str
    acked_offset: int
    connected: bool = True
    last_heard: float = dataclasses.field(default_factory=time.monotonic)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """What admin info shows of one replica."""

    name: str
    address: str
    acked_offset: int
    lag_bytes: int
    in_sync: bool
    connected: bool


class NameInUse(Exception):
    """Another live connection holds this replica name; the message says what to do."""


class InSyncTracker:
    def __init__(
        self,
        *,
        required: int,
        max_gap: int,
        master_offset: Callable[[], int],
        heartbeat_timeout: float = 20.0,
    ) -> None:
        self.required = required
        self.heartbeat_timeout = heartbeat_timeout
        self.max_gap = max_gap
        self._master_offset = master_offset
        # By replica name: a replica that reconnects takes its old entry's place.
        self._replicas: dict[str, ReplicaState] = {}
        self.waiters = FlushWaiters()
        # Names of the replicas the Lease lists as in sync (None: no Lease decides roles).
        self.published: frozenset[str] | None = None
        self.fenced = False

    def connected(self, name: str, address: str, offset: int) -> ReplicaState:
        """The entry of a new connection; NameInUse if a live one holds ``name``."""
        current = self._replicas.get(name)
        if (
            current is not None
            and current.connected
            and time.monotonic() - current.last_heard <= self.heartbeat_timeout
        ):
            raise NameInUse(
                f"replica {name} is already connected from {current.address}; give each "
                "broker of the group its own name (a replica is named by its pod or its "
                "--listen address)"
            )
        state = ReplicaState(name, address, offset)
        self._replicas[name] = state
        self._advance()
        return state

    def disconnected(self, state: ReplicaState) -> None:
        # Only the entry of this connection: a newer one may already have replaced it.
        if self._replicas.get(state.name) is state:
            state.connected = False

    def acked(self, state: ReplicaState, offset: int) -> None:
        state.acked_offset = offset
        state.last_heard = time.monotonic()
        self._advance()

    def is_in_sync(self, state: ReplicaState, master_offset: int | None = None) -> bool:
        if master_offset is None:
            master_offset = self._master_offset()
        return state.connected and master_offset - state.acked_offset <= self.max_gap

    def replicated_offset(self) -> int:
        """The offset at least ``required`` in-sync replicas hold; -1 if too few are in sync."""
        if self.fenced:
            return -1
        if self.published is not None:
            members = [self._replicas.get(name) for name in self.published]
            held = [m.acked_offset for m in members if m is not None]
            if len(held) < len(members) or len(held) < self.required:
                return -1
            return min(held)
        master_offset = self._master_offset()
        acks = sorted(
            (s.acked_offset for s in self._replicas.values() if self.is_in_sync(s, master_offset)),
            reverse=True,
        )
        return acks[self.required - 1] if len(acks) >= self.required else -1

    def publishable(self, floor: int) -> list[str]:
        """Replicas that hold every write acknowledged so far (all below ``floor`` too)."""
        master_offset = self._master_offset()
        acknowledged = max(floor, self.waiters.flushed)
        return sorted(
            s.name
            for s in self._replicas.values()
            if self.is_in_sync(s, master_offset) and s.acked_offset >= acknowledged
        )

    def publish(self, names: frozenset[str]) -> None:
        self.published = names
        self._advance()

    def _advance(self) -> None:
        watermark = self.replicated_offset()
        if watermark >= 0:
            self.waiters.advance(watermark)

    async def wait_async(self, offset: int, timeout: float) -> bool:
        """True once enough in-sync replicas hold everything below ``offset``."""
        return await self.waiters.wait_async(offset, timeout) is FlushOutcome.FLUSHED

    def wait(self, offset: int, timeout: float) -> bool:
        return self.waiters.wait(offset, timeout) is FlushOutcome.FLUSHED

    def statuses(self) -> list[ReplicaStatus]:
        master_offset = self._master_offset()
        return [
            ReplicaStatus(
                name=s.name,
                address=s.address,
                acked_offset=s.acked_offset,
                lag_bytes=max(0, master_offset - s.acked_offset),
                in_sync=self.is_in_sync(s, master_offset),
                connected=s.connected,
            )
            for s in sorted(self._replicas.values(), key=lambda s: s.name)
        ]
