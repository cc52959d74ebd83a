"""The group's master is the holder of its Lease; this broker competes for it and obeys it.

Every ``RETRY_PERIOD_S`` the broker reads its group's Lease (and, while another
pod holds it, also right when it would expire; every 0.25 s while it has no
live holder):

- No Lease: create it, holding it (the first broker of a new group).
- Held by this pod: renew it, publishing the term, endpoints and in-sync set.
  A pod that holds it but is not master (it restarted) takes a new term.
- Held by another pod that renewed it within the Lease duration (as seen on this
  broker's own clock, so clocks need not agree; a renewal counts from the
  previous look, bounded so that the Lease never expires here before its holder
  has fenced itself): follow that pod's replication address; a master steps
  down first.
- Expired or released: take it, if this pod is in its ``skiff.io/in-sync`` list
  (a broker whose log may lack acknowledged writes never becomes master). The
  update carries the Lease's resourceVersion: of two takers one fails. A master
  that gave the Lease up when it stopped leaves it, for one Lease duration after
  it comes back, to the in-sync replicas that kept running: a deleted pod hands
  its group over instead of racing its own replacement.

The holder fences itself by its own clock: from ``renew deadline`` (2/3 of the
Lease duration) after the start of its last successful renewal it acknowledges
nothing and refuses new writes, which is before any other broker can see the
Lease expire. The check is made again just before each acknowledgement, so a
broker frozen (SIGSTOP) and resumed acknowledges nothing it took while stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable

from ..ha.config import Role
from ..ha.replication import PromotionRefused, Replication
from .config import RETRY_PERIOD_S, ClusterConfig
from .kube_client import Conflict, KubeClient, KubeError, NotFound
from .lease_record import CLUSTER_LABEL, ROLE_LABEL, LeaseRecord, now_micro

log = logging.getLogger(__name__)

# API-server failures in a row between two log lines about them.
_QUIET_FAILURES = 15
# How often a holder looks for a change of its in-sync set between renewals.
_PUBLISH_CHECK_S = 0.2
# How soon a broker looks again at a Lease that has just expired or has no holder.
_FAST_LOOK_S = 0.25
# Reads and writes of the Lease a stopping holder tries before leaving it to expire.
_RELEASE_ATTEMPTS = 3


def pod_of(replica_name: str) -> str:
    """Replica names under a Lease are ``<pod>@<client endpoint>``."""
    return replica_name.partition("@")[0]


def endpoint_of(replica_name: str) -> str:
    return replica_name.partition("@")[2]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupState:
    """One group as the Leases show it, for routes."""

    name: str
    # The master's client endpoint while it holds the Lease; empty without a live master.
    master_endpoint: str
    # Client endpoints of replicas that can serve reads.
    replica_endpoints: list[str]
    epoch: int
    # The master's remoting endpoint while it holds the Lease and has one; else empty.
    master_remoting: str = ""


class LeaseElector:
    def __init__(
        self,
        api: KubeClient,
        config: ClusterConfig,
        group: str,
        replication: Replication,
        client_endpoint: Callable[[], str],
        remoting_endpoint: Callable[[], str] = lambda: "",
    ) -> None:
        """``remoting_endpoint``: where 4.x clients reach this broker (empty: nowhere),
        published beside the client endpoint while it holds the Lease."""
        self.api = api
        self.config = config
        self.group = group
        self.replication = replication
        self._client_endpoint = client_endpoint
        self._remoting_endpoint = remoting_endpoint
        self.me = config.pod_name
        # Per Lease: when this broker last saw its holder write it.
        self._seen: dict[str, tuple[tuple[str, str], float]] = {}
        self._renewed_at: float | None = None
        self._holding = False
        self._fenced = False
        self._labelled = ""
        self._label_failed = False
        self._left_out: tuple[str, str] | None = None
        # Seconds until the next look at the Leases, and when the last one began.
        self._period = RETRY_PERIOD_S
        self._previous_look: float | None = None
        self._failures = 0
        self._task: asyncio.Task | None = None
        self.groups: dict[str, GroupState] = {}

    # -- acknowledging --------------------------------------------------------

    def may_acknowledge(self) -> bool:
        """True while this broker's last renewal is younger than the renew deadline."""
        return (
            self._holding
            and self._renewed_at is not None
            and time.monotonic() - self._renewed_at < self.config.renew_deadline_s
        )

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="lease-elector")

    async def stop(self) -> None:
        """Stop competing; a holder releases the Lease so an in-sync replica takes it at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._holding:
            self._fence("this broker is stopping")
            with contextlib.suppress(KubeError):
                await asyncio.to_thread(self._release)

    def _release(self) -> None:
        # A renewal cancelled by stop() may still land after the read: read again.
        for _ in range(_RELEASE_ATTEMPTS):
            record = LeaseRecord.from_object(self.api.get_lease(self.config.namespace, self.group))
            if record.holder != self.me:
                return
            record.holder = ""
            record.released_by = self.me
            record.duration_s = self.config.lease_duration_s
            try:
                self.api.replace_lease(self.config.namespace, record.to_object())
            except Conflict:
                continue
            log.info(
                "released the Lease of group %s; in sync: %s",
                self.group,
                ", ".join(record.in_sync or []),
            )
            return
        log.warning(
            "could not release the Lease of group %s (it kept changing); it passes once "
            "it expires, within %d s",
            self.group,
            self.config.lease_duration_s,
        )

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self._tick()
                self._failures = 0
            except KubeError as exc:
                self._failures += 1
                if self._failures % _QUIET_FAILURES == 1:
                    log.warning("cannot read or renew the Lease of group %s: %s", self.group, exc)
            except PromotionRefused as exc:
                log.error("could not take over as master: %s", exc)
            except Exception:
                log.exception("the Lease loop of group %s failed; retrying", self.group)
            self._check_fence()
            try:
                await self._label_role()
            except KubeError as exc:
                if not self._label_failed:
                    self._label_failed = True
                    log.warning("cannot label pod %s with its role: %s", self.me, exc)
            # A replica that caught up is published at once: SYNC writes wait for it.
            while time.monotonic() - started < self._period and not self._set_changed():
                await asyncio.sleep(min(_PUBLISH_CHECK_S, self._period))
                self._check_fence()

    # -- one look at the Leases -----------------------------------------------

    async def _tick(self) -> None:
        look = time.monotonic()
        leases = await asyncio.to_thread(
            self.api.list_leases, self.config.namespace, f"{CLUSTER_LABEL}={self.config.name}"
        )
        records = {r.name: r for r in map(LeaseRecord.from_object, leases)}
        now = time.monotonic()
        previous, self._previous_look = self._previous_look, look
        for name, found in records.items():
            known = self._seen.get(name)
            if known is None or known[0] != found.identity():
                self._seen[name] = (found.identity(), self._renewed_by(found, previous, now))
        self.groups = {name: self._group_state(r, now) for name, r in records.items()}
        record = records.get(self.group)
        self._period = RETRY_PERIOD_S
        if record is not None and record.holder and record.holder != self.me:
            seen = self._seen[record.name][1]
            # Look again right when it would expire, not up to a period later.
            until_expiry = seen + record.duration_s - now
            self._period = (
                _FAST_LOOK_S
                if until_expiry <= 0
                else min(RETRY_PERIOD_S, until_expiry + _FAST_LOOK_S)
            )
        elif record is not None and not record.holder:
            self._period = _FAST_LOOK_S
        if record is None:
            await self._create()
            return
        if record.holder == self.me:
            if self.replication.role is Role.MASTER and self._holding:
                await self._renew(record)
            else:
                # This pod held it before a restart: a new term, no wait.
                await self._acquire(record)
            return
        if record.holder and self._alive(record, now):
            if self._holding:
                self._holding = False
                self._fence(f"pod {record.holder} holds the Lease now")
            if record.ha_address and (
                self.replication.role is Role.MASTER
                or self.replication.config.master_address != record.ha_address
                or self.replication.client is None
            ):
                await self.replication.follow(record.ha_address)
            return
        # Expired or released: look often until someone holds it again.
        self._period = _FAST_LOOK_S
        if self._holding:
            self._holding = False
            self._fence("its Lease expired")
        if not record.may_take(self.me):
            self._period = RETRY_PERIOD_S
        if record.may_take(self.me):
            if not self._leaves_it_to_replicas(record, now):
                await self._acquire(record)
        elif self.replication.role is not Role.MASTER and self._left_out != record.identity():
            # Once per Lease state: its log may lack writes the last master acknowledged.
            self._left_out = record.identity()
            log.warning(
                "group %s has no master, and this pod is not in its in-sync set %s, so it "
                "does not take the Lease; start one of those pods to give the group a master",
                self.group,
                record.in_sync,
            )

    @staticmethod
    def _renewed_by(record: LeaseRecord, previous: float | None, now: float) -> float:
        """When, on this clock, to count a renewal first seen now as made.

        Not before the previous look (it was not there yet), and never more than a
        third of the Lease minus a second before now: the holder fences itself 2/3
        of the Lease after it sent the renewal, so the Lease expires here at least a
        second after that, however late this broker looked.
        """
        if previous is None:
            return now
        return max(previous, now - max(0.0, record.duration_s / 3 - 1.0))

    def _leaves_it_to_replicas(self, record: LeaseRecord, now: float) -> bool:
        """This pod gave the Lease up and an in-sync replica may still take it."""
        others = [pod for pod in record.in_sync or [] if pod != self.me]
        if record.holder or record.released_by != self.me or not others:
            return False
        return now - self._seen[record.name][1] < record.duration_s

    def _alive(self, record: LeaseRecord, now: float) -> bool:
        seen = self._seen.get(record.name)
        return seen is not None and now - seen[1] < record.duration_s

    def _group_state(self, record: LeaseRecord, now: float) -> GroupState:
        live = bool(record.holder) and self._alive(record, now)
        return GroupState(
            name=record.name,
            master_endpoint=record.endpoint if live else "",
            master_remoting=record.remoting_endpoint if live else "",
            replica_endpoints=[
                e for pod, e in sorted(record.replicas.items()) if e and pod != record.holder
            ],
            epoch=record.epoch,
        )

    # -- taking and keeping the Lease ---------------------------------------

    def _next_epoch(self, record: LeaseRecord) -> int:
        client = self.replication.client
        seen = client.highest_epoch_seen if client is not None else 0
        return max(record.epoch, self.replication.epochs.highest_used, seen) + 1

    async def _create(self) -> None:
        record = LeaseRecord(
            name=self.group,
            cluster=self.config.name,
            holder=self.me,
            duration_s=self.config.lease_duration_s,
            epoch=self.replication.epochs.highest_used + 1,
            endpoint=self._client_endpoint(),
            remoting_endpoint=self._remoting_endpoint(),
            ha_address=self.config.ha_advertise,
            in_sync=[self.me],
            acquire_time=now_micro(),
            renew_time=now_micro(),
        )
        sent = time.monotonic()
        try:
            await asyncio.to_thread(
                self.api.create_lease, self.config.namespace, record.to_object()
            )
        except Conflict:
            return  # another broker of the group created it first
        log.info("created the Lease of group %s", self.group)
        await self._took(record.epoch, sent)

    async def _acquire(self, record: LeaseRecord) -> None:
        epoch = self._next_epoch(record)
        taken = dataclasses.replace(
            record,
            holder=self.me,
            duration_s=self.config.lease_duration_s,
            epoch=epoch,
            endpoint=self._client_endpoint(),
            remoting_endpoint=self._remoting_endpoint(),
            ha_address=self.config.ha_advertise,
            in_sync=[self.me],
            replicas={},
            released_by="",
            transitions=record.transitions + (record.holder != self.me),
            acquire_time=now_micro(),
            renew_time=now_micro(),
        )
        sent = time.monotonic()
        try:
            await asyncio.to_thread(
                self.api.replace_lease, self.config.namespace, taken.to_object()
            )
        except (Conflict, NotFound):
            return  # another broker wrote it since it was read
        log.info(
            "took the Lease of group %s from %r%s, epoch %d; in sync were: %s",
            self.group,
            record.holder,
            f" (released by {record.released_by})" if record.released_by else "",
            epoch,
            ", ".join(record.in_sync or []) or "(not yet published)",
        )
        await self._took(epoch, sent)

    async def _took(self, epoch: int, sent: float) -> None:
        self._renewed_at = sent
        self._holding = True
        self._fenced = False
        # The term is in the epoch file before the first write is taken.
        await self.replication.become_master(epoch, self.may_acknowledge)
        # Publish the replication address the master actually serves on.
        with contextlib.suppress(KubeError):
            record = LeaseRecord.from_object(
                await asyncio.to_thread(self.api.get_lease, self.config.namespace, self.group)
            )
            if record.holder == self.me:
                await self._renew(record)

    async def _renew(self, record: LeaseRecord) -> None:
        master = self.replication.master
        assert master is not None
        tracker = master.tracker
        term = self.replication.epochs.last
        candidates = frozenset(tracker.publishable(term.start_offset if term else 0))
        # Until the Lease says otherwise, writes need the old set and the new one.
        tracker.publish((tracker.published or frozenset()) | candidates)
        renewed = dataclasses.replace(
            record,
            duration_s=self.config.lease_duration_s,
            epoch=self.replication.epochs.epoch,
            endpoint=self._client_endpoint(),
            remoting_endpoint=self._remoting_endpoint(),
            ha_address=self.config.ha_advertise or master.address,
            in_sync=[self.me, *sorted(pod_of(n) for n in candidates)],
            replicas={
                pod_of(s.name): endpoint_of(s.name) for s in tracker.statuses() if s.connected
            },
            renew_time=now_micro(),
        )
        sent = time.monotonic()
        try:
            await asyncio.to_thread(
                self.api.replace_lease, self.config.namespace, renewed.to_object()
            )
        except Conflict:
            return
        self._renewed_at = sent
        tracker.publish(candidates)
        if self._fenced:
            self._unfence()

    def _set_changed(self) -> bool:
        master = self.replication.master
        if not self._holding or self._fenced or master is None:
            return False
        term = self.replication.epochs.last
        candidates = frozenset(master.tracker.publishable(term.start_offset if term else 0))
        return candidates != master.tracker.published

    # -- fencing ----------------------------------------------------------------

    def _check_fence(self) -> None:
        if self._holding and not self._fenced and not self.may_acknowledge():
            self._fence(f"it could not renew its Lease within {self.config.renew_deadline_s:g} s")

    def _fence(self, why: str) -> None:
        if self.replication.master is None or self._fenced:
            return
        self._fenced = True
        self.replication.set_fenced(True)
        log.warning("no longer acknowledging writes: %s", why)

    def _unfence(self) -> None:
        if self.replication.master is None:
            return
        self._fenced = False
        self.replication.set_fenced(False)
        log.info("renewed the Lease again; acknowledging writes")

    async def _label_role(self) -> None:
        role = "master" if self.replication.role is Role.MASTER and self._holding else "replica"
        if role != self._labelled:
            await asyncio.to_thread(
                self.api.label_pod, self.config.namespace, self.me, {ROLE_LABEL: role}
            )
            self._labelled = role
            log.info("labelled pod %s %s=%s", self.me, ROLE_LABEL, role)
