"""The remoting port: a listener whose connections speak RocketMQ's remoting protocol.

It shares the client port's connection counts (one set of limits for the broker), its
request-buffer budget, its idle timeout and its TLS (``tls_context`` and ``plaintext`` as
the client port's TLS mode sets them: both on one port when permissive, the first byte
telling them apart); its handlers use the same store, topics,
group offsets and long polling as the gRPC service.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

from ..cluster.routes import ClusterRoutes
from ..config import BrokerConfig
from ..delivery.long_polling import ArrivalHub
from ..frontdoor.connection_limits import ConnectionCounts
from ..frontdoor.http2.receive_budget import ReceiveBudget
from ..frontdoor.listener import ClientListener
from ..runtime import Broker
from ..wire.hosts import encode_host
from .access import RemotingAccess
from .admin_requests import AdminRequests
from .admin_views import AdminViews
from .assignments import Assignments
from .client_calls import ClientCalls, ForwardedToClients
from .connection import RemotingConnection
from .consuming import Consuming
from .group_settings_requests import GroupSettingsRequests
from .lookups import Lookups
from .name_server import NameServer
from .popping import Popping
from .producing import Producing
from .queue_locks import QueueLocking
from .redelivery import SendBack
from .service import RemotingService
from .traffic_rates import TrafficRates, broker_totals
from .transactions import RemotingTransactions, check_allowed

LISTEN_OPTION = "--remoting-listen"
EXTERNAL_LISTEN_OPTION = "--remoting-external-listen"


class RemotingServer:
    def __init__(
        self,
        broker: Broker,
        hub: ArrivalHub,
        *,
        budget: ReceiveBudget,
        per_connection: int,
        counts: ConnectionCounts,
        tls_context: Callable[[], ssl.SSLContext] | None = None,
        plaintext: bool = True,
        cluster: ClusterRoutes | None = None,
    ) -> None:
        """``cluster``: the other groups, named in the routes this port hands out."""
        config: BrokerConfig = broker.config
        self._config = config
        self._broker = broker
        self._budget = budget
        self._per_connection = per_connection
        self.consuming = Consuming(broker, hub)
        calls = ClientCalls()
        self.service = RemotingService(
            gate=RemotingAccess(broker.users).refusal if config.auth.enabled else None,
            answered=calls.answered,
        )
        self.service.add(
            NameServer(broker, advertised=config.remoting_advertise, cluster=cluster).handlers()
        )
        # Its HEART_BEAT records producers, then hands the heartbeat to consuming's.
        self.transactions = RemotingTransactions(
            broker,
            heartbeat=self.consuming.heartbeat,
            may_be_asked=check_allowed(broker) if config.auth.enabled else None,
        )
        locking = QueueLocking(broker)
        self.service.add(
            Producing(
                broker, prepare=self.transactions.prepare, group_locked=locking.locks.group_locked
            ).handlers()
        )
        self.service.add(self.consuming.handlers())
        self.service.add(Popping(broker, hub).handlers())
        self.service.add(Assignments(broker, self.consuming).handlers())
        self.service.add(SendBack(broker).handlers())
        self.service.add(locking.handlers())
        self.service.add(self.transactions.handlers())
        self.rates = TrafficRates(lambda: broker_totals(broker))
        self._sampling: asyncio.Task | None = None
        self.service.add(AdminRequests(broker, self.consuming, self.rates).handlers())
        self.service.add(GroupSettingsRequests(broker).handlers())
        lookups = Lookups(broker)
        self.service.add(lookups.handlers())
        self.service.add(AdminViews(broker, self.transactions.producers).handlers())
        self.service.add(
            ForwardedToClients(
                self.consuming, calls, lookups.record_at, config.broker_name
            ).handlers()
        )

        def listener(address: str, option: str, external: bool) -> ClientListener:
            return ClientListener(
                address,
                lambda: self._connection(external),
                tls_context=tls_context,
                plaintext=plaintext,
                name=option,
                preface_timeout_s=config.connections.preface_timeout_s,
                accept_pause_s=config.connections.accept_pause_s,
                counts=counts,
            )

        self.listener = listener(config.remoting_listen, LISTEN_OPTION, False)
        self.external_listener = (
            listener(config.remoting_external_listen, EXTERNAL_LISTEN_OPTION, True)
            if config.remoting_external_listen
            else None
        )
        self.port = 0
        self.external_port = 0
        self._open: set[RemotingConnection] = set()

    def _connection(self, external: bool) -> RemotingConnection:
        connection = RemotingConnection(
            self.service.dispatch,
            max_frame_length=self._config.remoting_max_frame_size,
            budget=self._budget,
            per_connection=max(self._per_connection, self._config.remoting_max_frame_size),
            idle_timeout_s=self._config.connections.idle_timeout_s,
            on_close=self._closed,
            external=external,
        )
        self._open.add(connection)
        return connection

    def _closed(self, connection: RemotingConnection) -> None:
        self._open.discard(connection)
        self.consuming.connection_closed(connection)
        self.transactions.producers.connection_closed(connection)

    @property
    def address(self) -> str:
        return f"{self._config.remoting_listen.rpartition(':')[0]}:{self.port}"

    @property
    def endpoint(self) -> str:
        """Where clients on other hosts reach this port: the advertised address, else the
        listen address (the host name for a wildcard one)."""
        if self._config.remoting_advertise:
            return self._config.remoting_advertise
        host = self._config.remoting_listen.rpartition(":")[0]
        if host in ("", "0.0.0.0", "[::]", "::"):
            host = socket.gethostname()
        return f"{host}:{self.port}"

    def bind(self) -> int:
        self.port = self.listener.bind()
        # RocketMQ's offset message ID carries the broker's remoting address (its
        # storeHost): mqadmin queryMsgById dials the address inside the ID. Records
        # written from now on name the host they named before with this port.
        host = self._config.store.store_host.rpartition(":")[0]
        self._broker.store.commit_log.store_host = encode_host(f"{host}:{self.port}")
        if self.external_listener is not None:
            self.external_port = self.external_listener.bind()
        return self.port

    def _listeners(self) -> list[ClientListener]:
        return (
            [self.listener]
            if self.external_listener is None
            else [
                self.listener,
                self.external_listener,
            ]
        )

    async def start(self) -> None:
        for listener in self._listeners():
            await listener.start()
        self._sampling = asyncio.create_task(self.rates.run())

    def stop_accepting(self) -> None:
        for listener in self._listeners():
            listener.stop_accepting()

    async def stop(self) -> None:
        """Stop accepting, then close every connection (long polls end with it)."""
        for listener in self._listeners():
            await listener.stop()
        if self._sampling is not None:
            self._sampling.cancel()
        for connection in list(self._open):
            connection.close()
