"""Read-only admin views the RocketMQ Dashboard asks of a broker: every topic's config,
the broker's system topics, its own config and a producer group's connections.

Invariants:
- Bodies are as RocketMQ's broker writes them: fastjson objects, and the broker config
  as Java properties text (``key=value`` lines), which its admin client parses.
- Broker-internal topics (schedules, half messages) are never listed, as in routes: not
  among the topics and not as system topics (RocketMQ's broker lists its own there, but
  Skiff's cannot be routed to, examined or changed, so a page could do nothing with them).
- A producer group is known by the heartbeats of producers connected now; one without
  any is answered as RocketMQ answers it (SYSTEM_ERROR, "not exist"), never hung.
"""

from __future__ import annotations

import time
from typing import Any

from .. import __version__
from ..metadata.topic_table import MessageType, TopicConfig
from ..runtime import Broker
from ..telemetry import conventions as cv
from ..wire import property_names as prop
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .name_server import json_body
from .service import Handler, text_field
from .transactions import ProducerTable


def topic_config_document(topic: TopicConfig) -> dict[str, Any]:
    """RocketMQ's TopicConfig as fastjson writes it."""
    return {
        "attributes": {"message.type": topic.message_type.value},
        "order": topic.message_type is MessageType.FIFO,
        "perm": int(topic.perm),
        "readQueueNums": topic.read_queue_nums,
        "topicFilterType": "SINGLE_TAG",
        "topicName": topic.name,
        "topicSysFlag": 0,
        "writeQueueNums": topic.write_queue_nums,
    }


class AdminViews:
    """``producers``: the table the remoting door's heartbeats fill."""

    def __init__(self, broker: Broker, producers: ProducerTable) -> None:
        self._broker = broker
        self._producers = producers

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_configs,
            RequestCode.GET_BROKER_CONFIG: self.broker_config,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.system_topics,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
        }

    def all_topic_configs(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        topics = sorted(
            (t for t in self._broker.topics.all() if t.name not in prop.INTERNAL_TOPICS),
            key=lambda t: t.name,
        )
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(
            {
                "topicConfigTable": {t.name: topic_config_document(t) for t in topics},
                "dataVersion": {"timestamp": int(time.time() * 1000), "counter": 0},
            }
        )
        return response

    def system_topics(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body({"topicList": []})
        return response

    def broker_config(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        config = self._broker.config
        port = connection.local_address.rpartition(":")[2]
        settings = {
            "brokerClusterName": config.cluster.name or cv.DEFAULT_CLUSTER,
            "brokerName": config.broker_name,
            # Broker id 0 is the master; a replica is RocketMQ's slave 1.
            "brokerId": "1" if self._broker.is_replica else "0",
            "brokerRole": "SLAVE" if self._broker.is_replica else "ASYNC_MASTER",
            "listenPort": port,
            "autoCreateTopicEnable": str(config.auto_create_topics).lower(),
            "defaultTopicQueueNums": str(config.default_write_queues),
            "maxDeliveryAttempts": str(config.max_delivery_attempts),
            "transactionCheckInterval": str(int(config.transaction_check_interval_s * 1000)),
            "transactionTimeOut": str(int(config.transaction_timeout_s * 1000)),
            "transactionCheckMax": str(config.transaction_check_max),
            "aclEnable": str(config.auth.enabled).lower(),
            "brokerVersionDesc": f"Skiff {__version__}",
        }
        response = request.response(ResponseCode.SUCCESS)
        response.body = "".join(f"{k}={v}\n" for k, v in sorted(settings.items())).encode()
        return response

    def producer_connections(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = text_field(request, "producerGroup")
        clients = self._producers.clients_of(group)
        if not clients:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group {group} not exist: no 4.x producer of it is "
                "connected to this broker now",
            )
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(
            {
                "connectionSet": [
                    {
                        "clientAddr": c.address,
                        "clientId": client.client_id,
                        "language": client.language or "JAVA",
                        "version": client.version,
                    }
                    for c, client in clients
                ]
            }
        )
        return response
