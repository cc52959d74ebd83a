"""What each RPC needs, from its path and its (decoded) request.

Messaging RPCs need what RocketMQ 5 asks of them: sends and transaction ends
Pub on the topic; receive, ack, invisible-time changes, dead-lettering, pull,
offsets and assignments Sub on both topic and group; a route query Pub, Sub or
Get on the topic; a consumer's heartbeat and termination Sub on its group.
A producer's heartbeat needs only a signed request; a Telemetry stream needs a
signed request to open, and each Settings it carries what it claims
(``telemetry_needs``): Pub on a producer's topics, Sub on a consumer's group and
topics. Claiming nothing gets nothing: the broker asks a session about a topic's
orphaned transactions only if its Settings named that topic and its user holds
``transaction_check_needs`` (Pub on the topic) when the check is sent.
Skiff's own services: Append Pub and Fetch Sub on the topic; admin topic changes
Create/Update/Delete on the topic, look-ups Get (List for the topic list, on
``Cluster``), consumer lag Get on topic and group; consumer groups List on
``Cluster`` for the list, Get on the group to describe, Update to reset its
offsets, Delete to delete it; promotion and the user/ACL
RPCs are for super users. An RPC not listed here is for super users too.

Invariant: ``needs_of`` is pure: the same path and request give the same needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from .decision import SUPER_ONLY, Need, need
from .model import Action, ResourceType

_TOPIC, _GROUP, _CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
_MESSAGING = "/apache.rocketmq.v2.MessagingService/"
_ADMIN = "/skiff.admin.v1.AdminService/"
_RECORDS = "/skiff.records.v1.RecordService/"


def _sub(group: str, topic: str) -> tuple[Need, ...]:
    return (need(_TOPIC, topic, Action.SUB), need(_GROUP, group, Action.SUB))


def _consumer_group(request: Any) -> tuple[Need, ...]:
    if not request.group.name or request.client_type == pb.ClientType.PRODUCER:
        return ()
    return (need(_GROUP, request.group.name, Action.SUB),)


def _send(request: Any) -> tuple[Need, ...]:
    topics = sorted({message.topic.name for message in request.messages})
    return tuple(need(_TOPIC, topic, Action.PUB) for topic in topics)


def _termination(request: Any) -> tuple[Need, ...]:
    return (need(_GROUP, request.group.name, Action.SUB),) if request.group.name else ()


_RULES: dict[str, Callable[[Any], tuple[Need, ...]]] = {
    # apache.rocketmq.v2
    _MESSAGING + "QueryRoute": lambda r: (
        need(_TOPIC, r.topic.name, Action.PUB, Action.SUB, Action.GET),
    ),
    _MESSAGING + "Heartbeat": _consumer_group,
    _MESSAGING + "NotifyClientTermination": _termination,
    _MESSAGING + "SendMessage": _send,
    _MESSAGING + "EndTransaction": lambda r: (need(_TOPIC, r.topic.name, Action.PUB),),
    _MESSAGING + "RecallMessage": lambda r: (need(_TOPIC, r.topic.name, Action.PUB),),
    _MESSAGING + "QueryAssignment": lambda r: _sub(r.group.name, r.topic.name),
    _MESSAGING + "ReceiveMessage": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    _MESSAGING + "AckMessage": lambda r: _sub(r.group.name, r.topic.name),
    _MESSAGING + "ChangeInvisibleDuration": lambda r: _sub(r.group.name, r.topic.name),
    _MESSAGING + "ForwardMessageToDeadLetterQueue": lambda r: _sub(r.group.name, r.topic.name),
    _MESSAGING + "PullMessage": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    _MESSAGING + "UpdateOffset": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    _MESSAGING + "GetOffset": lambda r: _sub(r.group.name, r.message_queue.topic.name),
    _MESSAGING + "QueryOffset": lambda r: (
        need(_TOPIC, r.message_queue.topic.name, Action.SUB, Action.GET),
    ),
    _MESSAGING + "SyncLiteSubscription": lambda r: _sub(r.group.name, r.topic.name),
    _MESSAGING + "Telemetry": lambda r: (),
    # skiff.records.v1
    _RECORDS + "Append": lambda r: (need(_TOPIC, r.topic, Action.PUB),),
    _RECORDS + "Fetch": lambda r: (need(_TOPIC, r.topic, Action.SUB),),
    # skiff.admin.v1
    _ADMIN + "CreateTopic": lambda r: (need(_TOPIC, r.topic.name, Action.CREATE),),
    _ADMIN + "UpdateTopic": lambda r: (need(_TOPIC, r.topic.name, Action.UPDATE),),
    _ADMIN + "DeleteTopic": lambda r: (need(_TOPIC, r.name, Action.DELETE),),
    _ADMIN + "GetTopic": lambda r: (need(_TOPIC, r.name, Action.GET),),
    _ADMIN + "ListTopics": lambda r: (need(_CLUSTER, "", Action.LIST),),
    _ADMIN + "GetBrokerInfo": lambda r: (need(_CLUSTER, "", Action.GET),),
    _ADMIN + "GetQueueOffsets": lambda r: (need(_TOPIC, r.topic, Action.GET),),
    _ADMIN + "GetConsumerLag": lambda r: (
        need(_TOPIC, r.topic, Action.GET),
        need(_GROUP, r.group, Action.GET),
    ),
    _ADMIN + "ListConsumerGroups": lambda r: (need(_CLUSTER, "", Action.LIST),),
    _ADMIN + "DescribeConsumerGroup": lambda r: (need(_GROUP, r.group, Action.GET),),
    _ADMIN + "ResetConsumerGroupOffsets": lambda r: (need(_GROUP, r.group, Action.UPDATE),),
    _ADMIN + "DeleteConsumerGroup": lambda r: (need(_GROUP, r.group, Action.DELETE),),
    _ADMIN + "LookupMessage": lambda r: (need(_TOPIC, r.topic, Action.GET),),
    _ADMIN + "QueryMessagesByKey": lambda r: (need(_TOPIC, r.topic, Action.GET),),
    _ADMIN + "GetOffsetByTime": lambda r: (need(_TOPIC, r.topic, Action.GET),),
}


def telemetry_needs(command: Any) -> tuple[Need, ...]:
    """What one TelemetryCommand claims: its Settings' topics and group; else nothing."""
    if not command.HasField("settings"):
        return ()
    settings = command.settings
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        topics = sorted({t.name for t in settings.publishing.topics})
        return tuple(need(_TOPIC, topic, Action.PUB) for topic in topics)
    if kind == "subscription":
        subscription = settings.subscription
        topics = sorted({e.topic.name for e in subscription.subscriptions})
        return (
            need(_GROUP, subscription.group.name, Action.SUB),
            *(need(_TOPIC, topic, Action.SUB) for topic in topics),
        )
    return ()


def transaction_check_needs(topic: str) -> tuple[Need, ...]:
    """What a producer's session must hold to be sent ``topic``'s transaction checks:
    Pub on it, as ending the transaction needs (the check carries the message)."""
    return (need(_TOPIC, topic, Action.PUB),)


def needs_of(method: str, request: Any) -> tuple[Need, ...]:
    """What calling ``method`` (its full gRPC path) with ``request`` needs."""
    rule = _RULES.get(method)
    if rule is None:
        return SUPER_ONLY
    return rule(request)
