"""Settings of a broker process (its store has its own StoreConfig).

Fields users set are declared with their option and ``SKIFF_*`` variable (wire/setting.py);
`skiff broker` makes its options from them, so a default here is the command's default.
"""

from __future__ import annotations

import dataclasses

from .auth.config import AuthConfig
from .cluster.config import ClusterConfig
from .frontdoor.connection_limits import ConnectionLimits
from .frontdoor.grpc.request_buffers import RequestBufferConfig
from .ha.config import ReplicationConfig, Role, parse_host_port
from .store.config import StoreConfig
from .tls.peers import check_peers_can_connect
from .tls.settings import TlsConfig
from .wire.setting import option


@dataclasses.dataclass(slots=True)
class BrokerConfig:
    store: StoreConfig
    # gRPC listen address; 8081 is the RocketMQ 5 proxy's gRPC port. Loopback unless
    # chosen: a broker reachable from other hosts is a decision, not a default.
    listen: str = option(
        "127.0.0.1:8081",
        "--listen",
        "SKIFF_LISTEN",
        "gRPC address (HOST:PORT; port 0 picks a free one). Clients on other hosts "
        "need an address they can reach, e.g. 0.0.0.0:8081.",
    )
    metrics_listen: str = option(
        "127.0.0.1:5557",
        "--metrics-listen",
        "SKIFF_METRICS_LISTEN",
        "Where to serve Prometheus metrics at /metrics (HOST:PORT; port 0 picks a free "
        "one; empty: no endpoint). 5557 is RocketMQ 5's metrics port.",
    )
    # RocketMQ's remoting protocol (4.x clients, mqadmin); 8080 is the RocketMQ 5 proxy's
    # remoting port. Loopback unless chosen, like --listen.
    remoting_listen: str = option(
        "127.0.0.1:8080",
        "--remoting-listen",
        "SKIFF_REMOTING_LISTEN",
        "Address of the RocketMQ remoting port, for 4.x clients and tools: they set "
        "namesrvAddr to it (HOST:PORT; port 0 picks a free one; empty or 'off': no "
        "remoting port). Clients on other hosts need e.g. 0.0.0.0:8080.",
    )
    remoting_external_listen: str = option(
        "",
        "--remoting-external-listen",
        "SKIFF_REMOTING_EXTERNAL_LISTEN",
        "A second remoting address, for 4.x clients outside the cluster: routes handed out "
        "there name the groups' external remoting addresses (the <cluster>-endpoints "
        "ConfigMap's <group>.remoting entries).",
    )
    remoting_max_frame_size: int = option(
        16 * 1024 * 1024,
        "--remoting-max-frame-size",
        "SKIFF_REMOTING_MAX_FRAME_SIZE",
        "Largest remoting frame (header and body) a client may send; a connection that "
        "sends a larger one is closed. RocketMQ's com.rocketmq.remoting.frameMaxLength.",
        kind="size",
        minimum=64 * 1024,
    )
    advertised_endpoint: str = option(
        "",
        "--advertise",
        "SKIFF_ADVERTISE",
        "HOST:PORT given to clients in routes (default: the address they connected to).",
    )
    remoting_advertise: str = option(
        "",
        "--remoting-advertise",
        "SKIFF_REMOTING_ADVERTISE",
        "HOST:PORT of this broker's remoting port as routes give it to 4.x clients and "
        "other groups name it (default: the address the client connected to).",
    )
    broker_name: str = option(
        "broker-a",
        "--broker-name",
        "SKIFF_BROKER_NAME",
        "The group's name (RocketMQ's brokerName): routes, replication and metrics name it; "
        "every broker of a group has the same one.",
    )
    auto_create_topics: bool = option(
        False,
        "--auto-create-topics",
        "SKIFF_AUTO_CREATE_TOPICS",
        "Create unknown topics on first use instead of answering TOPIC_NOT_FOUND.",
    )
    default_read_queues: int = option(
        8,
        "--default-read-queues",
        "SKIFF_DEFAULT_READ_QUEUES",
        "Read queues of a topic created without counts (--auto-create-topics; RocketMQ's "
        "defaultTopicQueueNums).",
        minimum=1,
        maximum=1024,
    )
    default_write_queues: int = option(
        8,
        "--default-write-queues",
        "SKIFF_DEFAULT_WRITE_QUEUES",
        "Write queues of a topic created without counts.",
        minimum=1,
        maximum=1024,
    )
    # RocketMQ: retryMaxTimes 16 + 1.
    max_delivery_attempts: int = option(
        17,
        "--max-delivery-attempts",
        "SKIFF_MAX_DELIVERY_ATTEMPTS",
        "Deliveries of a message before it goes to %DLQ%<group>, for a group without "
        "its own retryMaxTimes (mqadmin updateSubGroup).",
        minimum=1,
    )
    # RocketMQ's proxy: minInvisibleTimeMillsForRecv 10 s, maxInvisibleTimeMills 12 h.
    min_invisible_time_s: float = option(
        10.0,
        "--min-invisible-time",
        "SKIFF_MIN_INVISIBLE_TIME",
        "Seconds: the shortest invisible duration a receive may ask for (RocketMQ's "
        "minInvisibleTimeMillsForRecv); shorter ones are refused with ILLEGAL_INVISIBLE_TIME.",
        minimum=0,
        maximum=12 * 3600,
    )
    max_invisible_time_ms: int = 12 * 3600 * 1000
    # Push consumers send no invisible time; the broker chooses it.
    default_invisible_time_ms: int = 60_000
    max_long_polling_ms: int = 20_000
    # DELAY messages may be scheduled at most this far ahead: RocketMQ's proxy
    # maxDelayTimeMills, what its gRPC clients meet (its broker's timerMaxDelaySec is 3 days).
    max_delay_ms: int = 24 * 3600 * 1000
    # Transactions: an unresolved half message is checked with its producer after
    # this long, every check interval, at most check_max times, then rolled back.
    transaction_check_interval_s: float = option(
        30.0,
        "--transaction-check-interval",
        "SKIFF_TRANSACTION_CHECK_INTERVAL",
        "Seconds between asks to a producer about an unresolved transaction.",
        minimum=0,
        min_open=True,
    )
    transaction_timeout_s: float = option(
        6.0,
        "--transaction-timeout",
        "SKIFF_TRANSACTION_TIMEOUT",
        "Seconds an unresolved transaction waits before its producer is asked.",
        minimum=0,
    )
    transaction_check_max: int = option(
        15,
        "--transaction-check-max",
        "SKIFF_TRANSACTION_CHECK_MAX",
        "Asks about one transaction before it is rolled back.",
        minimum=0,
    )
    # RocketMQ's proxy and broker: channelExpiredTimeout, 120 s.
    client_expiry_s: float = option(
        120.0,
        "--client-expiry",
        "SKIFF_CLIENT_EXPIRY",
        "Seconds a client session is kept with no Telemetry stream open and no request "
        "(RocketMQ's channelExpiredTimeout); then the broker forgets it (its settings, "
        "group and topics). Official clients heartbeat every 10 s, so only clients that "
        "left are forgotten; one that comes back starts a new session.",
        minimum=0,
        min_open=True,
    )
    # Group offsets and pop state are written to disk this often.
    persist_interval_s: float = 5.0
    slow_callback_report_ms: float = option(
        0.0,
        "--slow-callback-report-ms",
        "SKIFF_SLOW_CALLBACK_REPORT_MS",
        "Run the event loop in asyncio debug mode and log a WARNING ('slow callback: ...', "
        "field slow_callback_ms) for every callback that holds it longer than this; 0: off. "
        "Debug mode slows the broker: for finding what blocks, not for production.",
        minimum=0,
    )
    discard_damaged_state: bool = option(
        False,
        "--discard-damaged-state",
        "SKIFF_DISCARD_DAMAGED_STATE",
        "When a state file under config/ and its .bak are both damaged, start with that "
        "state empty (the file is kept as <file>.damaged) instead of refusing to start.",
        flag_only=True,
    )
    # Master/replica replication (role, master address, mode, in-sync rules).
    replication: ReplicationConfig = dataclasses.field(default_factory=ReplicationConfig)
    # The cluster: the group's Lease, other groups, external access.
    cluster: ClusterConfig = dataclasses.field(default_factory=ClusterConfig)
    # TLS on the client port(s): permissive serves TLS and plaintext on one port.
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)
    # Client connections: time to open, idleness, how many at once, accept pauses.
    connections: ConnectionLimits = dataclasses.field(default_factory=ConnectionLimits)
    # Request signatures and ACLs (off by default).
    auth: AuthConfig = dataclasses.field(default_factory=AuthConfig)
    # What the client port holds of requests not yet taken by their handlers, and for how long.
    request_buffers: RequestBufferConfig = dataclasses.field(default_factory=RequestBufferConfig)

    @property
    def remoting_enabled(self) -> bool:
        return self.remoting_listen.strip().lower() not in ("", "off")

    @property
    def min_invisible_time_ms(self) -> int:
        return round(self.min_invisible_time_s * 1000)

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
        if self.remoting_enabled:
            host, _, port = self.remoting_listen.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(
                    f"--remoting-listen must be HOST:PORT, or empty (or off) to serve no "
                    f"remoting port; got {self.remoting_listen!r}"
                )
        if self.remoting_advertise:
            parse_host_port(self.remoting_advertise, "--remoting-advertise")
        if self.remoting_external_listen:
            if not self.remoting_enabled:
                raise ValueError(
                    "--remoting-external-listen needs the remoting port; set --remoting-listen "
                    "too, or leave both off"
                )
            parse_host_port(self.remoting_external_listen, "--remoting-external-listen")
        if self.max_delivery_attempts < 1:
            raise ValueError("max delivery attempts must be at least 1")
        if not 0 <= self.min_invisible_time_ms <= self.max_invisible_time_ms:
            raise ValueError(
                f"--min-invisible-time must be 0 to {self.max_invisible_time_ms // 1000} seconds"
            )
        if self.transaction_check_interval_s <= 0:
            raise ValueError("the transaction check interval must be positive")
        if self.transaction_timeout_s < 0 or self.transaction_check_max < 0:
            raise ValueError("the transaction timeout and check maximum cannot be negative")
        self.tls.validate()
        self.connections.validate()
        check_peers_can_connect(
            self.tls,
            has_peers=bool(self.cluster.peers)
            or self.replication.role is Role.LEASE
            or self.replication.enabled,
        )
        self.replication.validate()
        self.auth.validate()
        self.request_buffers.validate()
        self.cluster.validate(under_lease=self.replication.role is Role.LEASE)
