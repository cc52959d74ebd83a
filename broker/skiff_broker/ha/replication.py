"""A broker's place in its group: master (serving replicas) or replica (following one).

Starts the right side at broker start, and turns a replica into the master on
promotion: it stops following, finishes building its queues from the copied
log, begins a new master term in the epoch file, takes writes and serves
replication itself.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable

from ..runtime import Broker
from .config import ReplicationConfig, ReplicationMode, Role
from .epoch_file import EpochFile
from .in_sync import ReplicaStatus
from .master_service import ReplicationMaster
from .replica_client import ReplicaClient

log = logging.getLogger(__name__)

# Promotion waits this long for the dispatcher to finish the copied log.
_PROMOTION_DISPATCH_WAIT_S = 30.0


class PromotionRefused(Exception):
    """The broker cannot be promoted now; the message says why and what to do."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicationInfo:
    role: Role
    mode: ReplicationMode
    epoch: int
    epoch_start_offset: int
    ha_address: str  # where this master serves replication; empty on a replica
    master_address: str  # the master a replica follows; empty on a master
    replicas: list[ReplicaStatus]  # a master's replicas
    # A replica's own state as of its master's last word.
    connected: bool
    in_sync: bool
    lag_bytes: int  # -1 before the master was ever heard from


class Replication:
    def __init__(self, config: ReplicationConfig, broker: Broker, name: Callable[[], str]) -> None:
        if config.role is Role.AUTO:
            raise ValueError("resolve --role AUTO before starting replication")
        self.config = config
        self._broker = broker
        self.role = config.role
        self.epochs = EpochFile(os.path.join(broker.config.store.data_dir, "epoch"))
        self.master: ReplicationMaster | None = None
        self.client: ReplicaClient | None = None
        self._name = name

    @property
    def is_replica(self) -> bool:
        return self.role is Role.REPLICA

    def load(self) -> None:
        """Read the epoch file (before the store starts: a damaged one stops the broker)."""
        self.epochs.load()

    async def start(self) -> None:
        if self.role is Role.MASTER:
            await self._serve_as_master()
        else:
            self.client = ReplicaClient(self.config, self._broker, self.epochs, self._name())
            self.client.start()
            log.info("replica of %s", self.config.master_address)

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.stop()
        if self.master is not None:
            await self.master.stop()
        self._broker.store.replication = None

    async def _serve_as_master(self, *, above_epoch: int = 0) -> None:
        store = self._broker.store
        master = ReplicationMaster(self.config, self._broker, self.epochs)
        # Listening first: a broker that cannot serve replication starts no term.
        await master.start()
        # A log from before any term (or a new one) belongs to this first term whole.
        start = store.commit_log.max_offset if self.epochs.entries else store.commit_log.min_offset
        try:
            term = self.epochs.new_term(start, above=above_epoch)
        except OSError:
            await master.stop()
            raise
        log.info(
            "master term %d from offset %d (%s replication)",
            term.epoch,
            term.start_offset,
            self.config.mode,
        )
        self.master = master
        store.replication = master

    async def promote(self, *, force: bool) -> None:
        """Make this replica the master; PromotionRefused if it is one or is out of sync."""
        if self.role is Role.MASTER:
            raise PromotionRefused("this broker is already the master")
        client = self.client
        assert client is not None
        if not force and not client.in_sync():
            if client.lag_bytes < 0:
                why = f"it has never heard from its master {self.config.master_address}"
            else:
                why = (
                    f"it was {client.lag_bytes} bytes behind its master at last contact "
                    f"(in sync: at most {self.config.max_gap})"
                )
            raise PromotionRefused(
                f"this replica is not in sync: {why}; promote an in-sync replica, "
                "or pass force to accept losing what it lacks"
            )
        await client.stop()
        broker = self._broker
        store = broker.store
        if not store.wait_dispatched(_PROMOTION_DISPATCH_WAIT_S):
            log.warning("promoting before the copied log is fully dispatched")
        # Queue offsets continue where the copied consume queues end.
        store.commit_log.queue_offsets = store.consume_queues.next_offsets()
        try:
            # Never reuse the number of a term the old master began.
            await self._serve_as_master(above_epoch=client.highest_epoch_seen)
        except OSError as exc:
            # Still a replica: follow the master again.
            client.start()
            raise PromotionRefused(str(exc)) from None
        self.client = None
        self.role = Role.MASTER
        broker.start_writers()
        log.info("promoted to master%s", " (forced)" if force else "")

    def info(self) -> ReplicationInfo:
        last = self.epochs.last
        client = self.client
        return ReplicationInfo(
            role=self.role,
            mode=self.config.mode,
            epoch=last.epoch if last else 0,
            epoch_start_offset=last.start_offset if last else 0,
            ha_address=self.master.address if self.master is not None else "",
            master_address=self.config.master_address if self.is_replica else "",
            replicas=self.master.tracker.statuses() if self.master is not None else [],
            connected=client.connected if client is not None else False,
            in_sync=client.in_sync() if client is not None else False,
            lag_bytes=client.lag_bytes if client is not None else 0,
        )
