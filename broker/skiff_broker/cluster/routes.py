"""Every group of the cluster for a route answer: where each is served and its topic's queues.

A group is reached at its master's client endpoint, writable; while it has no
live master, at one of its replicas, read-only. Under Kubernetes the groups
come from the Leases (:class:`LeaseElector.groups`); outside it from
``--cluster-peers`` (each peer asked for its group name and role). How many
queues a topic has on another group is asked of that group (admin
``GetTopic``) and reused for ``peer_cache_s``: groups need not hold the same
topics. A group that does not answer is left out of the route until it does.
Which topics a group holds at all (admin ``ListTopics``, for the cluster's topic
list) is asked and reused the same way; a group that does not answer is left out
of the list, not remembered as holding none.
Clients that came in on the external port get each group's external address
from the ``<cluster>-endpoints`` ConfigMap (``<group>``; its remoting port:
``<group>.remoting``).

Remoting routes (4.x clients) need each broker's remoting endpoint: a master's is
in its Lease (``skiff.io/remoting-endpoint``); any other broker's is asked of it
(admin ``GetBrokerInfo``, reused for ``peer_cache_s``). A broker without one is
left out of remoting routes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

import grpc

from ..admin.v1 import admin_pb2 as apb
from ..admin.v1 import admin_pb2_grpc
from ..client.channels import PLAINTEXT, ClientTls, aio_channel
from ..metadata.topic_table import MessageType, Permission, TopicConfig
from .config import ClusterConfig
from .kube_client import KubeClient, KubeError
from .lease_elector import LeaseElector

log = logging.getLogger(__name__)

_PEER_TIMEOUT_S = 1.0
_PERMISSION = {
    apb.READ: Permission.READ,
    apb.WRITE: Permission.WRITE,
    apb.READ_WRITE: Permission.READ_WRITE,
}


def external_remoting_key(group: str) -> str:
    """The ``<cluster>-endpoints`` entry naming ``group``'s external remoting address."""
    return f"{group}.remoting"


@dataclasses.dataclass(frozen=True, slots=True)
class GroupRoute:
    name: str
    endpoint: str  # empty: this broker's own endpoint (as the client reached it)
    writable: bool
    local: bool
    # Its remoting endpoint when the Lease names it; empty: ask the broker (or this one).
    remoting: str = ""
    # Client endpoints of the group's other brokers that serve reads (under Leases).
    replicas: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class PeerInfo:
    """What a broker says of itself: its group, whether it takes writes, its remoting port."""

    group: str
    writable: bool
    remoting: str


def topic_from_proto(topic: apb.Topic) -> TopicConfig:
    return TopicConfig(
        name=topic.name,
        read_queue_nums=topic.read_queue_nums,
        write_queue_nums=topic.write_queue_nums,
        perm=_PERMISSION.get(topic.permission, Permission(0)),
        message_type=MessageType(apb.MessageType.Name(topic.message_type)),
    )


class ClusterRoutes:
    def __init__(
        self,
        config: ClusterConfig,
        group: str,
        *,
        is_master: Callable[[], bool],
        elector: LeaseElector | None = None,
        api: KubeClient | None = None,
        peer_interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
        peer_tls: ClientTls = PLAINTEXT,
    ) -> None:
        """``peer_interceptors`` wrap calls to other groups (signing, where auth is on);
        ``peer_tls`` says how to connect to them (tls/peers.py)."""
        self.config = config
        self._peer_tls = peer_tls
        self._peer_interceptors = list(peer_interceptors)
        self.group = group
        self._is_master = is_master
        self._elector = elector
        self._api = api
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._topics: dict[tuple[str, str], tuple[float, TopicConfig | None]] = {}
        self._topic_names: dict[str, tuple[float, frozenset[str]]] = {}
        self._peers: dict[str, tuple[float, PeerInfo] | None] = {}
        self._external: tuple[float, dict[str, str]] = (0.0, {})

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    def _stub(self, endpoint: str) -> admin_pb2_grpc.AdminServiceStub:
        channel = self._channels.get(endpoint)
        if channel is None:
            channel = self._channels[endpoint] = aio_channel(
                endpoint, tls=self._peer_tls, interceptors=self._peer_interceptors or None
            )
        return admin_pb2_grpc.AdminServiceStub(channel)

    # -- the groups ---------------------------------------------------------

    async def groups(self) -> list[GroupRoute]:
        """This broker's group first, then every other group that can be reached."""
        if self._elector is not None:
            return self._lease_groups()
        routes = [GroupRoute(self.group, "", self._is_master(), local=True)]
        answers = await asyncio.gather(*(self.peer_info(p) for p in self.config.peers))
        for peer, answer in zip(self.config.peers, answers, strict=True):
            if answer is not None and answer.group != self.group:
                routes.append(
                    GroupRoute(
                        answer.group, peer, answer.writable, local=False, remoting=answer.remoting
                    )
                )
        return routes

    def _lease_groups(self) -> list[GroupRoute]:
        assert self._elector is not None
        routes = []
        own = self._elector.groups.get(self.group)
        replicas = tuple(own.replica_endpoints) if own is not None else ()
        if self._is_master():
            routes.append(GroupRoute(self.group, "", True, local=True, replicas=replicas))
        elif own is not None and own.master_endpoint:
            routes.append(
                GroupRoute(
                    self.group,
                    own.master_endpoint,
                    True,
                    local=True,
                    remoting=own.master_remoting,
                    replicas=replicas,
                )
            )
        else:
            # No live master: reads from here.
            routes.append(GroupRoute(self.group, "", False, local=True))
        for name, state in sorted(self._elector.groups.items()):
            if name == self.group:
                continue
            if state.master_endpoint:
                routes.append(
                    GroupRoute(
                        name,
                        state.master_endpoint,
                        True,
                        local=False,
                        remoting=state.master_remoting,
                        replicas=tuple(state.replica_endpoints),
                    )
                )
            elif state.replica_endpoints:
                first, *others = state.replica_endpoints
                routes.append(GroupRoute(name, first, False, local=False, replicas=tuple(others)))
        return routes

    async def remoting_of(self, endpoint: str) -> str:
        """The remoting endpoint of the broker at client ``endpoint``; empty: unknown or none."""
        info = await self.peer_info(endpoint)
        return info.remoting if info is not None else ""

    async def peer_info(self, endpoint: str) -> PeerInfo | None:
        """What the broker at client ``endpoint`` says of itself; None: it did not answer."""
        cached = self._peers.get(endpoint)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.config.peer_cache_s:
            return cached[1]
        try:
            info = await self._stub(endpoint).GetBrokerInfo(
                apb.GetBrokerInfoRequest(), timeout=_PEER_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            log.debug("cluster peer %s did not answer: %s", endpoint, exc.details())
            self._peers[endpoint] = None
            return None
        found = PeerInfo(info.broker_name, info.role != "REPLICA", info.remoting_endpoint)
        self._peers[endpoint] = (now, found)
        return found

    # -- a topic on another group -------------------------------------------

    async def topic_on(self, route: GroupRoute, topic: str) -> TopicConfig | None:
        key = (route.endpoint, topic)
        cached = self._topics.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.config.peer_cache_s:
            return cached[1]
        try:
            found: TopicConfig | None = topic_from_proto(
                await self._stub(route.endpoint).GetTopic(
                    apb.GetTopicRequest(name=topic), timeout=_PEER_TIMEOUT_S
                )
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.NOT_FOUND:
                log.debug("group %s did not answer for %s: %s", route.name, topic, exc.details())
                return None  # not cached: asked again next time
            found = None
        self._topics[key] = (now, found)
        return found

    async def topic_names_on(self, route: GroupRoute) -> frozenset[str] | None:
        """Every topic the group at ``route`` holds; None: it did not answer."""
        cached = self._topic_names.get(route.endpoint)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.config.peer_cache_s:
            return cached[1]
        try:
            listed = await self._stub(route.endpoint).ListTopics(
                apb.ListTopicsRequest(), timeout=_PEER_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            log.debug("group %s did not list its topics: %s", route.name, exc.details())
            return None  # not cached: asked again next time
        names = frozenset(topic.name for topic in listed.topics)
        self._topic_names[route.endpoint] = (now, names)
        return names

    # -- external addresses ---------------------------------------------------

    async def external_endpoints(self) -> dict[str, str]:
        """``<group>`` (and ``<group>.remoting``) → external ``host:port``, from the
        ``<cluster>-endpoints`` ConfigMap."""
        if self._api is None:
            return {}
        fetched_at, data = self._external
        if time.monotonic() - fetched_at < self.config.peer_cache_s:
            return data
        try:
            config_map = await asyncio.to_thread(
                self._api.get_config_map, self.config.namespace, f"{self.config.name}-endpoints"
            )
            data = dict(config_map.get("data") or {})
        except KubeError as exc:
            log.debug("no external endpoints: %s", exc)
        self._external = (time.monotonic(), data)
        return data
