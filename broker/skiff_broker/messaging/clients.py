"""Connected clients: their settings and their telemetry streams.

Official clients open one Telemetry stream per broker and send their Settings
on it; the broker answers with the settings it enforces (body size limit,
long-polling time, retry policy, FIFO) and later uses the stream to ask
producers about unresolved transactions.

A session belongs to the identity that opened it: it is keyed by the access key that
signed the call (its ``owner``) and the client-chosen ``x-mq-client-id``, so another
access key using the same client id gets a session of its own and can neither take over
this one's stream nor close or terminate it. With authentication off there are no
identities: every session has the owner "" and is keyed by its client id alone, as in
RocketMQ without ACLs.

A producer is asked about a topic's transactions only if its Settings named that topic
(``publishing.topics``): a producer that named none, or only sent a heartbeat, is asked
about nothing.

Memory per client is bounded. A stream's replies wait in a ``TelemetryOutbox``
of at most ``TELEMETRY_OUTBOX_LIMIT`` commands: when a client sends and does not
read, the broker stops reading its stream until there is room, so HTTP/2 flow
control holds the client's sends back (backpressure). The budget of one
never-reading stream is 16 MiB: its outbox plus the server's buffers for the stream
(one 64 KiB HTTP/2 window; tests/integration/test_bounded_memory.py holds the broker
to it). Broker-initiated commands that find the outbox full are
dropped (a transaction check is asked again later). At most ``MAX_SESSIONS``
sessions are remembered; past that the ones seen longest ago without an open
stream are forgotten.

A session is released when its client leaves, whichever way it goes: at once on
NotifyClientTermination (its streams are closed), and otherwise once it has had no
Telemetry stream open and no request for ``--client-expiry`` seconds (RocketMQ's
``channelExpiredTimeout``, 120 s), which covers a client whose stream ended, whose
connection closed, or that stopped without a word. ``expire`` does that sweep; the broker
runs it every ``EXPIRY_SWEEP_S`` at most. Releasing a session touches nothing but that
session: another session, even of the same access key, keeps everything, and a session
with any stream still open (a client may hold one per connection) is never expired.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..config import BrokerConfig
from ..delivery.delay import ROCKETMQ_LEVEL_DELAYS_S
from ..metadata.group_settings import EXPONENTIAL_DEFAULTS, GroupSettingsTable
from ..metadata.topic_table import MessageType, TopicTable
from .status import OK

log = logging.getLogger(__name__)


# Commands waiting to be written to one Telemetry stream.
TELEMETRY_OUTBOX_LIMIT = 16
# A consumer without an open telemetry stream counts as live this long after its last
# request (official clients send a heartbeat every 10 seconds).
LIVE_WITHOUT_STREAM_S = 30.0
# Client sessions remembered (settings, group, topics: well under 1 KiB each).
MAX_SESSIONS = 10_000
# How often, at most, sessions past their expiry are looked for.
EXPIRY_SWEEP_S = 10.0


class TelemetryOutbox:
    """Commands waiting for one Telemetry stream, at most ``limit`` of them.

    Used on the event loop's thread only. ``get`` answers None once closed and
    emptied.
    """

    def __init__(self, limit: int = TELEMETRY_OUTBOX_LIMIT) -> None:
        self._limit = limit
        self._items: collections.deque[spb.TelemetryCommand] = collections.deque()
        self._closed = False
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, command: spb.TelemetryCommand) -> bool:
        """Add a reply, waiting while the outbox is full; False if it closed meanwhile."""
        while len(self._items) >= self._limit and not self._closed:
            self._changed.clear()
            await self._changed.wait()
        if self._closed:
            return False
        self._items.append(command)
        self._changed.set()
        return True

    def put_nowait(self, command: spb.TelemetryCommand) -> bool:
        """Add a command unless the outbox is full or closed; False if it was not added."""
        if self._closed or len(self._items) >= self._limit:
            log.warning(
                "a client's telemetry stream is not being read; dropped a %s command",
                command.WhichOneof("command"),
            )
            return False
        self._items.append(command)
        self._changed.set()
        return True

    async def get(self) -> spb.TelemetryCommand | None:
        while not self._items:
            if self._closed:
                return None
            self._changed.clear()
            await self._changed.wait()
        command = self._items.popleft()
        self._changed.set()
        return command

    def close(self) -> None:
        self._closed = True
        self._changed.set()


@dataclasses.dataclass(slots=True)
class ClientSession:
    client_id: str
    # The access key that opened the session; "" with authentication off.
    owner: str = ""
    client_type: int = pb.ClientType.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    # A consumer's subscribed topics, or a producer's published ones.
    topics: set[str] = dataclasses.field(default_factory=set)
    # The topics its Settings say it publishes to: the ones it is asked about.
    published: set[str] = dataclasses.field(default_factory=set)
    settings: pb.Settings | None = None
    # Where broker-initiated commands go: the newest of its open Telemetry streams.
    outbound: TelemetryOutbox | None = None
    # Every Telemetry stream of the session still open, oldest first.
    streams: list[TelemetryOutbox] = dataclasses.field(default_factory=list)
    # Where its telemetry stream comes from (a gRPC peer): ACLs may name source addresses.
    peer: str = ""
    last_seen: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def key(self) -> tuple[str, str]:
        return (self.owner, self.client_id)


class ClientRegistry:
    """``group_settings``: consumer groups' own retries (``updateSubGroup``), told to
    their clients as RocketMQ's proxy tells them; without it every group has the broker's."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicTable,
        group_settings: GroupSettingsTable | None = None,
    ) -> None:
        self._config = config
        self._topics = topics
        self._group_settings = group_settings
        self._sessions: dict[tuple[str, str], ClientSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def counts_by_type(self) -> dict[str, int]:
        """Sessions remembered, by client type (``producer``, ``simple_consumer``, ...).

        Safe from another thread (a metrics collection): it reads one copy of the table.
        """
        counts: dict[str, int] = {}
        for session in list(self._sessions.values()):
            kind = pb.ClientType.Name(session.client_type).lower().removeprefix("client_type_")
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def session(self, client_id: str, *, owner: str) -> ClientSession:
        """``owner``'s session of ``client_id`` (created if new)."""
        key = (owner, client_id)
        session = self._sessions.get(key)
        if session is None:
            if len(self._sessions) >= MAX_SESSIONS:
                self._forget_idle()
            session = self._sessions[key] = ClientSession(client_id, owner)
        session.last_seen = time.monotonic()
        return session

    def _forget_idle(self) -> None:
        """Forget the tenth of sessions seen longest ago that have no open stream."""
        idle = sorted(
            (s for s in self._sessions.values() if not s.streams),
            key=lambda s: s.last_seen,
        )
        for session in idle[: max(1, MAX_SESSIONS // 10)]:
            del self._sessions[session.key]

    def heartbeat(self, client_id: str, client_type: int, group: str, *, owner: str) -> None:
        session = self.session(client_id, owner=owner)
        if client_type:
            session.client_type = client_type
        if group:
            session.group = group

    def terminate(self, client_id: str, *, owner: str) -> None:
        """End ``owner``'s session of ``client_id``; another owner's stays as it is."""
        session = self._sessions.pop((owner, client_id), None)
        if session is not None:
            for stream in session.streams:
                stream.close()

    def stream_opened(self, session: ClientSession, outbox: TelemetryOutbox, peer: str) -> None:
        """A Telemetry stream of ``session`` opened: commands for it go there now."""
        session.streams.append(outbox)
        session.outbound = outbox
        session.peer = peer
        session.last_seen = time.monotonic()

    def stream_closed(self, session: ClientSession, outbox: TelemetryOutbox) -> None:
        """One of ``session``'s streams ended; its expiry counts from now once none is open."""
        if outbox in session.streams:
            session.streams.remove(outbox)
        session.outbound = session.streams[-1] if session.streams else None
        session.last_seen = time.monotonic()

    def expire(self, now: float | None = None) -> int:
        """Forget the sessions without an open stream that have made no request for
        ``--client-expiry`` seconds; how many were forgotten."""
        now = time.monotonic() if now is None else now
        cutoff = now - self._config.client_expiry_s
        gone = [
            key
            for key, session in self._sessions.items()
            if not session.streams and session.last_seen <= cutoff
        ]
        for key in gone:
            del self._sessions[key]
        if gone:
            log.debug("forgot %d client sessions that left", len(gone))
        return len(gone)

    async def expire_periodically(self) -> None:
        """Run ``expire`` for as long as the broker serves (a task cancelled at stop)."""
        interval = min(EXPIRY_SWEEP_S, self._config.client_expiry_s)
        while True:
            await asyncio.sleep(interval)
            self.expire()

    def live_consumers(self) -> list[ClientSession]:
        """Consumers with an open telemetry stream or a request in the last 30 seconds.

        Safe from another thread (the admin handlers run in one): it reads one copy of
        the table, and a session's topics are replaced whole, never changed in place.
        """
        now = time.monotonic()
        return [
            s
            for s in list(self._sessions.values())
            if s.group
            and s.client_type != pb.ClientType.PRODUCER
            and (s.outbound is not None or now - s.last_seen < LIVE_WITHOUT_STREAM_S)
        ]

    def producers_of(self, topic: str) -> list[ClientSession]:
        """Producers with an open telemetry stream whose Settings name ``topic``.

        Whether each may still be told about the topic is the caller's to check.
        """
        return [
            s
            for s in self._sessions.values()
            if s.client_type == pb.ClientType.PRODUCER
            and s.outbound is not None
            and topic in s.published
        ]

    def apply_settings(self, session: ClientSession, settings: pb.Settings) -> pb.Settings:
        """Record a client's settings; returns the settings the broker enforces."""
        session.last_seen = time.monotonic()
        session.client_type = settings.client_type
        session.published = set()
        reply = pb.Settings()
        reply.CopyFrom(settings)
        reply.metric.Clear()
        reply.metric.on = False
        if settings.HasField("publishing"):
            session.topics = {t.name for t in settings.publishing.topics}
            session.published = set(session.topics)
            reply.publishing.max_body_size = self._config.store.max_message_size
            reply.publishing.validate_message_type = True
            reply.backoff_policy.Clear()
            reply.backoff_policy.max_attempts = 3
            backoff = reply.backoff_policy.exponential_backoff
            backoff.initial.CopyFrom(Duration(nanos=10_000_000))
            backoff.max.CopyFrom(Duration(seconds=1))
            backoff.multiplier = 2.0
        if settings.HasField("subscription"):
            subscription = reply.subscription
            session.group = settings.subscription.group.name
            session.topics = {s.topic.name for s in settings.subscription.subscriptions}
            subscription.fifo = any(
                (topic := self._topics.get(name)) is not None
                and topic.message_type is MessageType.FIFO
                for name in session.topics
            )
            subscription.receive_batch_size = 32
            subscription.long_polling_timeout.CopyFrom(
                Duration(seconds=self._config.max_long_polling_ms // 1000)
            )
            self._consumer_backoff(session.group, reply.backoff_policy)
        session.settings = reply
        return reply

    def _consumer_backoff(self, group: str, policy: pb.RetryPolicy) -> None:
        """The group's retries: its retryMaxTimes + 1 attempts and its groupRetryPolicy
        (RocketMQ's proxy's mapping), else the broker's attempts and delay levels."""
        policy.Clear()
        table = self._group_settings
        settings = table.get(group) if table is not None else None
        if settings is None:
            policy.max_attempts = self._config.max_delivery_attempts
            policy.customized_backoff.next.extend(
                Duration(seconds=s) for s in ROCKETMQ_LEVEL_DELAYS_S
            )
            return
        policy.max_attempts = int(settings["retryMaxTimes"]) + 1
        retry = settings.get("groupRetryPolicy") or {}
        if retry.get("type") == "EXPONENTIAL":
            exponential = {**EXPONENTIAL_DEFAULTS, **(retry.get("exponentialRetryPolicy") or {})}
            backoff = policy.exponential_backoff
            backoff.initial.FromMilliseconds(int(exponential["initial"]))
            backoff.max.FromMilliseconds(int(exponential["max"]))
            backoff.multiplier = float(exponential["multiplier"])
            return
        levels = (retry.get("customizedRetryPolicy") or {}).get("levels")
        if not levels:
            policy.customized_backoff.next.extend(
                Duration(seconds=s) for s in ROCKETMQ_LEVEL_DELAYS_S
            )
            return
        for ms in levels:
            delay = policy.customized_backoff.next.add()
            delay.FromMilliseconds(int(ms))

    def settings_command(
        self, session: ClientSession, settings: pb.Settings
    ) -> spb.TelemetryCommand:
        return spb.TelemetryCommand(status=OK, settings=self.apply_settings(session, settings))
