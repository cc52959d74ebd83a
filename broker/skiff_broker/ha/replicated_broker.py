"""What replication needs of the broker it runs in, and nothing more.

``runtime.Broker`` has this shape; replication takes it as this protocol so that
ha/ depends on the store, the state tables and the settings it reads, not on the
broker's composition (which itself is configured with ha's settings).
"""

from __future__ import annotations

from typing import Protocol

from ..auth.config import AuthConfig
from ..auth.model import User
from ..auth.user_store import UserStore
from ..frontdoor.connection_limits import ConnectionLimits
from ..metadata.consumer_offsets import ConsumerOffsetTable
from ..metadata.group_settings import GroupSettingsTable
from ..metadata.request_modes import RequestModeTable
from ..metadata.topic_table import TopicTable
from ..store.config import StoreConfig
from ..store.message_store import MessageStore
from ..tls.settings import TlsConfig


class ReplicationSettings(Protocol):
    """The broker settings replication reads (``config.BrokerConfig`` has them)."""

    broker_name: str
    store: StoreConfig
    tls: TlsConfig
    auth: AuthConfig
    connections: ConnectionLimits


class ReplicatedBroker(Protocol):
    """The store it streams, the tables a master sends in METADATA, the writers it
    starts and stops on a role change."""

    @property
    def config(self) -> ReplicationSettings: ...

    @property
    def store(self) -> MessageStore: ...

    @property
    def topics(self) -> TopicTable: ...

    @property
    def offsets(self) -> ConsumerOffsetTable: ...

    @property
    def users(self) -> UserStore: ...

    @property
    def group_settings(self) -> GroupSettingsTable: ...

    @property
    def request_modes(self) -> RequestModeTable: ...

    @property
    def bootstrap_user(self) -> User | None: ...

    def start_writers(self) -> None: ...

    def stop_writers(self, reason: str) -> None: ...
