"""The remoting port: a listener whose connections speak RocketMQ's remoting protocol.

It shares the client port's connection counts (one set of limits for the broker), its
request-buffer budget, its idle timeout and its TLS (``tls_context`` and ``plaintext`` as
the client port's TLS mode sets them: both on one port when permissive, the first byte
telling them apart); its handlers use the same store, topics,
group offsets and long polling as the gRPC service.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from ..config import BrokerConfig
from ..delivery.long_polling import ArrivalHub
from ..http2.receive_budget import ReceiveBudget
from ..runtime import Broker
from ..tls.connection_limits import ConnectionCounts
from ..tls.listener import ClientListener
from ..wire.hosts import encode_host
from .access import RemotingAccess
from .admin_requests import AdminRequests
from .assignments import Assignments
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
    ) -> None:
        config: BrokerConfig = broker.config
        self._config = config
        self._broker = broker
        self._budget = budget
        self._per_connection = per_connection
        self.consuming = Consuming(broker, hub)
        self.service = RemotingService(
            gate=RemotingAccess(broker.users).refusal if config.auth.enabled else None
        )
        self.service.add(NameServer(broker).handlers())
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
        self.service.add(Lookups(broker).handlers())
        self.listener = ClientListener(
            config.remoting_listen,
            self._connection,
            tls_context=tls_context,
            plaintext=plaintext,
            name=LISTEN_OPTION,
            preface_timeout_s=config.connections.preface_timeout_s,
            accept_pause_s=config.connections.accept_pause_s,
            counts=counts,
        )
        self.port = 0
        self._open: set[RemotingConnection] = set()

    def _connection(self) -> RemotingConnection:
        connection = RemotingConnection(
            self.service.dispatch,
            max_frame_length=self._config.remoting_max_frame_size,
            budget=self._budget,
            per_connection=max(self._per_connection, self._config.remoting_max_frame_size),
            idle_timeout_s=self._config.connections.idle_timeout_s,
            on_close=self._closed,
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

    def bind(self) -> int:
        self.port = self.listener.bind()
        # RocketMQ's offset message ID carries the broker's remoting address (its
        # storeHost): mqadmin queryMsgById dials the address inside the ID. Records
        # written from now on name the host they named before with this port.
        host = self._config.store.store_host.rpartition(":")[0]
        self._broker.store.commit_log.store_host = encode_host(f"{host}:{self.port}")
        return self.port

    async def start(self) -> None:
        await self.listener.start()
        self._sampling = asyncio.create_task(self.rates.run())

    def stop_accepting(self) -> None:
        self.listener.stop_accepting()

    async def stop(self) -> None:
        """Stop accepting, then close every connection (long polls end with it)."""
        await self.listener.stop()
        if self._sampling is not None:
            self._sampling.cancel()
        for connection in list(self._open):
            connection.close()
