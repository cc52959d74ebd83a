"""A broker's place in its group: master (serving replicas) or replica (following one).

Starts the right side at broker start (a MASTER without --ha-listen serves no
replication: it only keeps its term in the epoch file), and turns a replica into the master on
promotion: it stops following, finishes building its queues from the copied
log, begins a new master term in the epoch file, takes writes and serves
replication itself. The term is in the epoch file before the first write is
taken.

A promotion by hand is recorded in the role file (:mod:`.role_file`) so that a
restart keeps it. Outside a Lease a master writes down where its replicas answer
(:mod:`.replica_book`), and a broker that starts as master asks them first: if one
was promoted past it, it does not start (:mod:`.successor_check`).

Under a Lease (role LEASE) the broker starts as a replica of nobody; the Lease's
holder calls :meth:`Replication.become_master` with the Lease's epoch, and a
master that lost the Lease follows (:meth:`Replication.follow`) the new holder,
cutting only what it never acknowledged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable

from ..client.credentials import Credentials
from ..tls.peers import mutual_tls, peer_client_tls
from .config import DEFAULT_HA_LISTEN, ReplicationConfig, ReplicationMode, Role, parse_host_port
from .epoch_file import EpochFile
from .in_sync import ReplicaStatus
from .master_service import ReplicationMaster
from .replica_book import ReplicaBook
from .replica_client import ReplicaClient
from .replicated_broker import ReplicatedBroker
from .role_file import read_promoted, write_promoted
from .successor_check import check_not_superseded

log = logging.getLogger(__name__)

# Promotion waits this long for the dispatcher to finish the copied log.
_PROMOTION_DISPATCH_WAIT_S = 30.0
# A forced promotion first checks that the master does not answer within this.
_MASTER_PROBE_TIMEOUT_S = 2.0

FENCED_REFUSAL = (
    "broker {name} is not the master of its group now (it lost or could not renew the "
    "group's Lease); query the route again to reach the current master"
)


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
    def __init__(
        self,
        config: ReplicationConfig,
        broker: ReplicatedBroker,
        name: Callable[[], str],
        endpoint: Callable[[], str] = lambda: "",
    ) -> None:
        """``name``: this broker as a replica; ``endpoint``: where its clients reach it."""
        if config.role is Role.AUTO:
            raise ValueError("resolve --role AUTO before starting replication")
        if config.enabled and not config.ha_listen:
            config.ha_listen = DEFAULT_HA_LISTEN
        self.config = config
        self._broker = broker
        self.role = config.role
        self.under_lease = config.role is Role.LEASE
        if self.under_lease:
            # Nobody's replica until the Lease names a master.
            self.role = Role.REPLICA
        data_dir = broker.config.store.data_dir
        self.epochs = EpochFile(os.path.join(data_dir, "epoch"))
        self.role_path = os.path.join(data_dir, "role")
        # Under a Lease the Lease lists the replicas; a book is kept only without one.
        self.replica_book = (
            None if self.under_lease else ReplicaBook(os.path.join(data_dir, "replicas"))
        )
        self.master: ReplicationMaster | None = None
        self.client: ReplicaClient | None = None
        self._name = name
        self._endpoint = endpoint
        self._changing = asyncio.Lock()

    @property
    def is_replica(self) -> bool:
        return self.role is Role.REPLICA

    def load(self) -> None:
        """Read the epoch, role and replicas files (before the store starts: damage stops
        the broker); a master asks its former replicas whether one was promoted past it
        (SupersededMaster if so)."""
        self.epochs.load()
        if self.replica_book is None:
            return
        self.replica_book.load()
        promoted = read_promoted(self.role_path)
        if promoted is not None and self.role is Role.REPLICA:
            log.warning(
                "this broker was promoted to master (epoch %s) and stays master: following "
                "%s again would cut the writes it acknowledged since. To make it a replica "
                "of the current master, stop it, delete %s and start it with --master-address "
                "set to the current master's --ha-listen",
                promoted.get("epoch"),
                self.config.master_address,
                self.role_path,
            )
            self.role = Role.MASTER
            self.config.master_address = ""
            if promoted.get("ha_listen"):
                self.config.ha_listen = str(promoted["ha_listen"])
        if self.role is Role.MASTER:
            check_not_superseded(
                self._broker.config.broker_name,
                self.epochs.epoch,
                self.replica_book.endpoints,
                credentials=_peer_credentials(self._broker),
                tls=peer_client_tls(self._broker.config.tls),
                role_file=self.role_path if promoted is not None else "",
            )

    async def start(self) -> None:
        if self.config.enabled and not mutual_tls(self._broker.config.tls):
            log.warning(
                "replication is not encrypted (it runs over mutual TLS only with --tls-ca and "
                "--tls-cert): log bytes and the users' secrets cross the network in clear, "
                "authenticated by the group's secret alone"
            )
        if self.role is Role.MASTER:
            await self._serve_as_master()
        elif self.under_lease:
            log.info("waiting for the group's Lease to name a master")
        else:
            self.client = ReplicaClient(
                self.config, self._broker, self.epochs, self._name(), endpoint=self._endpoint()
            )
            self.client.start()
            log.info("replica of %s", self.config.master_address)

    async def hand_over(self) -> None:
        """A master's last step before its Lease passes: the replicas take its state
        tables as they stand (see ReplicationMaster.send_final_metadata)."""
        if self.master is not None:
            await self.master.send_final_metadata(self.config.heartbeat_interval)

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.stop()
        if self.master is not None:
            await self.master.stop()
        self._broker.store.replication = None

    async def _serve_as_master(self, *, above_epoch: int = 0) -> None:
        store = self._broker.store
        master = None
        if self.config.enabled:
            master = ReplicationMaster(
                self.config, self._broker, self.epochs, replica_book=self.replica_book
            )
            # Listening first: a broker that cannot serve replication starts no term.
            await master.start()
        # A log from before any term (or a new one) belongs to this first term whole.
        start = store.commit_log.max_offset if self.epochs.entries else store.commit_log.min_offset
        try:
            term = self.epochs.new_term(start, above=above_epoch)
        except OSError:
            if master is not None:
                await master.stop()
            raise
        log.info(
            "master term %d from offset %d (%s)",
            term.epoch,
            term.start_offset,
            f"{self.config.mode} replication" if master is not None else "no replication",
        )
        self.master = master
        store.replication = master

    async def promote(self, *, force: bool, ha_listen: str = "") -> None:
        """Make this replica the master; PromotionRefused if it is one or is out of sync.

        ``ha_listen``: where the new master serves replication (default: --ha-listen).
        """
        if self.under_lease:
            raise PromotionRefused(
                "this broker's role is decided by its group's Lease (--role LEASE); a replica "
                "in the master's in-sync set takes over on its own when the master stops "
                "renewing the Lease"
            )
        if self.role is Role.MASTER:
            raise PromotionRefused("this broker is already the master")
        client = self.client
        assert client is not None
        if force and (client.connected or await _answers(self.config.master_address)):
            raise PromotionRefused(
                f"its master {self.config.master_address} still answers; a forced promotion "
                "now would give the group two masters that both take writes. Stop that "
                "master first, or promote without --force"
            )
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
        if ha_listen:
            try:
                parse_host_port(ha_listen, "--ha-listen")
            except ValueError as exc:
                raise PromotionRefused(str(exc)) from None
        previous_listen = self.config.ha_listen
        self.config.ha_listen = ha_listen or previous_listen
        try:
            # Never reuse the number of a term the old master began.
            await self._take_over(above_epoch=client.highest_epoch_seen)
        except PromotionRefused:
            self.config.ha_listen = previous_listen
            raise
        # Kept across restarts: the old master's command line must not win it back.
        write_promoted(self.role_path, ha_listen=self.config.ha_listen, epoch=self.epochs.epoch)
        log.info("promoted to master%s", " (forced)" if force else "")

    async def _take_over(self, *, above_epoch: int) -> None:
        client = self.client
        if client is not None:
            await client.stop()
        broker = self._broker
        store = broker.store
        dispatched = await asyncio.to_thread(store.wait_dispatched, _PROMOTION_DISPATCH_WAIT_S)
        if not dispatched:
            log.warning("promoting before the copied log is fully dispatched")
        # Queue offsets continue where the copied consume queues end.
        store.commit_log.queue_offsets = store.consume_queues.next_offsets()
        try:
            await self._serve_as_master(above_epoch=above_epoch)
        except OSError as exc:
            # Still a replica: follow the master again.
            if client is not None:
                client.start()
            raise PromotionRefused(str(exc)) from None
        self.client = None
        self.role = Role.MASTER
        self.config.master_address = ""
        broker.start_writers()

    # -- under a Lease --------------------------------------------------------

    async def become_master(self, epoch: int, may_acknowledge: Callable[[], bool]) -> None:
        """Take over as the Lease's new holder, in term ``epoch`` (written before any write)."""
        async with self._changing:
            if self.role is Role.MASTER:
                return
            await self._take_over(above_epoch=epoch - 1)
            assert self.master is not None
            self.master.may_acknowledge = may_acknowledge
            # Only replicas the Lease will list count toward SYNC writes (none yet).
            self.master.tracker.publish(frozenset())
            log.info("master of the group by its Lease, epoch %d", self.epochs.epoch)

    def set_fenced(self, fenced: bool) -> None:
        """A master that may have lost its Lease acknowledges nothing and refuses writes."""
        master = self.master
        if master is None:
            return
        master.tracker.fenced = fenced
        self._broker.store.read_only_reason = (
            FENCED_REFUSAL.format(name=self._broker.config.broker_name) if fenced else ""
        )

    async def follow(self, master_address: str) -> None:
        """Be a replica of ``master_address``; a master steps down first."""
        async with self._changing:
            if self.role is Role.MASTER:
                master = self.master
                assert master is not None
                self.master = None
                self._broker.store.replication = None
                await master.stop()
                await asyncio.to_thread(
                    self._broker.stop_writers,
                    FENCED_REFUSAL.format(name=self._broker.config.broker_name),
                )
                self.role = Role.REPLICA
                log.warning("stepped down: another broker holds the group's Lease")
            if self.client is not None and self.config.master_address == master_address:
                return
            if self.client is not None:
                await self.client.stop()
            self.config.master_address = master_address
            self.client = ReplicaClient(
                self.config, self._broker, self.epochs, self._name(), endpoint=self._endpoint()
            )
            self.client.start()
            log.info("replica of %s", master_address)

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


def _peer_credentials(broker: ReplicatedBroker) -> Credentials | None:
    """Calls to peers of the group sign as the bootstrap super user when auth is on."""
    user = broker.bootstrap_user
    if not broker.config.auth.enabled or user is None:
        return None
    return Credentials(user.access_key, user.secret_key)


async def _answers(address: str) -> bool:
    """Whether something accepts connections at ``address`` (HOST:PORT)."""
    if not address:
        return False
    try:
        host, port = parse_host_port(address, "--master-address")
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), _MASTER_PROBE_TIMEOUT_S
        )
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    return True
