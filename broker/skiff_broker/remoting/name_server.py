"""The name-server requests a broker answers itself: topic routes, the cluster, topic names.

A 4.x client's ``namesrvAddr`` can be any broker's remoting address: routes it gets
back name every group of the cluster (``cluster/routes.py``: Leases under
Kubernetes, ``--cluster-peers`` outside it) at its brokers' remoting endpoints, so
the client needs no other address. Without a cluster the route names this broker
alone.

Invariants:
- A group's brokerAddrs has id 0 (RocketMQ's master) only for the broker that takes
  its writes; brokers serving reads only get ids from 1, as RocketMQ's replicas do.
  A group without a writable broker lists its queues read-only, so producers never
  pick them.
- This broker is named by ``--remoting-advertise``, else by the address the client
  connected to; other brokers by the remoting endpoint they publish. A broker that
  publishes none (its remoting port is off) is left out; a group left with no broker
  is left out of the route.
- A client on the external remoting port gets each group's external remoting address
  (the ``<cluster>-endpoints`` ConfigMap's ``<group>.remoting``) for its writable
  broker where one is published, the internal addresses otherwise.
- Broker-internal topics (schedules, half messages) are never routed or listed.
- The topic list is the union of the topics of the groups a route can name (those
  the cluster answers for), so every topic it lists has a route; a group that does
  not answer is left out of it, as it is of routes.
- Bodies are JSON as RocketMQ's name server writes them (fastjson field names).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from ..cluster.routes import ClusterRoutes, GroupRoute, external_remoting_key
from ..metadata.topic_table import TopicConfig
from ..runtime import Broker
from ..telemetry import conventions as cv
from ..wire import property_names as prop
from .codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .service import Handler

MASTER_ID = "0"


def json_body(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


@dataclasses.dataclass(slots=True)
class _Group:
    """One group as a remoting route names it."""

    name: str
    # Broker id (as text, RocketMQ's JSON keys) -> remoting endpoint.
    addresses: dict[str, str]
    # Where its topics are looked up: the first route of the group.
    route: GroupRoute

    @property
    def writable(self) -> bool:
        return MASTER_ID in self.addresses

    def add(self, address: str, *, master: bool) -> None:
        if not address or address in self.addresses.values():
            return
        if master and MASTER_ID not in self.addresses:
            self.addresses[MASTER_ID] = address
            return
        self.addresses[str(1 + sum(key != MASTER_ID for key in self.addresses))] = address


class NameServer:
    """``advertised`` is where clients reach this broker's remoting port (empty: the
    address each client connected to); ``cluster`` finds the other groups."""

    def __init__(
        self, broker: Broker, advertised: str = "", cluster: ClusterRoutes | None = None
    ) -> None:
        self._broker = broker
        self._advertised = advertised
        self._cluster = cluster

    @property
    def cluster_name(self) -> str:
        return self._broker.config.cluster.name or cv.DEFAULT_CLUSTER

    def _own_address(self, connection: RemotingConnection) -> str:
        return self._advertised or connection.local_address

    def _broker_data(self, group: _Group) -> dict[str, Any]:
        return {
            "cluster": self.cluster_name,
            "brokerName": group.name,
            "brokerAddrs": dict(sorted(group.addresses.items(), key=lambda kv: int(kv[0]))),
        }

    async def _groups(self, connection: RemotingConnection) -> list[_Group]:
        """Every group with at least one broker a 4.x client can reach, this one's first."""
        own = self._own_address(connection)
        if self._cluster is None:
            alone = _Group(self._broker.config.broker_name, {}, GroupRoute("", "", True, True))
            alone.add(own, master=not self._broker.is_replica)
            return [alone]
        cluster = self._cluster

        async def address(route: GroupRoute) -> str:
            if route.local and not route.endpoint:
                return own
            return route.remoting or await cluster.remoting_of(route.endpoint)

        routes = await cluster.groups()
        serving = await asyncio.gather(*(address(route) for route in routes))
        replicas = await asyncio.gather(
            *(asyncio.gather(*(cluster.remoting_of(e) for e in route.replicas)) for route in routes)
        )
        groups: dict[str, _Group] = {}
        for route, at, readers in zip(routes, serving, replicas, strict=True):
            group = groups.setdefault(route.name, _Group(route.name, {}, route))
            group.add(at, master=route.writable)
            for reader in readers:
                group.add(reader, master=False)
        if connection.external:
            outside = await cluster.external_endpoints()
            for group in groups.values():
                published = outside.get(external_remoting_key(group.name))
                if published and group.writable:
                    group.addresses = {MASTER_ID: published}
        return [group for group in groups.values() if group.addresses]

    async def _topic_on(self, group: _Group, name: str) -> TopicConfig | None:
        if group.route.local:
            return self._broker.topic_for_use(name)
        assert self._cluster is not None
        return await self._cluster.topic_on(group.route, name)

    async def _topic_names_on(self, group: _Group) -> frozenset[str]:
        if group.route.local:
            return frozenset(topic.name for topic in self._broker.topics.all())
        assert self._cluster is not None
        return await self._cluster.topic_names_on(group.route) or frozenset()

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.system_topic_list,
        }

    async def route(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        name = request.ext_fields.get("topic", "")
        groups = [] if name in prop.INTERNAL_TOPICS else await self._groups(connection)
        topics = await asyncio.gather(*(self._topic_on(group, name) for group in groups))
        found = [(g, t) for g, t in zip(groups, topics, strict=True) if t is not None]
        if not found:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {name}; create it "
                f"first (skiff topic create {name})",
            )
        route: dict[str, Any] = {
            "orderTopicConf": None,
            "queueDatas": [
                {
                    "brokerName": group.name,
                    "readQueueNums": topic.read_queue_nums,
                    "writeQueueNums": topic.write_queue_nums,
                    "perm": _perm(topic, writable=group.writable),
                    "topicSysFlag": 0,
                }
                for group, topic in found
            ],
            "brokerDatas": [self._broker_data(group) for group, _ in found],
            "filterServerTable": {},
        }
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(route)
        return response

    async def cluster_info(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        groups = await self._groups(connection)
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(
            {
                "brokerAddrTable": {group.name: self._broker_data(group) for group in groups},
                "clusterAddrTable": {self.cluster_name: [group.name for group in groups]},
            }
        )
        return response

    async def topic_list(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        groups = await self._groups(connection)
        held = await asyncio.gather(*(self._topic_names_on(group) for group in groups))
        names = sorted(frozenset[str]().union(*held) - prop.INTERNAL_TOPICS)
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body({"topicList": names})
        return response

    async def system_topic_list(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        # As RocketMQ's name server: the cluster's and every group's name, which it keeps
        # as topics; Skiff's own internal topics are never listed, so they are not here.
        groups = await self._groups(connection)
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(
            {
                "topicList": [self.cluster_name, *(group.name for group in groups)],
                "brokerAddr": self._own_address(connection),
            }
        )
        return response


def _perm(topic: TopicConfig, *, writable: bool) -> int:
    perm = 0
    if topic.readable:
        perm |= PERM_READ
    if topic.writable and writable:
        perm |= PERM_WRITE
    return perm
