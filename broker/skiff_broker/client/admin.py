"""A synchronous client of a broker's admin API (skiff.admin.v1).

Used by the ``skiff`` command and by the Kubernetes operator. Every method
raises a :mod:`skiff_broker.client.errors` exception on failure: ``NotFound``,
``AlreadyExists``, ``InvalidArgument`` and ``FailedPrecondition`` (an unsafe
change, with the reason) come from the broker; ``BrokerUnavailable`` means it
could not be reached.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from ..admin.v1 import admin_pb2 as apb
from ..admin.v1 import admin_pb2_grpc
from .channels import ClientTls
from .credentials import Credentials
from .errors import NotFound
from .transport import BrokerClient

DEFAULT_TIMEOUT_S = 10.0


class Permission(enum.StrEnum):
    READ_WRITE = "rw"
    READ = "r"
    WRITE = "w"


class MessageType(enum.StrEnum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"


class ResetTo(enum.StrEnum):
    """Where :meth:`AdminClient.reset_consumer_group` moves a group."""

    EARLIEST = "earliest"  # the oldest message still stored
    LATEST = "latest"  # the end: only messages sent from now on
    OFFSET = "offset"  # a queue offset
    TIMESTAMP = "timestamp"  # the first message stored at or after a time


_RESET_TO_PROTO = {
    ResetTo.EARLIEST: apb.EARLIEST,
    ResetTo.LATEST: apb.LATEST,
    ResetTo.OFFSET: apb.OFFSET,
    ResetTo.TIMESTAMP: apb.TIMESTAMP,
}

_PERMISSION_TO_PROTO = {
    Permission.READ_WRITE: apb.READ_WRITE,
    Permission.READ: apb.READ,
    Permission.WRITE: apb.WRITE,
}
_PERMISSION_FROM_PROTO = {v: k for k, v in _PERMISSION_TO_PROTO.items()}


@dataclasses.dataclass(frozen=True, slots=True)
class Topic:
    name: str
    read_queues: int
    write_queues: int
    perm: Permission | None  # None: the topic is neither readable nor writable
    message_type: MessageType

    @classmethod
    def from_proto(cls, proto: apb.Topic) -> Topic:
        return cls(
            name=proto.name,
            read_queues=proto.read_queue_nums,
            write_queues=proto.write_queue_nums,
            perm=_PERMISSION_FROM_PROTO.get(proto.permission),
            message_type=MessageType(apb.MessageType.Name(proto.message_type)),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_name: str
    role: str
    version: str
    endpoint: str
    flush_type: str
    transient_store_pool: bool
    commit_log_min_offset: int
    commit_log_max_offset: int
    committed_offset: int
    flushed_offset: int
    dispatched_offset: int
    disk_use_ratio: float
    writable: bool
    refusal: str  # why writes are refused; empty while writable
    replication_mode: str = ""
    epoch: int = 0
    epoch_start_offset: int = 0
    ha_address: str = ""  # a master's replication address
    replicas: tuple[ReplicaInfo, ...] = ()  # a master's replicas
    master_address: str = ""  # the master a replica follows
    replica_connected: bool = False
    replica_in_sync: bool = False
    replica_lag_bytes: int = 0  # -1: the replica never heard from its master
    remoting_endpoint: str = ""  # empty: the broker serves no remoting port


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One replica as its master sees it."""

    name: str
    address: str
    acked_offset: int
    lag_bytes: int
    in_sync: bool
    connected: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Promotion:
    role: str
    epoch: int
    epoch_start_offset: int
    ha_address: str


@dataclasses.dataclass(frozen=True, slots=True)
class QueueOffsets:
    queue_id: int
    min_offset: int
    max_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class QueueLag:
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerLag:
    group: str
    topic: str
    queues: tuple[QueueLag, ...]
    total_lag: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerGroup:
    """A group in a list: its topics, its live consumers and its lag over those topics."""

    group: str
    topics: tuple[str, ...]
    live_consumers: int
    total_lag: int


@dataclasses.dataclass(frozen=True, slots=True)
class GroupQueue:
    queue_id: int
    min_offset: int
    max_offset: int
    consumer_offset: int  # everything below is acknowledged; -1: never committed
    next_offset: int  # the next offset not yet handed out
    lag: int
    in_flight: int  # delivered, not acknowledged
    invisible: int  # in flight and not yet due for redelivery
    last_commit_time: int  # ms since the epoch; 0: not known


@dataclasses.dataclass(frozen=True, slots=True)
class GroupTopic:
    topic: str
    queues: tuple[GroupQueue, ...]
    total_lag: int


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConsumer:
    client_id: str
    client_type: str
    topics: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    topics: tuple[GroupTopic, ...]
    consumers: tuple[GroupConsumer, ...]  # live now


@dataclasses.dataclass(frozen=True, slots=True)
class QueueReset:
    queue_id: int
    old_offset: int  # -1: the group had none
    new_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class DeletedGroup:
    topics: tuple[str, ...]  # the topics it had offsets on
    kept_dlq_topic: str  # its dead-letter topic, kept; "" if it has none


@dataclasses.dataclass(frozen=True, slots=True)
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    message_id: str
    tag: str
    keys: tuple[str, ...]
    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int

    @classmethod
    def from_proto(cls, proto: apb.StoredMessage) -> StoredMessage:
        return cls(
            topic=proto.topic,
            queue_id=proto.queue_id,
            queue_offset=proto.queue_offset,
            physical_offset=proto.physical_offset,
            message_id=proto.message_id,
            tag=proto.tag,
            keys=tuple(proto.keys),
            body=proto.body,
            properties=dict(proto.properties),
            born_timestamp=proto.born_timestamp,
            store_timestamp=proto.store_timestamp,
            born_host=proto.born_host,
            store_host=proto.store_host,
            reconsume_times=proto.reconsume_times,
        )


class AdminClient(BrokerClient):
    """``with AdminClient("127.0.0.1:8081") as admin: admin.create_topic("orders", ...)``."""

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``credentials`` sign every request (needed where the broker enables auth)."""
        super().__init__(
            endpoint, client_kind="skiff-admin", timeout=timeout, tls=tls, credentials=credentials
        )
        self._stub = admin_pb2_grpc.AdminServiceStub(self._transport.channel)

    # -- topics -------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        *,
        read_queues: int = 8,
        write_queues: int | None = None,
        perm: Permission = Permission.READ_WRITE,
        message_type: MessageType = MessageType.NORMAL,
    ) -> Topic:
        """Create a topic; ``write_queues`` defaults to ``read_queues``."""
        spec = _topic_proto(
            name,
            read_queues,
            read_queues if write_queues is None else write_queues,
            perm,
            message_type,
        )
        return Topic.from_proto(
            self._transport.call(self._stub.CreateTopic, apb.CreateTopicRequest(topic=spec))
        )

    def update_topic(
        self,
        name: str,
        *,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: Permission | None = None,
        message_type: MessageType | None = None,
    ) -> Topic:
        """Change the given fields and keep the others."""
        spec = _topic_proto(name, read_queues, write_queues, perm, message_type)
        return Topic.from_proto(
            self._transport.call(self._stub.UpdateTopic, apb.UpdateTopicRequest(topic=spec))
        )

    def apply_topic(self, topic: Topic) -> Topic:
        """Create ``topic``, or change the existing one to match it (what a reconciler wants)."""
        try:
            current = self.get_topic(topic.name)
        except NotFound:
            return self.create_topic(
                topic.name,
                read_queues=topic.read_queues,
                write_queues=topic.write_queues,
                perm=topic.perm or Permission.READ_WRITE,
                message_type=topic.message_type,
            )
        if current == topic:
            return current
        return self.update_topic(
            topic.name,
            read_queues=topic.read_queues,
            write_queues=topic.write_queues,
            perm=topic.perm,
            message_type=topic.message_type,
        )

    def delete_topic(self, name: str) -> None:
        """Delete the topic, its consume queues and its consumer offsets."""
        self._transport.call(self._stub.DeleteTopic, apb.DeleteTopicRequest(name=name))

    def get_topic(self, name: str) -> Topic:
        return Topic.from_proto(
            self._transport.call(self._stub.GetTopic, apb.GetTopicRequest(name=name))
        )

    def list_topics(self) -> list[Topic]:
        response = self._transport.call(self._stub.ListTopics, apb.ListTopicsRequest())
        return [Topic.from_proto(t) for t in response.topics]

    # -- broker state -------------------------------------------------------

    def broker_info(self) -> BrokerInfo:
        info = self._transport.call(self._stub.GetBrokerInfo, apb.GetBrokerInfoRequest())
        return BrokerInfo(
            broker_name=info.broker_name,
            role=info.role,
            version=info.version,
            endpoint=info.endpoint,
            flush_type=info.flush_type,
            transient_store_pool=info.transient_store_pool,
            commit_log_min_offset=info.commit_log_min_offset,
            commit_log_max_offset=info.commit_log_max_offset,
            committed_offset=info.committed_offset,
            flushed_offset=info.flushed_offset,
            dispatched_offset=info.dispatched_offset,
            disk_use_ratio=info.disk_use_ratio,
            writable=info.writable,
            refusal=info.refusal,
            replication_mode=info.replication_mode,
            epoch=info.epoch,
            epoch_start_offset=info.epoch_start_offset,
            ha_address=info.ha_address,
            replicas=tuple(
                ReplicaInfo(
                    name=r.name,
                    address=r.address,
                    acked_offset=r.acked_offset,
                    lag_bytes=r.lag_bytes,
                    in_sync=r.in_sync,
                    connected=r.connected,
                )
                for r in info.replicas
            ),
            master_address=info.master_address,
            remoting_endpoint=info.remoting_endpoint,
            replica_connected=info.replica_connected,
            replica_in_sync=info.replica_in_sync,
            replica_lag_bytes=info.replica_lag_bytes,
        )

    def promote(self, *, force: bool = False, ha_listen: str = "") -> Promotion:
        """Make this replica the master (FAILED_PRECONDITION if out of sync and not forced).

        ``ha_listen``: where it serves replication as master (default: its --ha-listen).
        """
        reply = self._transport.call(
            self._stub.Promote, apb.PromoteRequest(force=force, ha_listen=ha_listen)
        )
        return Promotion(reply.role, reply.epoch, reply.epoch_start_offset, reply.ha_address)

    def queue_offsets(self, topic: str) -> list[QueueOffsets]:
        response = self._transport.call(
            self._stub.GetQueueOffsets, apb.GetQueueOffsetsRequest(topic=topic)
        )
        return [QueueOffsets(q.queue_id, q.min_offset, q.max_offset) for q in response.queues]

    def consumer_lag(self, group: str, topic: str) -> ConsumerLag:
        response = self._transport.call(
            self._stub.GetConsumerLag, apb.GetConsumerLagRequest(group=group, topic=topic)
        )
        queues = tuple(
            QueueLag(q.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in response.queues
        )
        return ConsumerLag(group, topic, queues, response.total_lag)

    # -- consumer groups ----------------------------------------------------

    def list_consumer_groups(self, topic: str = "") -> list[ConsumerGroup]:
        """Groups with offsets or live consumers (only those of ``topic`` if given)."""
        response = self._transport.call(
            self._stub.ListConsumerGroups, apb.ListConsumerGroupsRequest(topic=topic)
        )
        return [
            ConsumerGroup(g.group, tuple(g.topics), g.live_consumers, g.total_lag)
            for g in response.groups
        ]

    def describe_consumer_group(self, group: str, topic: str = "") -> GroupDescription:
        """Per topic (only ``topic`` if given) and read queue: offsets, lag, deliveries."""
        request = apb.DescribeConsumerGroupRequest(group=group, topic=topic)
        response = self._transport.call(self._stub.DescribeConsumerGroup, request)
        return GroupDescription(
            group=response.group,
            topics=tuple(
                GroupTopic(
                    t.topic,
                    tuple(
                        GroupQueue(
                            q.queue_id,
                            q.min_offset,
                            q.max_offset,
                            q.consumer_offset,
                            q.next_offset,
                            q.lag,
                            q.in_flight,
                            q.invisible,
                            q.last_commit_time,
                        )
                        for q in t.queues
                    ),
                    t.total_lag,
                )
                for t in response.topics
            ),
            consumers=tuple(
                GroupConsumer(c.client_id, c.client_type, tuple(c.topics))
                for c in response.consumers
            ),
        )

    def reset_consumer_group(
        self,
        group: str,
        topic: str,
        to: ResetTo,
        *,
        offset: int = 0,
        timestamp_ms: int = 0,
        queue_ids: Sequence[int] = (),
        dry_run: bool = False,
        force: bool = False,
    ) -> list[QueueReset]:
        """Move the group's position in ``topic`` (every read queue, or ``queue_ids``).

        ``dry_run`` tells what would move and moves nothing. Refused with
        FailedPrecondition while the group has live consumers, unless ``force``.
        """
        request = apb.ResetConsumerGroupOffsetsRequest(
            group=group,
            topic=topic,
            queue_ids=list(queue_ids),
            target=_RESET_TO_PROTO[ResetTo(to)],
            offset=offset,
            timestamp=timestamp_ms,
            dry_run=dry_run,
            force=force,
        )
        response = self._transport.call(self._stub.ResetConsumerGroupOffsets, request)
        return [QueueReset(q.queue_id, q.old_offset, q.new_offset) for q in response.queues]

    def delete_consumer_group(self, group: str, *, force: bool = False) -> DeletedGroup:
        """Forget the group's offsets and deliveries in flight (NotFound if it has none)."""
        request = apb.DeleteConsumerGroupRequest(group=group, force=force)
        response = self._transport.call(self._stub.DeleteConsumerGroup, request)
        return DeletedGroup(tuple(response.topics), response.kept_dlq_topic)

    # -- look-ups -----------------------------------------------------------

    def lookup_message(self, topic: str, message_id: str) -> StoredMessage:
        """The message with this ID (as producers and consumers see it)."""
        response = self._transport.call(
            self._stub.LookupMessage, apb.LookupMessageRequest(topic=topic, message_id=message_id)
        )
        return StoredMessage.from_proto(response)

    def query_messages_by_key(
        self,
        topic: str,
        key: str,
        *,
        begin_ms: int = 0,
        end_ms: int = 0,
        max_messages: int = 32,
    ) -> list[StoredMessage]:
        """Messages with this key stored in [begin_ms, end_ms] (0: no end), newest first."""
        request = apb.QueryMessagesByKeyRequest(
            topic=topic,
            key=key,
            begin_timestamp=begin_ms,
            end_timestamp=end_ms,
            max_messages=max_messages,
        )
        response = self._transport.call(self._stub.QueryMessagesByKey, request)
        return [StoredMessage.from_proto(m) for m in response.messages]

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (the max offset if none)."""
        request = apb.GetOffsetByTimeRequest(topic=topic, queue_id=queue_id, timestamp=timestamp_ms)
        return self._transport.call(self._stub.GetOffsetByTime, request).offset

    # -- users and ACLs (super users only where authentication is on) --------
    # Each broker keeps its own: apply them to every broker of a cluster.

    def apply_user(
        self, access_key: str, secret_key: str, *, super_user: bool = False, enabled: bool = True
    ) -> bool:
        """Create or replace the user; whether anything changed (False: it was already so)."""
        user = apb.User(
            access_key=access_key,
            secret_key=secret_key,
            type=apb.SUPER_USER if super_user else apb.NORMAL_USER,
            status=apb.ENABLED if enabled else apb.DISABLED,
        )
        return self._transport.call(self._stub.ApplyUser, apb.ApplyUserRequest(user=user)).changed

    def delete_user(self, access_key: str) -> bool:
        """Delete the user and its ACL; False if there was no such user."""
        request = apb.DeleteUserRequest(access_key=access_key)
        return self._transport.call(self._stub.DeleteUser, request).deleted

    def get_user(self, access_key: str) -> UserInfo:
        request = apb.GetUserRequest(access_key=access_key)
        return UserInfo.from_proto(self._transport.call(self._stub.GetUser, request))

    def list_users(self) -> list[UserInfo]:
        response = self._transport.call(self._stub.ListUsers, apb.ListUsersRequest())
        return [UserInfo.from_proto(user) for user in response.users]

    def apply_acl(self, access_key: str, entries: Sequence[AclEntry]) -> bool:
        """Make ``entries`` the user's whole ACL; whether anything changed."""
        acl = apb.Acl(access_key=access_key, entries=[entry.to_proto() for entry in entries])
        return self._transport.call(self._stub.ApplyAcl, apb.ApplyAclRequest(acl=acl)).changed

    def delete_acl(self, access_key: str) -> bool:
        request = apb.DeleteAclRequest(access_key=access_key)
        return self._transport.call(self._stub.DeleteAcl, request).deleted

    def get_acl(self, access_key: str) -> list[AclEntry]:
        response = self._transport.call(self._stub.GetAcl, apb.GetAclRequest(access_key=access_key))
        return [AclEntry.from_proto(entry) for entry in response.entries]

    def list_acls(self) -> dict[str, list[AclEntry]]:
        response = self._transport.call(self._stub.ListAcls, apb.ListAclsRequest())
        return {
            acl.access_key: [AclEntry.from_proto(entry) for entry in acl.entries]
            for acl in response.acls
        }


@dataclasses.dataclass(frozen=True, slots=True)
class UserInfo:
    """A user as the broker tells it (never with its secret key)."""

    access_key: str
    super_user: bool
    enabled: bool

    @classmethod
    def from_proto(cls, proto: apb.User) -> UserInfo:
        return cls(proto.access_key, proto.type == apb.SUPER_USER, proto.status != apb.DISABLED)


@dataclasses.dataclass(frozen=True, slots=True)
class AclEntry:
    """Allow (or Deny) ``actions`` on ``resources`` (ACL 2.0 strings) from ``source_ips``."""

    resources: tuple[str, ...]
    actions: tuple[str, ...]
    decision: str = "Allow"
    source_ips: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, proto: apb.PolicyEntry) -> AclEntry:
        decision = "Deny" if proto.decision == apb.DENY else "Allow"
        return cls(tuple(proto.resources), tuple(proto.actions), decision, tuple(proto.source_ips))

    def to_proto(self) -> apb.PolicyEntry:
        if self.decision.lower() not in ("allow", "deny"):
            raise ValueError(f"decision must be Allow or Deny, not {self.decision!r}")
        return apb.PolicyEntry(
            resources=list(self.resources),
            actions=list(self.actions),
            decision=apb.DENY if self.decision.lower() == "deny" else apb.ALLOW,
            source_ips=list(self.source_ips),
        )


def _topic_proto(
    name: str,
    read_queues: int | None,
    write_queues: int | None,
    perm: Permission | None,
    message_type: MessageType | None,
) -> apb.Topic:
    # Zero and UNSPECIFIED mean "unchanged" to UpdateTopic.
    return apb.Topic(
        name=name,
        read_queue_nums=read_queues or 0,
        write_queue_nums=write_queues or 0,
        permission=_PERMISSION_TO_PROTO[perm] if perm is not None else apb.PERMISSION_UNSPECIFIED,
        message_type=str(message_type)
        if message_type is not None
        else apb.MESSAGE_TYPE_UNSPECIFIED,
    )
