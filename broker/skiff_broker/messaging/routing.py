"""Routes: which queues a topic has on this broker, with what permission."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from ..metadata.topic_table import (
    MessageType,
    Permission,
    TopicConfig,
)
from ..wire.resource_names import group_name_problem, system_topic_problem, topic_name_problem
from .status import Code, RequestError

_ACCEPTED = {
    MessageType.NORMAL: [pb.MessageType.NORMAL],
    MessageType.FIFO: [pb.MessageType.FIFO],
    MessageType.DELAY: [pb.MessageType.DELAY],
    MessageType.TRANSACTION: [pb.MessageType.TRANSACTION],
}


def require_topic_name(name: str) -> str:
    """``name`` if a client may use it as a topic; ILLEGAL_TOPIC otherwise (before any lookup).

    As RocketMQ's proxy, every client call refuses the broker's system topics.
    """
    problem = topic_name_problem(name) or system_topic_problem(name)
    if problem is not None:
        raise RequestError(Code.ILLEGAL_TOPIC, problem)
    return name


def require_group_name(name: str) -> str:
    """``name`` if a client may use it as a consumer group; ILLEGAL_CONSUMER_GROUP otherwise."""
    problem = group_name_problem(name)
    if problem is not None:
        raise RequestError(Code.ILLEGAL_CONSUMER_GROUP, problem)
    return name


def accepted_types(topic: TopicConfig) -> list[int]:
    return _ACCEPTED[topic.message_type]


def _permission(topic: TopicConfig, queue_id: int, writable_broker: bool) -> int:
    readable = topic.readable and queue_id < topic.read_queue_nums
    writable = writable_broker and topic.writable and queue_id < topic.write_queue_nums
    if readable and writable:
        return pb.Permission.READ_WRITE
    if readable:
        return pb.Permission.READ
    if writable:
        return pb.Permission.WRITE
    return pb.Permission.NONE


def message_queues(
    topic: TopicConfig,
    broker_name: str,
    endpoints: pb.Endpoints,
    namespace: str = "",
    *,
    writable_broker: bool = True,
) -> list[pb.MessageQueue]:
    """One entry per queue id; producers use the writable ones, consumers the readable.

    A replica (``writable_broker`` False) lists its queues read-only: producers never
    pick them.
    """
    broker = pb.Broker(name=broker_name, id=0, endpoints=endpoints)
    resource = pb.Resource(name=topic.name, resource_namespace=namespace)
    return [
        pb.MessageQueue(
            topic=resource,
            id=queue_id,
            permission=_permission(topic, queue_id, writable_broker),
            broker=broker,
            accept_message_types=accepted_types(topic),
        )
        for queue_id in range(max(topic.read_queue_nums, topic.write_queue_nums))
    ]


def assignments(
    topic: TopicConfig,
    broker_name: str,
    endpoints: pb.Endpoints,
    namespace: str = "",
    *,
    writable_broker: bool = True,
) -> list[pb.Assignment]:
    """For push consumers: the whole broker (queue -1: any queue) or, for FIFO, each queue."""
    if not topic.readable or topic.read_queue_nums == 0:
        return []
    broker = pb.Broker(name=broker_name, id=0, endpoints=endpoints)
    resource = pb.Resource(name=topic.name, resource_namespace=namespace)
    if topic.message_type is MessageType.FIFO:
        queue_ids = list(range(topic.read_queue_nums))
    else:
        queue_ids = [-1]
    permission = (
        pb.Permission.READ_WRITE
        if writable_broker and topic.perm == Permission.READ_WRITE
        else pb.Permission.READ
    )
    return [
        pb.Assignment(
            message_queue=pb.MessageQueue(
                topic=resource,
                id=queue_id,
                permission=permission,
                broker=broker,
                accept_message_types=accepted_types(topic),
            )
        )
        for queue_id in queue_ids
    ]
