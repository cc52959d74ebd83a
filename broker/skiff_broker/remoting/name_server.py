"""The name-server requests a broker answers itself: topic routes, the cluster, topic names.

A 4.x client's ``namesrvAddr`` can be the broker's remoting address: routes it gets back
point at that same address, so the client talks to nothing else.

Invariants:
- A route lists a topic's queues on this broker's group as its master serves them: a
  replica's queues are listed read-only, so producers never pick them.
- Broker-internal topics (schedules, half messages) are never routed.
- Bodies are JSON as RocketMQ's name server writes them (fastjson field names).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..runtime import Broker
from ..telemetry import conventions as cv
from ..wire import property_names as prop
from .codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand


def json_body(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


class NameServer:
    """``advertised`` is where clients reach this broker's remoting port; empty: the
    address each client connected to."""

    def __init__(self, broker: Broker, advertised: str = "") -> None:
        self._broker = broker
        self._advertised = advertised

    @property
    def cluster_name(self) -> str:
        return self._broker.config.cluster.name or cv.DEFAULT_CLUSTER

    def _broker_data(self, connection: RemotingConnection) -> dict[str, Any]:
        return {
            "cluster": self.cluster_name,
            "brokerName": self._broker.config.broker_name,
            # Broker id 0 is the master.
            "brokerAddrs": {"0": self._advertised or connection.local_address},
        }

    def handlers(
        self,
    ) -> dict[int, Callable[[RemotingCommand, RemotingConnection], RemotingCommand]]:
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.system_topic_list,
        }

    def route(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        name = request.ext_fields.get("topic", "")
        topic = None if name in prop.INTERNAL_TOPICS else self._broker.topic_for_use(name)
        if topic is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {name}; create it "
                f"first (skiff topic create {name})",
            )
        perm = 0
        if topic.readable:
            perm |= PERM_READ
        if topic.writable and not self._broker.is_replica:
            perm |= PERM_WRITE
        route: dict[str, Any] = {
            "orderTopicConf": None,
            "queueDatas": [
                {
                    "brokerName": self._broker.config.broker_name,
                    "readQueueNums": topic.read_queue_nums,
                    "writeQueueNums": topic.write_queue_nums,
                    "perm": perm,
                    "topicSysFlag": 0,
                }
            ],
            "brokerDatas": [self._broker_data(connection)],
            "filterServerTable": {},
        }
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(route)
        return response

    def cluster_info(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        name = self._broker.config.broker_name
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(
            {
                "brokerAddrTable": {name: self._broker_data(connection)},
                "clusterAddrTable": {self.cluster_name: [name]},
            }
        )
        return response

    def topic_list(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        names = sorted(
            t.name for t in self._broker.topics.all() if t.name not in prop.INTERNAL_TOPICS
        )
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body({"topicList": names})
        return response

    def system_topic_list(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        # As RocketMQ's name server: the cluster's and brokers' names, which it keeps as
        # topics; Skiff's own internal topics are never listed, so they are not here.
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(
            {
                "topicList": [self.cluster_name, self._broker.config.broker_name],
                "brokerAddr": self._advertised or connection.local_address,
            }
        )
        return response
