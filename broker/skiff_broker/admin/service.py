"""skiff.admin.v1.AdminService: topics, broker state, offsets, message look-ups, users, ACLs.

Served on the broker's gRPC port beside apache.rocketmq.v2.MessagingService.
Errors are standard gRPC status codes with a message that says what to do; a
request that is not valid (bytes that do not parse, invalid UTF-8 included, or
a name no topic can have) is INVALID_ARGUMENT, and no message echoes more than
a short prefix of what the user sent.
Handlers do their work without awaiting: a topic check and the change it guards see
the same state. Reads of memory only run on the event loop; handlers that write state
files (fsync), wait for the dispatcher, or read the log and index from disk run in a
worker thread (``_blocking_handler``), so no other connection waits for them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from .. import __version__
from ..error_text import bounded, quoted, shortened
from ..frontdoor.grpc.boundary import rpc_boundary
from ..frontdoor.grpc.server import RpcServer
from ..frontdoor.grpc.undecodable import lenient_rpc_handler
from ..ha.replication import PromotionRefused, Replication
from ..metadata.topic_table import MessageType, Permission, TopicConfig, validate_topic_name
from ..runtime import Broker
from ..store.message import StoredMessage, encode_host, offset_message_id
from ..wire.resource_names import SYSTEM_TOPIC_PREFIX, group_name_problem, is_system_topic
from .consumer_progress import ConsumerProgress
from .errors import AdminError, AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from .group_admin import GroupAdmin, LiveConsumers, ResetTarget
from .topic_admin import TopicAdmin, TopicChange
from .user_admin import UserAdmin
from .v1 import admin_pb2 as apb
from .v1 import admin_pb2_grpc

log = logging.getLogger(__name__)

_STATUS_CODES: dict[type[AdminError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
}

_PERMISSIONS = {
    apb.READ: Permission.READ,
    apb.WRITE: Permission.WRITE,
    apb.READ_WRITE: Permission.READ_WRITE,
}
_RESET_TARGETS = {
    apb.EARLIEST: ResetTarget.EARLIEST,
    apb.LATEST: ResetTarget.LATEST,
    apb.OFFSET: ResetTarget.OFFSET,
    apb.TIMESTAMP: ResetTarget.TIMESTAMP,
}
USER_ADMIN_NEEDS_AUTH = (
    "users and ACLs cannot be applied or read while authentication is off: any caller "
    "could make itself a super user. Start the broker with --auth enabled and sign as a super user "
    "(the first one comes from --auth-init-user, env SKIFF_AUTH_INIT_USER), or stop the "
    "broker and edit its users with `skiff store user apply --data-dir DIR`"
)
_MAX_QUERY_MESSAGES = 1000
_DEFAULT_QUERY_MESSAGES = 32
# Reads wait this long for messages just sent to reach queues and index, then
# answer with what is there.
_READ_YOUR_WRITES_WAIT_S = 1.0


async def _answer_error(context: grpc.aio.ServicerContext, error: Exception) -> None:
    """An AdminError ends the call with its status code; anything else with INTERNAL."""
    if isinstance(error, AdminError):
        await context.abort(_STATUS_CODES[type(error)], bounded(error.message))
    await context.abort(grpc.StatusCode.INTERNAL, str(error))


# Handlers take no context: they report what went wrong by raising an AdminError.
_handler = rpc_boundary(_answer_error, expected=(AdminError,), with_context=False)
# Handlers that write state files (fsync) or read the log and index from disk. Those of
# consumer groups too: each first brings queues and committed offsets up to date
# (``ConsumerProgress.refresh``), which persists the offsets table.
_blocking_handler = rpc_boundary(
    _answer_error, expected=(AdminError,), with_context=False, off_loop=True
)


# -- conversions ---------------------------------------------------------------


def topic_to_proto(topic: TopicConfig) -> apb.Topic:
    if topic.readable and topic.writable:
        permission = apb.READ_WRITE
    elif topic.readable:
        permission = apb.READ
    elif topic.writable:
        permission = apb.WRITE
    else:
        permission = apb.PERMISSION_UNSPECIFIED
    return apb.Topic(
        name=topic.name,
        read_queue_nums=topic.read_queue_nums,
        write_queue_nums=topic.write_queue_nums,
        permission=permission,
        # protobuf takes an enum field by its name as well as by its number.
        message_type=str(topic.message_type),
    )


def _permission(value: apb.Permission) -> Permission | None:
    if value == apb.PERMISSION_UNSPECIFIED:
        return None
    if value not in _PERMISSIONS:
        raise InvalidArgument(f"unknown permission {value}; use READ, WRITE or READ_WRITE")
    return _PERMISSIONS[value]


def _message_type(value: int) -> MessageType | None:
    if value == apb.MESSAGE_TYPE_UNSPECIFIED:
        return None
    try:
        return MessageType(apb.MessageType.Name(value))
    except ValueError:
        raise InvalidArgument(
            f"unknown message type {value}; use NORMAL, FIFO, DELAY or TRANSACTION"
        ) from None


def _client_type_name(value: int) -> str:
    if value in pb.ClientType.values():
        return pb.ClientType.Name(value)
    return "UNKNOWN"


def message_to_proto(message: StoredMessage) -> apb.StoredMessage:
    return apb.StoredMessage(
        topic=message.topic,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        physical_offset=message.physical_offset,
        # Records written without a client ID are known by RocketMQ's offset message ID.
        message_id=message.unique_id
        or offset_message_id(encode_host(message.store_host), message.physical_offset),
        tag=message.tags,
        keys=message.keys,
        body=message.body,
        properties=message.properties,
        born_timestamp=message.born_timestamp,
        store_timestamp=message.store_timestamp,
        born_host=message.born_host,
        store_host=message.store_host,
        reconsume_times=message.reconsume_times,
    )


def _required(value: str, what: str) -> str:
    if not value:
        raise InvalidArgument(f"{what} is required")
    return value


def _topic_name(value: str) -> str:
    """``value`` if a topic can have it as its name; InvalidArgument saying why otherwise."""
    try:
        validate_topic_name(_required(value, "topic name"))
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    return value


def _new_topic_name(value: str) -> str:
    """``_topic_name``, and not one of the broker's system topics (RocketMQ refuses them too)."""
    name = _topic_name(value)
    if is_system_topic(name):
        raise InvalidArgument(
            f"The topic[{quoted(name)}] is conflict with system topic: it belongs to the "
            f"broker; choose another name (names starting with {SYSTEM_TOPIC_PREFIX!r} are "
            "reserved)"
        )
    return name


def _group_name(value: str) -> str:
    """``value`` if a consumer group can have it as its name; InvalidArgument otherwise."""
    problem = group_name_problem(value)
    if problem is not None:
        raise InvalidArgument(problem)
    return value


def add_to_server(service: AdminService, server: RpcServer) -> None:
    """Register ``service``; undecodable requests reach its handlers as Undecodable."""
    server.add_generic_rpc_handlers(
        (
            lenient_rpc_handler(
                apb.DESCRIPTOR.services_by_name["AdminService"],
                service,
                apb,
                hint="send it with Skiff's skiff.admin.v1 protobuf definitions",
            ),
        )
    )


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    def __init__(
        self,
        broker: Broker,
        endpoint: Callable[[], str],
        replication: Replication | None = None,
        clients: LiveConsumers | None = None,
        remoting_endpoint: Callable[[], str] = lambda: "",
    ) -> None:
        """``endpoint`` gives the address clients reach this broker at (known once listening),
        ``remoting_endpoint`` that of its remoting port (empty: none); ``clients`` tells
        which consumers are connected (none known without it)."""
        self._broker = broker
        self._endpoint = endpoint
        self._remoting_endpoint = remoting_endpoint
        self._replication = replication
        self._topics = TopicAdmin(broker)
        self._progress = ConsumerProgress(broker)
        self._users = UserAdmin(broker.users)
        self._groups = GroupAdmin(broker, clients)

    # -- topics -------------------------------------------------------------

    @_blocking_handler
    def CreateTopic(self, request: apb.CreateTopicRequest) -> apb.Topic:
        self._refuse_on_replica()
        spec = request.topic
        config = self._broker.config
        read = spec.read_queue_nums or spec.write_queue_nums or config.default_read_queues
        topic = TopicConfig(
            name=_new_topic_name(spec.name),
            read_queue_nums=read,
            write_queue_nums=spec.write_queue_nums or read,
            perm=_permission(spec.permission) or Permission.READ_WRITE,
            message_type=_message_type(spec.message_type) or MessageType.NORMAL,
        )
        return topic_to_proto(self._topics.create(topic))

    @_blocking_handler
    def UpdateTopic(self, request: apb.UpdateTopicRequest) -> apb.Topic:
        self._refuse_on_replica()
        spec = request.topic
        change = TopicChange(
            read_queue_nums=spec.read_queue_nums or None,
            write_queue_nums=spec.write_queue_nums or None,
            perm=_permission(spec.permission),
            message_type=_message_type(spec.message_type),
        )
        return topic_to_proto(self._topics.update(_topic_name(spec.name), change))

    @_blocking_handler
    def DeleteTopic(self, request: apb.DeleteTopicRequest) -> apb.DeleteTopicResponse:
        self._refuse_on_replica()
        self._topics.delete(_topic_name(request.name))
        return apb.DeleteTopicResponse(deleted=True)

    @_handler
    def GetTopic(self, request: apb.GetTopicRequest) -> apb.Topic:
        return topic_to_proto(self._topics.get(_topic_name(request.name)))

    @_handler
    def ListTopics(self, request: apb.ListTopicsRequest) -> apb.ListTopicsResponse:
        return apb.ListTopicsResponse(topics=[topic_to_proto(t) for t in self._topics.list()])

    # -- users and ACLs -----------------------------------------------------
    # Replicated like topics: a replica takes them from its master and refuses changes.
    # While authentication is off, only removals are served (they grant nothing, and the
    # operator's finalizer needs them): an unsigned apply could plant a super user, and a
    # look-up would show whom to impersonate; see USER_ADMIN_NEEDS_AUTH.

    @_blocking_handler
    def ApplyUser(self, request: apb.ApplyUserRequest) -> apb.ApplyUserResponse:
        self._refuse_users_while_auth_off()
        self._refuse_users_on_replica()
        return self._users.apply_user(request.user)

    @_blocking_handler
    def DeleteUser(self, request: apb.DeleteUserRequest) -> apb.DeleteUserResponse:
        self._refuse_users_on_replica()
        return self._users.delete_user(request.access_key)

    @_handler
    def GetUser(self, request: apb.GetUserRequest) -> apb.User:
        self._refuse_users_while_auth_off()
        return self._users.get_user(request.access_key)

    @_handler
    def ListUsers(self, request: apb.ListUsersRequest) -> apb.ListUsersResponse:
        self._refuse_users_while_auth_off()
        return self._users.list_users()

    @_blocking_handler
    def ApplyAcl(self, request: apb.ApplyAclRequest) -> apb.ApplyAclResponse:
        self._refuse_users_while_auth_off()
        self._refuse_users_on_replica()
        return self._users.apply_acl(request.acl)

    @_blocking_handler
    def DeleteAcl(self, request: apb.DeleteAclRequest) -> apb.DeleteAclResponse:
        self._refuse_users_on_replica()
        return self._users.delete_acl(request.access_key)

    @_handler
    def GetAcl(self, request: apb.GetAclRequest) -> apb.Acl:
        self._refuse_users_while_auth_off()
        return self._users.get_acl(request.access_key)

    @_handler
    def ListAcls(self, request: apb.ListAclsRequest) -> apb.ListAclsResponse:
        self._refuse_users_while_auth_off()
        return self._users.list_acls()

    # -- broker state -------------------------------------------------------

    @_handler
    def GetBrokerInfo(self, request: apb.GetBrokerInfoRequest) -> apb.BrokerInfo:
        config = self._broker.config
        stats = self._broker.store.stats()
        info = apb.BrokerInfo(
            broker_name=config.broker_name,
            role="REPLICA" if self._broker.is_replica else "MASTER",
            version=__version__,
            flush_type=str(config.store.flush_type),
            transient_store_pool=config.store.transient_store_pool_enable,
            commit_log_min_offset=stats.commit_log_min_offset,
            commit_log_max_offset=stats.commit_log_max_offset,
            flushed_offset=stats.flushed_offset,
            committed_offset=stats.committed_offset,
            dispatched_offset=stats.dispatched_offset,
            disk_use_ratio=stats.disk_use_ratio,
            writable=stats.writable,
            refusal=stats.refusal,
            endpoint=self._endpoint(),
            remoting_endpoint=self._remoting_endpoint(),
        )
        if self._replication is not None:
            replication = self._replication.info()
            info.role = str(replication.role)
            info.replication_mode = str(replication.mode)
            info.epoch = replication.epoch
            info.epoch_start_offset = replication.epoch_start_offset
            info.ha_address = replication.ha_address
            info.master_address = replication.master_address
            info.replica_connected = replication.connected
            info.replica_in_sync = replication.in_sync
            info.replica_lag_bytes = replication.lag_bytes
            info.replicas.extend(
                apb.ReplicaInfo(
                    name=r.name,
                    address=r.address,
                    acked_offset=r.acked_offset,
                    lag_bytes=r.lag_bytes,
                    in_sync=r.in_sync,
                    connected=r.connected,
                )
                for r in replication.replicas
            )
        return info

    @_handler
    async def Promote(self, request: apb.PromoteRequest) -> apb.PromoteResponse:
        if self._replication is None:
            raise FailedPrecondition("this broker runs without replication; it is a master")
        try:
            await self._replication.promote(force=request.force, ha_listen=request.ha_listen)
        except PromotionRefused as exc:
            raise FailedPrecondition(str(exc)) from None
        info = self._replication.info()
        return apb.PromoteResponse(
            role=str(info.role),
            epoch=info.epoch,
            epoch_start_offset=info.epoch_start_offset,
            ha_address=info.ha_address,
        )

    def _refuse_on_replica(self) -> None:
        if self._broker.is_replica:
            raise FailedPrecondition(
                "this broker is a replica: it takes its topics from its master; "
                "change topics on the master"
            )

    def _refuse_users_while_auth_off(self) -> None:
        if not self._broker.config.auth.enabled:
            raise FailedPrecondition(USER_ADMIN_NEEDS_AUTH)

    def _refuse_users_on_replica(self) -> None:
        if self._broker.is_replica:
            master = self._replication.info().master_address if self._replication else ""
            followed = f" (followed at replication address {master})" if master else ""
            raise FailedPrecondition(
                f"this broker is a replica: it takes its users and ACLs from its master"
                f"{followed}; apply them on the master"
            )

    def _see_recent_writes(self) -> None:
        self._broker.store.wait_dispatched(_READ_YOUR_WRITES_WAIT_S)

    @_handler
    def GetQueueOffsets(self, request: apb.GetQueueOffsetsRequest) -> apb.GetQueueOffsetsResponse:
        topic = self._topics.get(_topic_name(request.topic))
        self._see_recent_writes()
        store = self._broker.store
        return apb.GetQueueOffsetsResponse(
            queues=[
                apb.QueueOffsets(
                    queue_id=queue_id,
                    min_offset=store.min_offset(topic.name, queue_id),
                    max_offset=store.max_offset(topic.name, queue_id),
                )
                for queue_id in range(max(topic.read_queue_nums, topic.write_queue_nums))
            ]
        )

    @_blocking_handler
    def GetConsumerLag(self, request: apb.GetConsumerLagRequest) -> apb.GetConsumerLagResponse:
        group = _group_name(request.group)
        topic = self._topics.get(_topic_name(request.topic))
        self._progress.refresh()
        if group not in self._progress.groups_of(topic.name):
            # Names only what the caller named: other groups are theirs to list, with
            # List on the cluster.
            raise NotFound(
                f"consumer group {quoted(group)} has not consumed from topic {topic.name!r}; "
                f"check the group name (`skiff group list --topic {topic.name}` lists "
                "the groups that have)"
            )
        queues = [
            self._progress.queue(group, topic.name, queue_id)
            for queue_id in range(topic.read_queue_nums)
        ]
        return apb.GetConsumerLagResponse(
            queues=[
                apb.QueueLag(
                    queue_id=q.queue_id,
                    broker_offset=q.max_offset,
                    consumer_offset=q.consumer_offset,
                    lag=q.lag,
                )
                for q in queues
            ],
            total_lag=sum(q.lag for q in queues),
        )

    # -- consumer groups ----------------------------------------------------

    @_blocking_handler
    def ListConsumerGroups(
        self, request: apb.ListConsumerGroupsRequest
    ) -> apb.ListConsumerGroupsResponse:
        topic = _topic_name(request.topic) if request.topic else ""
        return apb.ListConsumerGroupsResponse(
            groups=[
                apb.ConsumerGroupSummary(
                    group=g.group,
                    topics=g.topics,
                    live_consumers=g.live_consumers,
                    total_lag=g.total_lag,
                )
                for g in self._groups.list(topic)
            ]
        )

    @_blocking_handler
    def DescribeConsumerGroup(
        self, request: apb.DescribeConsumerGroupRequest
    ) -> apb.DescribeConsumerGroupResponse:
        group = _group_name(request.group)
        topic = _topic_name(request.topic) if request.topic else ""
        topics, consumers = self._groups.describe(group, topic)
        return apb.DescribeConsumerGroupResponse(
            group=group,
            topics=[
                apb.GroupTopicState(
                    topic=t.topic,
                    total_lag=t.total_lag,
                    queues=[apb.GroupQueueState(**dataclasses.asdict(q)) for q in t.queues],
                )
                for t in topics
            ],
            consumers=[
                apb.ConsumerInfo(
                    client_id=c.client_id,
                    client_type=_client_type_name(c.client_type),
                    topics=sorted(c.topics),
                )
                for c in consumers
            ],
        )

    @_blocking_handler
    def ResetConsumerGroupOffsets(
        self, request: apb.ResetConsumerGroupOffsetsRequest
    ) -> apb.ResetConsumerGroupOffsetsResponse:
        if not request.dry_run:
            self._refuse_groups_on_replica()
        group = _group_name(request.group)
        if request.target not in _RESET_TARGETS:
            raise InvalidArgument("reset target is required: EARLIEST, LATEST, OFFSET or TIMESTAMP")
        moves = self._groups.reset(
            group,
            _topic_name(request.topic),
            _RESET_TARGETS[request.target],
            queue_ids=list(request.queue_ids),
            offset=request.offset,
            timestamp=request.timestamp,
            dry_run=request.dry_run,
            force=request.force,
        )
        return apb.ResetConsumerGroupOffsetsResponse(
            queues=[
                apb.QueueReset(
                    queue_id=m.queue_id, old_offset=m.old_offset, new_offset=m.new_offset
                )
                for m in moves
            ],
            applied=not request.dry_run,
        )

    @_blocking_handler
    def DeleteConsumerGroup(
        self, request: apb.DeleteConsumerGroupRequest
    ) -> apb.DeleteConsumerGroupResponse:
        self._refuse_groups_on_replica()
        deleted = self._groups.delete(_group_name(request.group), force=request.force)
        return apb.DeleteConsumerGroupResponse(
            topics=deleted.topics, kept_dlq_topic=deleted.kept_dlq_topic
        )

    def _refuse_groups_on_replica(self) -> None:
        if self._broker.is_replica:
            raise FailedPrecondition(
                "this broker is a replica: it takes consumer offsets from its master; "
                "reset or delete consumer groups on the master"
            )

    # -- look-ups -----------------------------------------------------------

    @_blocking_handler
    def LookupMessage(self, request: apb.LookupMessageRequest) -> apb.StoredMessage:
        topic = self._topics.get(_topic_name(request.topic))
        message_id = _required(request.message_id.strip(), "message ID")
        self._see_recent_writes()
        # The index holds message IDs as keys; KEYS equal to an ID must not match.
        for message in self._broker.store.query_by_key(topic.name, message_id, max_num=8):
            if message.unique_id == message_id:
                return message_to_proto(message)
        raise NotFound(
            f"no message with ID {shortened(message_id)} in topic {topic.name!r}; check the topic, "
            "or it may have been deleted by retention"
        )

    @_blocking_handler
    def QueryMessagesByKey(
        self, request: apb.QueryMessagesByKeyRequest
    ) -> apb.QueryMessagesResponse:
        topic = self._topics.get(_topic_name(request.topic))
        key = _required(request.key, "key")
        limit = request.max_messages or _DEFAULT_QUERY_MESSAGES
        if not 0 < limit <= _MAX_QUERY_MESSAGES:
            raise InvalidArgument(f"max messages must be 1 to {_MAX_QUERY_MESSAGES}")
        begin, end = request.begin_timestamp, request.end_timestamp or 2**62
        if begin < 0 or end < begin:
            raise InvalidArgument("the time range is empty: begin must be ≤ end, both ≥ 0")
        self._see_recent_writes()
        found = self._broker.store.query_by_key(topic.name, key, limit, begin, end)
        return apb.QueryMessagesResponse(messages=[message_to_proto(m) for m in found])

    @_handler
    def GetOffsetByTime(self, request: apb.GetOffsetByTimeRequest) -> apb.GetOffsetByTimeResponse:
        topic = self._topics.get(_topic_name(request.topic))
        queues = max(topic.read_queue_nums, topic.write_queue_nums)
        if not 0 <= request.queue_id < queues:
            raise InvalidArgument(
                f"queue {request.queue_id} is out of range: topic {topic.name!r} has queues "
                f"0 to {queues - 1}"
            )
        if request.timestamp < 0:
            raise InvalidArgument("timestamp must be milliseconds since the epoch, ≥ 0")
        self._see_recent_writes()
        offset = self._broker.store.offset_by_time(topic.name, request.queue_id, request.timestamp)
        return apb.GetOffsetByTimeResponse(offset=offset)
