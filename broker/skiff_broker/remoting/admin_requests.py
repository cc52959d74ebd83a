"""The admin requests mqadmin makes of a broker: topics, groups, progress, resets, status.

They are answered from the same admin pieces as the gRPC admin service (``TopicAdmin``,
``ConsumerProgress``), so a topic created with mqadmin is the topic ``skiff topic``
lists, and a reset moves the offsets both doors read.

Invariants:
- Bodies are JSON as RocketMQ's fastjson writes them: fields by name, and maps keyed by
  a ``MessageQueue`` written with the queue object itself as the key.
- Handlers that wait for the dispatcher or write state files run in a worker thread,
  never on the event loop.
- Admin refusals (a system topic, a shrink that strands messages) are answered with
  the admin pieces' sentences, which say what to do.
- A reset moves the group's stored offsets, then tells every online 4.x member
  (RESET_CONSUMER_CLIENT_OFFSET) so it does not write its old positions back.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..admin.consumer_progress import ConsumerProgress
from ..admin.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from ..admin.topic_admin import TopicAdmin, TopicChange
from ..metadata.topic_table import MessageType, Permission, TopicConfig
from ..runtime import Broker
from ..wire import property_names as prop
from ..wire.resource_names import group_name_problem
from .admin_views import topic_config_document
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .consuming import Consuming
from .frames import RemotingCommand
from .name_server import json_body
from .service import Handler, HeaderError, int_field, text_field
from .traffic_rates import WINDOWS_S, TrafficRates

_ADMIN_ERRORS = (AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, ValueError)
_STARTED_MS = int(time.time() * 1000)


def queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    """A MessageQueue as fastjson writes it when it is a map key (fields sorted)."""
    return json.dumps(
        {"brokerName": broker_name, "queueId": queue_id, "topic": topic}, separators=(",", ":")
    )


def queue_map(entries: list[tuple[str, Any]]) -> str:
    """A fastjson map whose keys are MessageQueue objects: ``{{...}:value,...}``."""
    return "{" + ",".join(f"{key}:{json.dumps(value)}" for key, value in entries) + "}"


def _group(name: str) -> str:
    problem = group_name_problem(name)
    if problem is not None:
        raise HeaderError(problem)
    return name


def _message_type(attributes: str) -> MessageType | None:
    """``+message.type=FIFO`` in the attributes RocketMQ's updateTopic sends, if any."""
    for item in attributes.split(","):
        name, _, value = item.strip().lstrip("+").partition("=")
        if name == "message.type" and value:
            try:
                return MessageType(value.upper())
            except ValueError:
                raise HeaderError(
                    f"message.type {value!r} is unknown; use NORMAL, FIFO, DELAY or TRANSACTION"
                ) from None
    return None


class AdminRequests:
    def __init__(self, broker: Broker, consuming: Consuming, rates: TrafficRates) -> None:
        self._broker = broker
        self._consuming = consuming
        self._rates = rates
        self._topics = TopicAdmin(broker)
        self._progress = ConsumerProgress(broker)

    @property
    def _broker_name(self) -> str:
        return self._broker.config.broker_name

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_name_server,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_TOPIC_CONFIG: self.topic_config,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.topic_consumers,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
        }

    async def _admin(
        self, request: RemotingCommand, work: Callable[[], RemotingCommand]
    ) -> RemotingCommand:
        try:
            return await asyncio.to_thread(work)
        except NotFound as exc:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, str(exc))
        except _ADMIN_ERRORS as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))

    def _store_time_before(self, topic: str, queue_id: int, offset: int) -> int:
        """When the queue's last message below ``offset`` was stored (0: there is none)."""
        store = self._broker.store
        queue = store.consume_queues.get(topic, queue_id)
        unit = queue.real_unit_before(offset) if queue is not None else None
        if unit is None:
            return 0
        return max(0, store.commit_log.store_timestamp_at(unit[0]))

    # -- topics -------------------------------------------------------------

    async def update_topic(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        name = text_field(request, "topic")
        reads = int_field(request, "readQueueNums", 8)
        writes = int_field(request, "writeQueueNums", 8)
        perm = int_field(request, "perm", int(Permission.READ_WRITE))
        message_type = _message_type(request.ext_fields.get("attributes") or "")
        if perm & ~int(Permission.READ_WRITE | Permission.INHERIT):
            raise HeaderError(f"perm {perm} is not a RocketMQ permission (2 write, 4 read, 6 both)")

        def work() -> RemotingCommand:
            if self._broker.topics.get(name) is None:
                self._topics.create(
                    TopicConfig(
                        name,
                        reads,
                        writes,
                        Permission(perm & int(Permission.READ_WRITE)),
                        message_type or MessageType.NORMAL,
                    )
                )
            else:
                self._topics.update(
                    name,
                    TopicChange(
                        reads, writes, Permission(perm & int(Permission.READ_WRITE)), message_type
                    ),
                )
            return request.response(ResponseCode.SUCCESS)

        return await self._admin(request, work)

    async def delete_topic(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        name = text_field(request, "topic")

        def work() -> RemotingCommand:
            # Deleting a topic that is gone already succeeds, as RocketMQ's broker does.
            if self._broker.topics.get(name) is not None or name in prop.INTERNAL_TOPICS:
                self._topics.delete(name)
            return request.response(ResponseCode.SUCCESS)

        return await self._admin(request, work)

    def delete_topic_in_name_server(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        # The broker is its own name server: its route left with the topic's config.
        text_field(request, "topic")
        return request.response(ResponseCode.SUCCESS)

    def topic_config(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        name = text_field(request, "topic")
        topic = None if name in prop.INTERNAL_TOPICS else self._broker.topics.get(name)
        if topic is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic in this broker. topic: {name}; list topics with mqadmin topicList",
            )
        response = request.response(ResponseCode.SUCCESS)
        # RocketMQ's TopicConfigAndQueueMapping; Skiff has no static queue mappings.
        response.body = json_body(topic_config_document(topic))
        return response

    async def topic_stats(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        name = text_field(request, "topic")

        def work() -> RemotingCommand:
            topic = self._broker.topics.get(name)
            if topic is None or name in prop.INTERNAL_TOPICS:
                raise NotFound(f"topic {name} does not exist; list topics with mqadmin topicList")
            self._progress.refresh()
            store = self._broker.store
            entries = [
                (
                    queue_key(name, self._broker_name, queue_id),
                    {
                        "lastUpdateTimestamp": self._store_time_before(
                            name, queue_id, store.max_offset(name, queue_id)
                        ),
                        "maxOffset": store.max_offset(name, queue_id),
                        "minOffset": store.min_offset(name, queue_id),
                    },
                )
                for queue_id in range(max(topic.read_queue_nums, topic.write_queue_nums))
            ]
            response = request.response(ResponseCode.SUCCESS)
            tps = self._rates.topic_put(name)
            response.body = (
                f'{{"offsetTable":{queue_map(entries)},"topicPutTps":{tps:.2f}}}'.encode()
            )
            return response

        return await self._admin(request, work)

    # -- groups -------------------------------------------------------------

    async def consume_stats(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(text_field(request, "consumerGroup"))
        only = request.ext_fields.get("topic") or ""

        def work() -> RemotingCommand:
            self._progress.refresh()
            topics = [only] if only else self._broker.offsets.groups().get(group, [])
            entries = []
            for name in topics:
                topic = self._broker.topics.get(name)
                if topic is None:
                    continue
                for queue_id in range(topic.read_queue_nums):
                    progress = self._progress.queue(group, name, queue_id)
                    entries.append(
                        (
                            queue_key(name, self._broker_name, queue_id),
                            {
                                "brokerOffset": progress.max_offset,
                                "consumerOffset": progress.consumer_offset,
                                "lastTimestamp": self._store_time_before(
                                    name, queue_id, progress.consumer_offset
                                ),
                                "pullOffset": progress.consumer_offset,
                            },
                        )
                    )
            response = request.response(ResponseCode.SUCCESS)
            tps = self._rates.group_consume(group, topics)
            response.body = (
                f'{{"consumeTps":{tps:.2f},"offsetTable":{queue_map(entries)}}}'.encode()
            )
            return response

        return await self._admin(request, work)

    def consumer_connections(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(text_field(request, "consumerGroup"))
        members = self._consuming.members(group)
        if not members:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group {group} has no 4.x client connected to this broker now",
            )
        subscriptions: dict[str, Any] = {}
        for member in members:
            for topic, sub in member.subscriptions.items():
                subscriptions[topic] = {
                    "classFilterMode": False,
                    "codeSet": [],
                    "expressionType": sub.expression_type,
                    "subString": sub.expression,
                    "subVersion": 0,
                    "tagsSet": [],
                    "topic": topic,
                }
        latest = members[-1].details
        document = {
            "connectionSet": [
                {
                    "clientAddr": m.connection.address,
                    "clientId": m.client_id,
                    "language": m.language or "JAVA",
                    "version": m.version,
                }
                for m in members
            ],
            "subscriptionTable": subscriptions,
        }
        for name in ("consumeType", "messageModel", "consumeFromWhere"):
            if name in latest:
                document[name] = latest[name]
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(document)
        return response

    async def reset_offset(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        name = text_field(request, "topic")
        group = _group(text_field(request, "group"))
        timestamp = int_field(request, "timestamp")
        force = (request.ext_fields.get("isForce") or "true").lower() == "true"
        only_queue = int_field(request, "queueId", -1)
        given = request.ext_fields.get("offset")

        def work() -> RemotingCommand:
            topic = self._broker.topics.get(name)
            if topic is None or name in prop.INTERNAL_TOPICS:
                raise NotFound(f"topic {name} does not exist; list topics with mqadmin topicList")
            self._progress.refresh()
            store = self._broker.store
            offsets: list[tuple[int, int]] = []
            for queue_id in range(topic.read_queue_nums):
                if only_queue >= 0 and queue_id != only_queue:
                    continue
                current = self._progress.queue(group, name, queue_id)
                if given not in (None, "") and only_queue >= 0:
                    target = int(given)
                elif timestamp == -1:
                    target = current.max_offset
                else:
                    target = store.offset_by_time(name, queue_id, timestamp)
                target = min(max(target, current.min_offset), current.max_offset)
                if not force and target >= current.consumer_offset:
                    target = current.consumer_offset
                offsets.append((queue_id, target))
            for queue_id, offset in offsets:
                self._broker.pop.reset_offset(group, name, queue_id, offset)
            self._broker.persist()
            return _reset_answer(request, name, self._broker_name, offsets)

        answer = await self._admin(request, work)
        if answer.code == ResponseCode.SUCCESS:
            self._consuming.tell_members(
                group,
                RemotingCommand(
                    code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    ext_fields={"topic": name, "group": group, "timestamp": str(timestamp)},
                    body=answer.body,
                ),
            )
        return answer

    def topic_consumers(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        name = text_field(request, "topic")
        groups = set(self._broker.offsets.groups_of(name))
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body({"groupList": sorted(groups)})
        return response

    # -- the broker ---------------------------------------------------------

    async def runtime_info(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        # Sampling the rates reads every queue's offsets: not on the event loop.
        put, consumed = await asyncio.to_thread(self._window_rates)
        stats = self._broker.store.stats()
        table = {
            "brokerVersionDesc": f"Skiff {__version__}",
            "brokerActive": "true",
            "brokerRole": "SLAVE" if self._broker.is_replica else "ASYNC_MASTER",
            "bootTimestamp": str(_STARTED_MS),
            "commitLogMinOffset": str(stats.commit_log_min_offset),
            "commitLogMaxOffset": str(stats.commit_log_max_offset),
            "dispatchBehindBytes": str(max(0, stats.wrote_offset - stats.dispatched_offset)),
            "commitLogDiskRatio": f"{stats.disk_use_ratio:.4f}",
            "writable": str(stats.writable).lower(),
            # RocketMQ's form: messages per second over the last 10 s, 1 min and 10 min.
            "putTps": put,
            "getTransferedTps": consumed,
        }
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body({"table": table})
        return response

    def _window_rates(self) -> tuple[str, str]:
        rates = self._rates
        put = " ".join(f"{rates.broker_put(w):.2f}" for w in WINDOWS_S)
        consumed = " ".join(f"{rates.broker_consume(w):.2f}" for w in WINDOWS_S)
        return put, consumed


def _reset_answer(
    request: RemotingCommand, topic: str, broker_name: str, offsets: list[tuple[int, int]]
) -> RemotingCommand:
    """SUCCESS with RocketMQ's ResetOffsetBody: each queue's new offset."""
    entries = [(queue_key(topic, broker_name, queue_id), offset) for queue_id, offset in offsets]
    response = request.response(ResponseCode.SUCCESS)
    response.body = f'{{"offsetTable":{queue_map(entries)}}}'.encode()
    return response
