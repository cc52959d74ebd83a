"""Names of the broker's spans, span attributes and metrics.

They are a contract with whatever reads exported telemetry (dashboards, the
Spark job that reports append/flush latency per broker, topic, flush type and
replication mode), so they live in one place. Standard OpenTelemetry names are
used where one exists; the rest carry a ``skiff.`` prefix.
"""

from __future__ import annotations

# Instrumentation scopes. Names as exported, not module paths: SERVER_SCOPE kept its
# name when the services moved to messaging/ and frontdoor/.
STORE_SCOPE = "skiff_broker.store"
SERVER_SCOPE = "skiff_broker.server"

# Spans. Server spans are named after the gRPC method, e.g.
# "apache.rocketmq.v2.MessagingService/SendMessage".
APPEND_SPAN = "skiff.store.append"
FLUSH_SPAN = "skiff.store.flush"

# Attributes on append and flush spans (and, where they fit, on histogram points).
BROKER = "skiff.broker"
FLUSH_TYPE = "skiff.flush_type"  # SYNC_FLUSH | ASYNC_FLUSH
REPLICATION_MODE = "skiff.replication_mode"  # ASYNC | SYNC | NONE
MESSAGING_SYSTEM = "messaging.system"
TOPIC = "messaging.destination.name"
QUEUE_ID = "messaging.destination.partition.id"  # a string, as the convention says
MESSAGE_COUNT = "messaging.batch.message_count"
APPEND_BYTES = "skiff.append.bytes"  # commit-log bytes of the batch's records
PUT_STATUS = "skiff.put_status"  # PUT_OK, FLUSH_DISK_TIMEOUT, DISK_FULL, ...
FLUSH_BYTES = "skiff.flush.bytes"
FLUSH_PAGES = "skiff.flush.pages"
FLUSH_WAITERS = "skiff.flush.waiters"  # group-commit appenders served by one flush
FLUSH_OUTCOME = "skiff.flush.outcome"  # ok | error

# Replication does not exist yet: every broker is standalone.
REPLICATION_NONE = "NONE"

# Histograms, in seconds.
APPEND_DURATION = "skiff.store.append.duration"
FLUSH_DURATION = "skiff.store.flush.duration"
# From 50 µs (an ASYNC_FLUSH append) to 10 s (past the default 5 s SYNC_FLUSH timeout).
LATENCY_BUCKETS_S = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

# RocketMQ 5's broker metrics, under its names and label names, so that dashboards and
# alerts written for RocketMQ read Skiff's too. The counters' names end in _total as
# RocketMQ's do; their units are in the descriptions, not the instruments, because a
# Prometheus exporter appends a unit to the name (rocketmq_message_size would become
# rocketmq_message_size_bytes).
MESSAGES_IN = "rocketmq_messages_in_total"
MESSAGES_OUT = "rocketmq_messages_out_total"
THROUGHPUT_IN = "rocketmq_throughput_in_total"
THROUGHPUT_OUT = "rocketmq_throughput_out_total"
MESSAGE_SIZE = "rocketmq_message_size"
CONSUMER_READY = "rocketmq_consumer_ready_messages"
CONSUMER_INFLIGHT = "rocketmq_consumer_inflight_messages"
CONSUMER_LAG = "rocketmq_consumer_lag_messages"
# Skiff's own: client sessions remembered, by client type (see messaging/clients.py).
CLIENT_SESSIONS = "skiff_client_sessions"
LABEL_CLIENT_TYPE = "client_type"  # producer | simple_consumer | push_consumer | ...
# Skiff's own: CPU seconds by thread role (see telemetry/thread_cpu.py).
THREAD_CPU = "skiff_thread_cpu_seconds_total"
LABEL_THREAD = "thread"  # event-loop | dispatcher | async-flush | ... | other
LABEL_CLUSTER = "cluster"
LABEL_NODE_TYPE = "node_type"
LABEL_NODE_ID = "node_id"
LABEL_TOPIC = "topic"
LABEL_CONSUMER_GROUP = "consumer_group"
LABEL_MESSAGE_TYPE = "message_type"  # normal | fifo | delay | transaction
MESSAGE_TYPE_NORMAL = "normal"
# skiff.records.v1 Fetch requests name no group: what they deliver is counted under this one.
NO_CONSUMER_GROUP = ""
NODE_TYPE_BROKER = "broker"
# RocketMQ's cluster name when none is configured.
DEFAULT_CLUSTER = "DefaultCluster"
# RocketMQ's message size buckets: 1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB, more.
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)

# Messaging semantic conventions on SERVER spans.
MESSAGING_OPERATION_TYPE = "messaging.operation.type"  # send | receive | settle
MESSAGING_OPERATION = "messaging.operation"  # the older attribute, same values
CONSUMER_GROUP = "messaging.consumer.group.name"
MESSAGE_ID = "messaging.message.id"
