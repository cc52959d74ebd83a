"""What each remoting request needs, from its code, header fields and (for a few) body.

RocketMQ 5's rules for its remoting door, on Skiff's ACL model (auth/decision.py):

* a route: Pub, Sub or Get on the topic (a retry topic: Sub or Get on its group);
* a send: Pub on the topic (to a retry topic: Sub on its group), a transaction end Pub
  on its topic, a send-back Sub on the group;
* a pull: Sub on the topic and the group (a retry topic: the group only); pop, ack and
  invisible-time changes the same; offset queries Sub or Get, offset commits Sub or
  Update, on the topic and the group; reading a queue's offsets or a message by id or
  key Sub or Get on the topic (RocketMQ asks Get; Sub is accepted as the gRPC door's
  QueryOffset accepts it, so a consumer that may read a topic may see where it ends);
* a consumer's heartbeat Sub on each group it names and each topic it subscribes; a
  group's member list Sub or Get on the group; locking queues Sub on the group and
  their topics; a consumer's unregistering and client-config check Sub on its group;
* a producer's heartbeat, unregistering and the cluster's broker list need a signed
  request only (they read nothing of a topic or group); the topic list List on the
  cluster.

Admin requests need what RocketMQ's request headers name (creating a topic Create on
it, deleting Delete, reading its config or stats Get; a group's config, connections,
running info and topics Get on the group, its consume stats Get on the group and
topics, an offset reset Update on both; creating or changing a group Create or Update
on it); listings and the broker's figures List or Get on the cluster.

Any other code is for super users: a code without a rule here is never open to a
normal user by mistake (deny by default), whatever handlers are added later.

Invariant: ``needs_of`` is pure; a body it must read but cannot raises HeaderError,
and the request is refused without reaching its handler.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from ..auth.decision import SUPER_ONLY, Need, need
from ..auth.model import Action, ResourceType
from .codes import RequestCode
from .frames import RemotingCommand
from .service import HeaderError

_TOPIC, _GROUP, _CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
_PUB, _SUB, _GET, _UPDATE, _LIST = Action.PUB, Action.SUB, Action.GET, Action.UPDATE, Action.LIST
RETRY_PREFIX = "%RETRY%"


def _is_retry(topic: str) -> bool:
    return topic.startswith(RETRY_PREFIX)


def _group_of_retry(topic: str) -> str:
    return topic[len(RETRY_PREFIX) :]


def _field(request: RemotingCommand, name: str) -> str:
    return request.ext_fields.get(name) or ""


def _topic_and_group(
    request: RemotingCommand, topic_field: str, group_field: str, *actions: Action
) -> tuple[Need, ...]:
    """The topic (unless a retry topic, which its group covers) and the group."""
    topic = _field(request, topic_field)
    wanted: list[Need] = []
    if not _is_retry(topic):
        wanted.append(need(_TOPIC, topic, *actions))
    wanted.append(need(_GROUP, _field(request, group_field), *actions))
    return tuple(wanted)


def _route(request: RemotingCommand) -> tuple[Need, ...]:
    topic = _field(request, "topic")
    if _is_retry(topic):
        return (need(_GROUP, _group_of_retry(topic), _SUB, _GET),)
    return (need(_TOPIC, topic, _PUB, _SUB, _GET),)


def _send(topic_field: str) -> Callable[[RemotingCommand], tuple[Need, ...]]:
    def rule(request: RemotingCommand) -> tuple[Need, ...]:
        topic = _field(request, topic_field)
        if _is_retry(topic):
            # Sub on the group whose retry topic it writes (RocketMQ names the sender's
            # group when one is given; the group written to is the one that matters).
            return (need(_GROUP, _group_of_retry(topic), _SUB),)
        return (need(_TOPIC, topic, _PUB),)

    return rule


def _topic_read(request: RemotingCommand) -> tuple[Need, ...]:
    topic = _field(request, "topic")
    if _is_retry(topic):
        return (need(_GROUP, _group_of_retry(topic), _SUB, _GET),)
    return (need(_TOPIC, topic, _SUB, _GET),)


def _body(request: RemotingCommand, what: str) -> dict[str, Any]:
    try:
        data = json.loads(request.body or b"{}")
    except ValueError as exc:
        raise HeaderError(f"the request body is not RocketMQ's {what}: {exc}") from None
    if not isinstance(data, dict):
        raise HeaderError(f"the request body is not RocketMQ's {what}: not an object")
    return data


def _items(value: Any, what: str) -> Iterable[dict[str, Any]]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise HeaderError(f"the request body is not RocketMQ's {what}: a list of objects")
    return value


def _heartbeat(request: RemotingCommand) -> tuple[Need, ...]:
    data = _body(request, "HeartbeatData")
    wanted: list[Need] = []
    for consumer in _items(data.get("consumerDataSet"), "HeartbeatData"):
        wanted.append(need(_GROUP, str(consumer.get("groupName") or ""), _SUB))
        for subscription in _items(consumer.get("subscriptionDataSet"), "HeartbeatData"):
            topic = str(subscription.get("topic") or "")
            if not _is_retry(topic):
                wanted.append(need(_TOPIC, topic, _SUB))
    return tuple(dict.fromkeys(wanted))


def _locking(request: RemotingCommand) -> tuple[Need, ...]:
    data = _body(request, "LockBatchRequestBody")
    wanted = [need(_GROUP, str(data.get("consumerGroup") or ""), _SUB)]
    for queue in _items(data.get("mqSet"), "LockBatchRequestBody"):
        topic = str(queue.get("topic") or "")
        if not _is_retry(topic):
            wanted.append(need(_TOPIC, topic, _SUB))
    return tuple(dict.fromkeys(wanted))


def _batch_ack(request: RemotingCommand) -> tuple[Need, ...]:
    """Sub on every topic and group the batch settles (RocketMQ's short or long names)."""
    data = _body(request, "BatchAckMessageRequestBody")
    wanted: list[Need] = []
    for ack in _items(data.get("acks"), "BatchAckMessageRequestBody"):
        topic = str(ack.get("t", ack.get("topic")) or "")
        if not _is_retry(topic):
            wanted.append(need(_TOPIC, topic, _SUB))
        wanted.append(need(_GROUP, str(ack.get("c", ack.get("consumerGroup")) or ""), _SUB))
    return tuple(dict.fromkeys(wanted))


def _assignment(request: RemotingCommand) -> tuple[Need, ...]:
    data = _body(request, "QueryAssignmentRequestBody")
    topic = str(data.get("topic") or "")
    group = str(data.get("consumerGroup") or "")
    if _is_retry(topic):
        return (need(_GROUP, group, _SUB),)
    return (need(_TOPIC, topic, _SUB), need(_GROUP, group, _SUB))


def _client_config(request: RemotingCommand) -> tuple[Need, ...]:
    data = _body(request, "CheckClientRequestBody")
    return (need(_GROUP, str(data.get("group") or ""), _SUB),)


def _unregister(request: RemotingCommand) -> tuple[Need, ...]:
    group = _field(request, "consumerGroup")
    return (need(_GROUP, group, _SUB),) if group else ()


def _end_transaction(request: RemotingCommand) -> tuple[Need, ...]:
    topic = _field(request, "topic")
    return (need(_TOPIC, topic, _PUB),) if topic else ()


def _signed_only(request: RemotingCommand) -> tuple[Need, ...]:
    return ()


def _on(
    resource_type: ResourceType, field: str, *actions: Action
) -> Callable[[RemotingCommand], tuple[Need, ...]]:
    """``actions`` on the topic or group a header field names."""

    def rule(request: RemotingCommand) -> tuple[Need, ...]:
        name = _field(request, field)
        if resource_type is _TOPIC and _is_retry(name):
            return (need(_GROUP, _group_of_retry(name), *actions),)
        return (need(resource_type, name, *actions),)

    return rule


def _on_both(
    group_field: str, topic_field: str, *actions: Action
) -> Callable[[RemotingCommand], tuple[Need, ...]]:
    """``actions`` on the group and, when the header names one, the topic."""

    def rule(request: RemotingCommand) -> tuple[Need, ...]:
        wanted = [need(_GROUP, _field(request, group_field), *actions)]
        if _field(request, topic_field):
            wanted.extend(_on(_TOPIC, topic_field, *actions)(request))
        return tuple(wanted)

    return rule


def _consume_stats(request: RemotingCommand) -> tuple[Need, ...]:
    # A topic list (";"-separated) stands for the single topic when given.
    topics = [t for t in _field(request, "topicList").split(";") if t]
    if not topics and _field(request, "topic"):
        topics = [_field(request, "topic")]
    wanted = [need(_GROUP, _field(request, "consumerGroup"), _GET)]
    wanted.extend(need(_TOPIC, topic, _GET) for topic in topics)
    return tuple(dict.fromkeys(wanted))


def _group_config(request: RemotingCommand) -> tuple[Need, ...]:
    data = _body(request, "SubscriptionGroupConfig")
    return (need(_GROUP, str(data.get("groupName") or ""), Action.CREATE, _UPDATE),)


_RULES: dict[int, Callable[[RemotingCommand], tuple[Need, ...]]] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: _route,
    RequestCode.GET_BROKER_CLUSTER_INFO: _signed_only,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: lambda r: (need(_CLUSTER, "", _LIST),),
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: lambda r: (need(_CLUSTER, "", _LIST),),
    RequestCode.SEND_MESSAGE: _send("topic"),
    # V2 and batch headers carry one-letter names: b is the topic.
    RequestCode.SEND_MESSAGE_V2: _send("b"),
    RequestCode.SEND_BATCH_MESSAGE: _send("b"),
    RequestCode.END_TRANSACTION: _end_transaction,
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda r: (need(_GROUP, _field(r, "group"), _SUB),),
    RequestCode.PULL_MESSAGE: lambda r: _topic_and_group(r, "topic", "consumerGroup", _SUB),
    RequestCode.POP_MESSAGE: lambda r: _topic_and_group(r, "topic", "consumerGroup", _SUB),
    RequestCode.ACK_MESSAGE: lambda r: _topic_and_group(r, "topic", "consumerGroup", _SUB),
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: lambda r: _topic_and_group(
        r, "topic", "consumerGroup", _SUB
    ),
    RequestCode.BATCH_ACK_MESSAGE: _batch_ack,
    RequestCode.QUERY_ASSIGNMENT: _assignment,
    RequestCode.NOTIFICATION: lambda r: _topic_and_group(r, "topic", "consumerGroup", _SUB),
    RequestCode.POLLING_INFO: lambda r: _topic_and_group(r, "topic", "consumerGroup", _SUB),
    RequestCode.QUERY_CONSUMER_OFFSET: lambda r: _topic_and_group(
        r, "topic", "consumerGroup", _SUB, _GET
    ),
    RequestCode.UPDATE_CONSUMER_OFFSET: lambda r: _topic_and_group(
        r, "topic", "consumerGroup", _SUB, _UPDATE
    ),
    RequestCode.GET_MAX_OFFSET: _topic_read,
    RequestCode.GET_MIN_OFFSET: _topic_read,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _topic_read,
    RequestCode.GET_EARLIEST_MSG_STORETIME: _topic_read,
    RequestCode.VIEW_MESSAGE_BY_ID: _topic_read,
    RequestCode.QUERY_MESSAGE: _topic_read,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _unregister,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda r: (
        need(_GROUP, _field(r, "consumerGroup"), _SUB, _GET),
    ),
    RequestCode.LOCK_BATCH_MQ: _locking,
    RequestCode.UNLOCK_BATCH_MQ: _locking,
    RequestCode.CHECK_CLIENT_CONFIG: _client_config,
    # Admin requests: RocketMQ's resource and action where its headers name them. A
    # listing or the broker's own figures need List or Get on Cluster, as the admin API's
    # counterparts do; anything not here (broker config, name-server writes, user and ACL
    # changes) is for super users.
    RequestCode.UPDATE_AND_CREATE_TOPIC: _on(_TOPIC, "topic", Action.CREATE),
    RequestCode.DELETE_TOPIC_IN_BROKER: _on(_TOPIC, "topic", Action.DELETE),
    RequestCode.DELETE_TOPIC_IN_NAMESRV: _on(_TOPIC, "topic", Action.DELETE),
    RequestCode.GET_TOPIC_CONFIG: _on(_TOPIC, "topic", _GET),
    RequestCode.GET_TOPIC_STATS_INFO: _on(_TOPIC, "topic", _GET),
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: _on(_TOPIC, "topic", _GET),
    RequestCode.GET_ALL_TOPIC_CONFIG: lambda r: (need(_CLUSTER, "", _LIST),),
    RequestCode.GET_TOPICS_BY_CLUSTER: lambda r: (need(_CLUSTER, "", _LIST),),
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: lambda r: (need(_CLUSTER, "", _LIST),),
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: lambda r: (need(_CLUSTER, "", _LIST),),
    RequestCode.GET_BROKER_RUNTIME_INFO: lambda r: (need(_CLUSTER, "", _GET),),
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _group_config,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: _on(_GROUP, "groupName", Action.DELETE),
    RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: _on(_GROUP, "group", _GET),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _on(_GROUP, "consumerGroup", _GET),
    RequestCode.GET_PRODUCER_CONNECTION_LIST: _on(_GROUP, "producerGroup", _GET),
    RequestCode.GET_CONSUMER_RUNNING_INFO: _on(_GROUP, "consumerGroup", _GET),
    # It has a consumer take a message: Sub on the group and the topic, as consuming.
    RequestCode.CONSUME_MESSAGE_DIRECTLY: lambda r: _topic_and_group(
        r, "topic", "consumerGroup", _SUB
    ),
    RequestCode.QUERY_TOPICS_BY_CONSUMER: _on(_GROUP, "group", _GET),
    RequestCode.GET_CONSUME_STATS: _consume_stats,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: _on_both("group", "topic", _UPDATE),
    RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: _on_both("group", "topic", _GET),
    RequestCode.QUERY_CONSUME_TIME_SPAN: _on_both("group", "topic", _GET),
    RequestCode.QUERY_SUBSCRIPTION_BY_CONSUMER: _on_both("group", "topic", _GET),
}


def needs_of(request: RemotingCommand) -> tuple[Need, ...]:
    """What ``request`` needs; SUPER_ONLY for a code without a rule."""
    rule = _RULES.get(request.code)
    if rule is None:
        return SUPER_ONLY
    return rule(request)
