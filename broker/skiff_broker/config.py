"""Settings of a broker process (its store has its own StoreConfig)."""

from __future__ import annotations

import dataclasses

from .auth.config import AuthConfig
from .cluster.config import ClusterConfig
from .ha.config import ReplicationConfig, Role
from .store.config import StoreConfig
from .tls.peers import check_peers_can_connect
from .tls.settings import TlsConfig


@dataclasses.dataclass(slots=True)
class BrokerConfig:
    store: StoreConfig
    broker_name: str = "broker-a"
    # gRPC listen address; 8081 is the RocketMQ 5 proxy's gRPC port. Loopback unless
    # chosen: a broker reachable from other hosts is a decision, not a default.
    listen: str = "127.0.0.1:8081"
    # Prometheus /metrics (HOST:PORT; empty: none); 5557 is RocketMQ 5's metrics port.
    metrics_listen: str = "127.0.0.1:5557"
    # host:port given to clients in routes; by default the address the client used.
    advertised_endpoint: str = ""
    auto_create_topics: bool = False
    default_read_queues: int = 8
    default_write_queues: int = 8
    # A message is delivered at most this many times before it goes to %DLQ%<group>
    # (RocketMQ: retryMaxTimes 16 + 1).
    max_delivery_attempts: int = 17
    min_invisible_time_ms: int = 1_000
    max_invisible_time_ms: int = 12 * 3600 * 1000
    # Push consumers send no invisible time; the broker chooses it.
    default_invisible_time_ms: int = 60_000
    max_long_polling_ms: int = 20_000
    # DELAY messages may be scheduled at most this far ahead (RocketMQ: 3 days).
    max_delay_ms: int = 3 * 24 * 3600 * 1000
    # Transactions: an unresolved half message is checked with its producer after
    # this long, every check interval, at most check_max times, then rolled back.
    transaction_timeout_ms: int = 6_000
    transaction_check_interval_ms: int = 30_000
    transaction_check_max: int = 15
    # Group offsets and pop state are written to disk this often.
    persist_interval_s: float = 5.0
    # A state file damaged along with its .bak: start with that state empty instead of failing.
    discard_damaged_state: bool = False
    # Master/replica replication (role, master address, mode, in-sync rules).
    replication: ReplicationConfig = dataclasses.field(default_factory=ReplicationConfig)
    # The cluster: the group's Lease, other groups, external access.
    cluster: ClusterConfig = dataclasses.field(default_factory=ClusterConfig)
    # TLS on the client port(s): permissive serves TLS and plaintext on one port.
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)
    # Request signatures and ACLs (off by default).
    auth: AuthConfig = dataclasses.field(default_factory=AuthConfig)

    def validate(self) -> None:
        self.store.validate()
        host, _, port = self.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--listen must be HOST:PORT, got {self.listen!r}")
        if self.metrics_listen:
            host, _, port = self.metrics_listen.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(
                    f"--metrics-listen must be HOST:PORT, or empty to serve no metrics; "
                    f"got {self.metrics_listen!r}"
                )
        if self.max_delivery_attempts < 1:
            raise ValueError("max delivery attempts must be at least 1")
        if not 0 < self.min_invisible_time_ms <= self.max_invisible_time_ms:
            raise ValueError("the invisible time range is empty")
        if self.transaction_check_interval_ms <= 0:
            raise ValueError("the transaction check interval must be positive")
        if self.transaction_timeout_ms < 0 or self.transaction_check_max < 0:
            raise ValueError("the transaction timeout and check maximum cannot be negative")
        self.tls.validate()
        check_peers_can_connect(
            self.tls,
            has_peers=bool(self.cluster.peers)
            or self.replication.role is Role.LEASE
            or self.replication.enabled,
        )
        self.replication.validate()
        self.auth.validate()
        self.cluster.validate(under_lease=self.replication.role is Role.LEASE)
