"""4.x consumers: heartbeats and group membership, PULL_MESSAGE, and group offsets.

Offsets are the group offsets the gRPC side keeps (``PopService.consumer_offset`` and
``reset_offset``, persisted in consumerOffset.json): a group that commits over one door
resumes there over the other.

Invariants:
- A pull answers with whole commit-log records as the log holds them (RocketMQ's pull
  body), so a message reads back with the ID, properties and offsets it was stored with.
- A pull with the suspend flag that finds nothing written yet waits (long polling, the
  same ``ArrivalHub`` as the gRPC door) at most its suspend time and the broker's
  long-polling maximum, then answers PULL_NOT_FOUND.
- A group's members are the clients whose latest heartbeat named it over a connection
  still open; a connection that closes takes its clients out of every group. When a
  member joins, every member (the joining one too) is told at once
  (NOTIFY_CONSUMER_IDS_CHANGED, oneway); when one leaves, the others are: they
  rebalance without waiting for their next periodic rebalance.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import Callable

from ..delivery.long_polling import ArrivalHub
from ..delivery.tag_filter import TagFilter
from ..filter.subscription import sql92_filter
from ..metadata.topic_table import TopicConfig
from ..runtime import Broker
from ..store.message import StoredMessage
from ..store.results import NOT_WRITTEN_YET, GetResult, GetStatus, RecordsResult
from ..wire.resource_names import group_name_problem
from .codes import PullSysFlag, RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import ONEWAY_FLAG, RemotingCommand
from .heartbeat_limits import Registration, consumer_problem
from .name_server import json_body
from .redelivery import RETRY_QUEUES, retry_topic
from .service import HeaderError, Refused, int_field, text_field

_MAX_PULL_MESSAGES = 1024
_MAX_PULL_BYTES = 4 * 1024 * 1024


@dataclasses.dataclass(slots=True)
class Subscription:
    expression_type: str
    expression: str


@dataclasses.dataclass(slots=True)
class ConsumerClient:
    client_id: str
    connection: RemotingConnection
    subscriptions: dict[str, Subscription]
    # What the heartbeat said of the client (language, version; consumeType,
    # messageModel, consumeFromWhere): mqadmin's consumerConnection shows them.
    language: str = ""
    version: int = 0
    details: dict[str, str] = dataclasses.field(default_factory=dict)


class MessageFilterError(ValueError):
    pass


def message_filter(
    expression_type: str, expression: str
) -> tuple[set[int] | None, Callable[[StoredMessage], bool] | None]:
    """(tag codes, exact check) of a subscription; MessageFilterError if it does not parse."""
    try:
        if expression_type.upper() == "SQL92":
            compiled = sql92_filter(expression)
            return compiled.tag_codes, compiled.accept
        if expression_type.upper() not in ("", "TAG"):
            raise MessageFilterError(
                f"expression type {expression_type!r} is unknown; use TAG or SQL92"
            )
        tags = TagFilter.parse(expression)
        return tags.tag_codes, tags.accept
    except ValueError as exc:
        raise MessageFilterError(str(exc)) from None


def _group(request: RemotingCommand, name: str = "consumerGroup") -> str:
    group = text_field(request, name)
    problem = group_name_problem(group)
    if problem is not None:
        raise HeaderError(problem)
    return group


class Consuming:
    def __init__(self, broker: Broker, hub: ArrivalHub) -> None:
        self._broker = broker
        self._hub = hub
        # group -> client id -> the client's latest heartbeat.
        self._groups: dict[str, dict[str, ConsumerClient]] = {}
        # What each connection registered (bounded: heartbeat_limits.py), to its
        # registrations' subscription counts.
        self._by_connection: dict[RemotingConnection, dict[Registration, int]] = {}
        # Opaques of the broker's own requests to clients.
        self._opaques = itertools.count(1)

    def handlers(self) -> dict:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
        }

    # -- membership ---------------------------------------------------------

    async def heartbeat(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        clustering: list[str] = []
        try:
            data = json.loads(request.body or b"{}")
            client_id = str(data.get("clientID", ""))
            consumers = data.get("consumerDataSet") or []
            if not isinstance(consumers, list):
                raise ValueError("consumerDataSet must be a list")
            seen: dict[str, dict[str, Subscription]] = {}
            details: dict[str, dict[str, str]] = {}
            for consumer in consumers:
                group = str(consumer["groupName"])
                subscriptions = {}
                for sub in consumer.get("subscriptionDataSet") or []:
                    subscriptions[str(sub["topic"])] = Subscription(
                        str(sub.get("expressionType") or "TAG"), str(sub.get("subString") or "*")
                    )
                seen[group] = subscriptions
                details[group] = {
                    name: str(consumer[name])
                    for name in ("consumeType", "messageModel", "consumeFromWhere")
                    if consumer.get(name) is not None
                }
                if str(consumer.get("messageModel") or "CLUSTERING") == "CLUSTERING":
                    clustering.append(group)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the heartbeat body is not RocketMQ's HeartbeatData: {exc}",
            )
        if not client_id and seen:
            return request.response(ResponseCode.SYSTEM_ERROR, "the heartbeat needs a clientID")
        registered = self._by_connection.setdefault(connection, {})
        problem = consumer_problem(
            registered,
            client_id,
            {g: [s.expression for s in subs.values()] for g, subs in seen.items()},
        )
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        for group, subscriptions in seen.items():
            members = self._groups.setdefault(group, {})
            known = members.get(client_id)
            if known is not None and known.connection is not connection:
                self._by_connection.get(known.connection, {}).pop((group, client_id), None)
            registered[(group, client_id)] = len(subscriptions)
            members[client_id] = ConsumerClient(
                client_id,
                connection,
                subscriptions,
                request.language,
                request.version,
                details[group],
            )
            if known is None or known.connection is not connection:
                # The joining client too, as RocketMQ's broker tells every member: its
                # first rebalance may have asked for the members before this heartbeat
                # arrived (the 4.x client's start and its periodic heartbeat race), and
                # without a word now it would wait for its next periodic one (20 s).
                self._notify_changed(group)
        # As RocketMQ's broker: a clustering group's retry topic exists from its first
        # heartbeat, so its consumers find a route for it (they subscribe to it themselves).
        missing = [g for g in clustering if self._broker.topics.get(retry_topic(g)) is None]
        for group in missing:
            if group_name_problem(group) is None and not self._broker.is_replica:
                # Creating it writes topics.json: not on the event loop.
                await asyncio.to_thread(
                    self._broker.ensure_system_topic, retry_topic(group), RETRY_QUEUES
                )
        return request.response(ResponseCode.SUCCESS)

    def members(self, group: str) -> list[ConsumerClient]:
        """The group's clients online now (their connection still open)."""
        return [m for m in self._groups.get(group, {}).values() if not m.connection.closed]

    def tell_members(self, group: str, request: RemotingCommand) -> int:
        """Send a oneway ``request`` to every online member of ``group``; how many got it."""
        told = 0
        for member in self.members(group):
            member.connection.send(
                dataclasses.replace(request, opaque=next(self._opaques), flag=ONEWAY_FLAG)
            )
            told += 1
        return told

    def _notify_changed(self, group: str) -> None:
        """Tell the group's members to rebalance now."""
        for member in self._groups.get(group, {}).values():
            if not member.connection.closed:
                member.connection.send(
                    RemotingCommand(
                        code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                        opaque=next(self._opaques),
                        flag=ONEWAY_FLAG,
                        ext_fields={"consumerGroup": group},
                    )
                )

    def unregister(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        client_id = request.ext_fields.get("clientID", "")
        group = request.ext_fields.get("consumerGroup", "")
        members = self._groups.get(group)
        gone = members.pop(client_id, None) if members is not None else None
        if members is not None and gone is not None:
            self._by_connection.get(gone.connection, {}).pop((group, client_id), None)
            if members:
                self._notify_changed(group)
            else:
                del self._groups[group]
        return request.response(ResponseCode.SUCCESS)

    def connection_closed(self, connection: RemotingConnection) -> None:
        self._by_connection.pop(connection, None)
        for group in list(self._groups):
            members = self._groups[group]
            gone = [c for c, m in members.items() if m.connection is connection]
            for client_id in gone:
                del members[client_id]
            if not members:
                del self._groups[group]
            elif gone:
                self._notify_changed(group)

    def consumer_list(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(request)
        members = self._groups.get(group)
        if not members:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} is connected"
            )
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body({"consumerIdList": sorted(members)})
        return response

    def check_client_config(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        try:
            data = json.loads(request.body or b"{}")
            sub = data.get("subscriptionData") or {}
            message_filter(
                str(sub.get("expressionType") or "TAG"), str(sub.get("subString") or "*")
            )
        except (ValueError, AttributeError) as exc:
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return request.response(ResponseCode.SUCCESS)

    # -- queues -------------------------------------------------------------

    def _readable_queue(self, request: RemotingCommand) -> tuple[TopicConfig, int]:
        name = text_field(request, "topic")
        topic = self._broker.topics.get(name)
        if topic is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST, f"topic {name} does not exist")
        queue_id = int_field(request, "queueId")
        if not 0 <= queue_id < max(topic.read_queue_nums, topic.write_queue_nums):
            raise Refused(
                ResponseCode.SYSTEM_ERROR,
                f"queueId {queue_id} is illegal: topic {name} has {topic.read_queue_nums} "
                "read queues; refresh the route",
            )
        return topic, queue_id

    def max_offset(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        return self._answering(request, lambda t, q: self._broker.store.max_offset(t, q))

    def min_offset(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        return self._answering(request, lambda t, q: self._broker.store.min_offset(t, q))

    def _answering(
        self, request: RemotingCommand, offset: Callable[[str, int], int]
    ) -> RemotingCommand:
        topic, queue_id = self._readable_queue(request)
        response = request.response(ResponseCode.SUCCESS)
        response.ext_fields["offset"] = str(offset(topic.name, queue_id))
        return response

    def query_offset(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(request)
        topic, queue_id = self._readable_queue(request)
        offset = self._broker.pop.consumer_offset(group, topic.name, queue_id)
        if offset < 0:
            # As RocketMQ's broker: a group new to a queue that still holds its first
            # message starts there; otherwise the client applies its consumeFromWhere.
            if self._broker.store.min_offset(topic.name, queue_id) > 0:
                return request.response(
                    ResponseCode.QUERY_NOT_FOUND, f"group {group} has no offset here yet"
                )
            offset = 0
        response = request.response(ResponseCode.SUCCESS)
        response.ext_fields["offset"] = str(offset)
        return response

    def update_offset(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(request)
        topic, queue_id = self._readable_queue(request)
        offset = int_field(request, "commitOffset")
        if offset < 0:
            return request.response(ResponseCode.SYSTEM_ERROR, "commitOffset cannot be negative")
        self._broker.pop.reset_offset(group, topic.name, queue_id, offset)
        return request.response(ResponseCode.SUCCESS)

    # -- pulls --------------------------------------------------------------

    async def pull(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(request)
        refusal = self._group_refusal(group)
        if refusal is not None:
            return request.response(ResponseCode.NO_PERMISSION, refusal)
        topic, queue_id = self._readable_queue(request)
        offset = int_field(request, "queueOffset")
        max_count = int_field(request, "maxMsgNums")
        max_count = min(max(max_count, 1), _MAX_PULL_MESSAGES)
        sys_flag = PullSysFlag(int_field(request, "sysFlag", 0) & 0x1F)
        subscription: Subscription | None
        if PullSysFlag.SUBSCRIPTION in sys_flag:
            subscription = Subscription(
                request.ext_fields.get("expressionType") or "TAG",
                request.ext_fields.get("subscription") or "*",
            )
        else:
            subscription = self._registered(group, topic.name)
            if subscription is None:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"group {group} has no subscription to {topic.name}: its consumer must "
                    "send a heartbeat first",
                )
        try:
            tag_codes, accept = message_filter(
                subscription.expression_type, subscription.expression
            )
        except MessageFilterError as exc:
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        commit = int_field(request, "commitOffset", -1)
        if PullSysFlag.COMMIT_OFFSET in sys_flag and commit >= 0 and not self._broker.is_replica:
            self._broker.pop.reset_offset(group, topic.name, queue_id, commit)
        store = self._broker.store
        config = self._broker.config

        def read():
            if accept is None or subscription.expression_type.upper() != "SQL92":
                # Tag hashes in the consume queue; the client checks the tags themselves.
                return store.get_records(
                    topic.name,
                    queue_id,
                    offset,
                    max_count,
                    max_bytes=_MAX_PULL_BYTES,
                    tag_codes=tag_codes,
                )
            return store.get_messages(
                topic.name,
                queue_id,
                offset,
                max_count,
                max_bytes=_MAX_PULL_BYTES,
                tag_codes=tag_codes,
                accept=accept,
            )

        if PullSysFlag.SUSPEND in sys_flag:
            suspend_ms = min(
                int_field(request, "suspendTimeoutMillis", 0), config.max_long_polling_ms
            )
            got = await self._hub.poll(topic.name, suspend_ms / 1000, read, _nothing_yet)
        else:
            got = read()
        if got.status is GetStatus.FOUND:
            code = ResponseCode.SUCCESS
        elif got.status is GetStatus.NO_MATCHED_MESSAGE:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif _nothing_yet(got):
            code = ResponseCode.PULL_NOT_FOUND
        elif got.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            code = ResponseCode.PULL_OFFSET_MOVED
        else:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        response = request.response(code)
        response.ext_fields.update(
            suggestWhichBrokerId="0",
            nextBeginOffset=str(got.next_offset),
            minOffset=str(got.min_offset),
            maxOffset=str(got.max_offset),
        )
        if code == ResponseCode.SUCCESS:
            if isinstance(got, RecordsResult):
                response.body = got.data
            else:
                response.body = b"".join(
                    store.commit_log.read(m.physical_offset, m.store_size) or b""
                    for m in got.messages
                )
        return response

    def _group_refusal(self, group: str) -> str | None:
        """Why the group's settings (``updateSubGroup``) forbid it to pull now, in
        RocketMQ's words and what to do; None if they allow it."""
        settings = self._broker.group_settings
        if settings.setting(group, "consumeEnable") is False:
            return (
                f"subscription group no permission, {group}: its consumeEnable is false; "
                f"set it with updateSubGroup -g {group} -s true"
            )
        if settings.setting(group, "consumeBroadcastEnable") is False and any(
            m.details.get("messageModel") == "BROADCASTING" for m in self.members(group)
        ):
            return (
                f"the consumer group[{group}] can not consume by broadcast way: its "
                f"consumeBroadcastEnable is false; set it with updateSubGroup -g {group} -d true"
            )
        return None

    def _registered(self, group: str, topic: str) -> Subscription | None:
        for member in self._groups.get(group, {}).values():
            found = member.subscriptions.get(topic)
            if found is not None:
                return found
        return None


def _nothing_yet(got: GetResult | RecordsResult) -> bool:
    """Nothing written at or after the offset yet: worth waiting for, and PULL_NOT_FOUND.

    A queue no message ever reached has no consume queue at all: the same wait, not a
    reason to pull again at once (the answer's next offset, 0, is where to pull next).
    """
    return got.status in NOT_WRITTEN_YET or got.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
