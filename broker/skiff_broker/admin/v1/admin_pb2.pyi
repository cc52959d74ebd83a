from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Permission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_UNSPECIFIED: _ClassVar[Permission]
    READ: _ClassVar[Permission]
    WRITE: _ClassVar[Permission]
    READ_WRITE: _ClassVar[Permission]

class MessageType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_TYPE_UNSPECIFIED: _ClassVar[MessageType]
    NORMAL: _ClassVar[MessageType]
    FIFO: _ClassVar[MessageType]
    DELAY: _ClassVar[MessageType]
    TRANSACTION: _ClassVar[MessageType]

class UserType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USER_TYPE_UNSPECIFIED: _ClassVar[UserType]
    NORMAL_USER: _ClassVar[UserType]
    SUPER_USER: _ClassVar[UserType]

class UserStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USER_STATUS_UNSPECIFIED: _ClassVar[UserStatus]
    ENABLED: _ClassVar[UserStatus]
    DISABLED: _ClassVar[UserStatus]

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    ALLOW: _ClassVar[Decision]
    DENY: _ClassVar[Decision]

class ResetTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESET_TARGET_UNSPECIFIED: _ClassVar[ResetTarget]
    EARLIEST: _ClassVar[ResetTarget]
    LATEST: _ClassVar[ResetTarget]
    OFFSET: _ClassVar[ResetTarget]
    TIMESTAMP: _ClassVar[ResetTarget]
PERMISSION_UNSPECIFIED: Permission
READ: Permission
WRITE: Permission
READ_WRITE: Permission
MESSAGE_TYPE_UNSPECIFIED: MessageType
NORMAL: MessageType
FIFO: MessageType
DELAY: MessageType
TRANSACTION: MessageType
USER_TYPE_UNSPECIFIED: UserType
NORMAL_USER: UserType
SUPER_USER: UserType
USER_STATUS_UNSPECIFIED: UserStatus
ENABLED: UserStatus
DISABLED: UserStatus
DECISION_UNSPECIFIED: Decision
ALLOW: Decision
DENY: Decision
RESET_TARGET_UNSPECIFIED: ResetTarget
EARLIEST: ResetTarget
LATEST: ResetTarget
OFFSET: ResetTarget
TIMESTAMP: ResetTarget

class Topic(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "permission", "message_type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    permission: Permission
    message_type: MessageType
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., permission: _Optional[_Union[Permission, str]] = ..., message_type: _Optional[_Union[MessageType, str]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class GetTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ...) -> None: ...

class GetBrokerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerInfo(_message.Message):
    __slots__ = ("broker_name", "role", "version", "flush_type", "transient_store_pool", "commit_log_min_offset", "commit_log_max_offset", "flushed_offset", "committed_offset", "dispatched_offset", "disk_use_ratio", "writable", "refusal", "endpoint", "replication_mode", "epoch", "epoch_start_offset", "ha_address", "replicas", "master_address", "replica_connected", "replica_in_sync", "replica_lag_bytes", "remoting_endpoint")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FLUSH_TYPE_FIELD_NUMBER: _ClassVar[int]
    TRANSIENT_STORE_POOL_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISK_USE_RATIO_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_MODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_CONNECTED_FIELD_NUMBER: _ClassVar[int]
    REPLICA_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    REPLICA_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    role: str
    version: str
    flush_type: str
    transient_store_pool: bool
    commit_log_min_offset: int
    commit_log_max_offset: int
    flushed_offset: int
    committed_offset: int
    dispatched_offset: int
    disk_use_ratio: float
    writable: bool
    refusal: str
    endpoint: str
    replication_mode: str
    epoch: int
    epoch_start_offset: int
    ha_address: str
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaInfo]
    master_address: str
    replica_connected: bool
    replica_in_sync: bool
    replica_lag_bytes: int
    remoting_endpoint: str
    def __init__(self, broker_name: _Optional[str] = ..., role: _Optional[str] = ..., version: _Optional[str] = ..., flush_type: _Optional[str] = ..., transient_store_pool: _Optional[bool] = ..., commit_log_min_offset: _Optional[int] = ..., commit_log_max_offset: _Optional[int] = ..., flushed_offset: _Optional[int] = ..., committed_offset: _Optional[int] = ..., dispatched_offset: _Optional[int] = ..., disk_use_ratio: _Optional[float] = ..., writable: _Optional[bool] = ..., refusal: _Optional[str] = ..., endpoint: _Optional[str] = ..., replication_mode: _Optional[str] = ..., epoch: _Optional[int] = ..., epoch_start_offset: _Optional[int] = ..., ha_address: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[ReplicaInfo, _Mapping]]] = ..., master_address: _Optional[str] = ..., replica_connected: _Optional[bool] = ..., replica_in_sync: _Optional[bool] = ..., replica_lag_bytes: _Optional[int] = ..., remoting_endpoint: _Optional[str] = ...) -> None: ...

class ReplicaInfo(_message.Message):
    __slots__ = ("name", "address", "acked_offset", "lag_bytes", "in_sync", "connected")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ACKED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    acked_offset: int
    lag_bytes: int
    in_sync: bool
    connected: bool
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., acked_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., in_sync: _Optional[bool] = ..., connected: _Optional[bool] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("force", "ha_listen")
    FORCE_FIELD_NUMBER: _ClassVar[int]
    HA_LISTEN_FIELD_NUMBER: _ClassVar[int]
    force: bool
    ha_listen: str
    def __init__(self, force: _Optional[bool] = ..., ha_listen: _Optional[str] = ...) -> None: ...

class PromoteResponse(_message.Message):
    __slots__ = ("role", "epoch", "epoch_start_offset", "ha_address")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    role: str
    epoch: int
    epoch_start_offset: int
    ha_address: str
    def __init__(self, role: _Optional[str] = ..., epoch: _Optional[int] = ..., epoch_start_offset: _Optional[int] = ..., ha_address: _Optional[str] = ...) -> None: ...

class GetQueueOffsetsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class GetQueueOffsetsResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class GetConsumerLagRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueueLag(_message.Message):
    __slots__ = ("queue_id", "broker_offset", "consumer_offset", "lag")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    def __init__(self, queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...

class GetConsumerLagResponse(_message.Message):
    __slots__ = ("queues", "total_lag")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueLag]
    total_lag: int
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueLag, _Mapping]]] = ..., total_lag: _Optional[int] = ...) -> None: ...

class StoredMessage(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "physical_offset", "message_id", "tag", "keys", "body", "properties", "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    message_id: str
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    body: bytes
    properties: _containers.ScalarMap[str, str]
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., physical_offset: _Optional[int] = ..., message_id: _Optional[str] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_timestamp: _Optional[int] = ..., store_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., store_host: _Optional[str] = ..., reconsume_times: _Optional[int] = ...) -> None: ...

class LookupMessageRequest(_message.Message):
    __slots__ = ("topic", "message_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: str
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class QueryMessagesByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "begin_timestamp", "end_timestamp", "max_messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    begin_timestamp: int
    end_timestamp: int
    max_messages: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., begin_timestamp: _Optional[int] = ..., end_timestamp: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class QueryMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ...) -> None: ...

class GetOffsetByTimeRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class GetOffsetByTimeResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("access_key", "secret_key", "type", "status")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    type: UserType
    status: UserStatus
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., type: _Optional[_Union[UserType, str]] = ..., status: _Optional[_Union[UserStatus, str]] = ...) -> None: ...

class ApplyUserRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class ApplyUserResponse(_message.Message):
    __slots__ = ("user", "changed")
    USER_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    user: User
    changed: bool
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ..., changed: _Optional[bool] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class DeleteUserResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class GetUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[User]
    def __init__(self, users: _Optional[_Iterable[_Union[User, _Mapping]]] = ...) -> None: ...

class PolicyEntry(_message.Message):
    __slots__ = ("resources", "actions", "decision", "source_ips")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IPS_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedScalarFieldContainer[str]
    actions: _containers.RepeatedScalarFieldContainer[str]
    decision: Decision
    source_ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resources: _Optional[_Iterable[str]] = ..., actions: _Optional[_Iterable[str]] = ..., decision: _Optional[_Union[Decision, str]] = ..., source_ips: _Optional[_Iterable[str]] = ...) -> None: ...

class Acl(_message.Message):
    __slots__ = ("access_key", "entries")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    entries: _containers.RepeatedCompositeFieldContainer[PolicyEntry]
    def __init__(self, access_key: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[PolicyEntry, _Mapping]]] = ...) -> None: ...

class ApplyAclRequest(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: Acl
    def __init__(self, acl: _Optional[_Union[Acl, _Mapping]] = ...) -> None: ...

class ApplyAclResponse(_message.Message):
    __slots__ = ("acl", "changed")
    ACL_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    acl: Acl
    changed: bool
    def __init__(self, acl: _Optional[_Union[Acl, _Mapping]] = ..., changed: _Optional[bool] = ...) -> None: ...

class DeleteAclRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class DeleteAclResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class GetAclRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAclsResponse(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[Acl]
    def __init__(self, acls: _Optional[_Iterable[_Union[Acl, _Mapping]]] = ...) -> None: ...

class ListConsumerGroupsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ConsumerGroupSummary(_message.Message):
    __slots__ = ("group", "topics", "live_consumers", "total_lag")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    LIVE_CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    live_consumers: int
    total_lag: int
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., live_consumers: _Optional[int] = ..., total_lag: _Optional[int] = ...) -> None: ...

class ListConsumerGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ConsumerGroupSummary]
    def __init__(self, groups: _Optional[_Iterable[_Union[ConsumerGroupSummary, _Mapping]]] = ...) -> None: ...

class DescribeConsumerGroupRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class GroupQueueState(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "consumer_offset", "next_offset", "lag", "in_flight", "invisible", "last_commit_time")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    consumer_offset: int
    next_offset: int
    lag: int
    in_flight: int
    invisible: int
    last_commit_time: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., lag: _Optional[int] = ..., in_flight: _Optional[int] = ..., invisible: _Optional[int] = ..., last_commit_time: _Optional[int] = ...) -> None: ...

class GroupTopicState(_message.Message):
    __slots__ = ("topic", "queues", "total_lag")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[GroupQueueState]
    total_lag: int
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[GroupQueueState, _Mapping]]] = ..., total_lag: _Optional[int] = ...) -> None: ...

class ConsumerInfo(_message.Message):
    __slots__ = ("client_id", "client_type", "topics")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    client_type: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., client_type: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeConsumerGroupResponse(_message.Message):
    __slots__ = ("group", "topics", "consumers")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedCompositeFieldContainer[GroupTopicState]
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerInfo]
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[GroupTopicState, _Mapping]]] = ..., consumers: _Optional[_Iterable[_Union[ConsumerInfo, _Mapping]]] = ...) -> None: ...

class ResetConsumerGroupOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_ids", "target", "offset", "timestamp", "dry_run", "force")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    target: ResetTarget
    offset: int
    timestamp: int
    dry_run: bool
    force: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_ids: _Optional[_Iterable[int]] = ..., target: _Optional[_Union[ResetTarget, str]] = ..., offset: _Optional[int] = ..., timestamp: _Optional[int] = ..., dry_run: _Optional[bool] = ..., force: _Optional[bool] = ...) -> None: ...

class QueueReset(_message.Message):
    __slots__ = ("queue_id", "old_offset", "new_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    old_offset: int
    new_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., old_offset: _Optional[int] = ..., new_offset: _Optional[int] = ...) -> None: ...

class ResetConsumerGroupOffsetsResponse(_message.Message):
    __slots__ = ("queues", "applied")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueReset]
    applied: bool
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueReset, _Mapping]]] = ..., applied: _Optional[bool] = ...) -> None: ...

class DeleteConsumerGroupRequest(_message.Message):
    __slots__ = ("group", "force")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    group: str
    force: bool
    def __init__(self, group: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteConsumerGroupResponse(_message.Message):
    __slots__ = ("topics", "kept_dlq_topic")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    KEPT_DLQ_TOPIC_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    kept_dlq_topic: str
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., kept_dlq_topic: _Optional[str] = ...) -> None: ...
