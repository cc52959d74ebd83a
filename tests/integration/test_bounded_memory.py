"""A broker with clients that send on their Telemetry stream and never read.

Several raw gRPC Telemetry streams (each on its own connection) send Settings as
fast as they can and never read a reply, while an official RocketMQ client keeps
producing and consuming. The broker's resident memory, sampled from
``/proc/<pid>/status``, must stay within the budget ``messaging/clients.py`` states,
the flooding streams must be held back by flow control, and the other client
must be served throughout.

What a never-reading stream costs is what the broker accepted from it before flow
control held it back: its outbox and the stream's HTTP/2 receive window. The broker's
server gives that window back only as the handler takes messages (``frontdoor/grpc/call.py``), so
a stream that is not read holds at most the outbox and one window (64 KiB), however busy
the broker is. A failure says how much each stream sent before it was held back.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker
from tests.support.process_stats import resident_bytes

from skiff_broker.messaging.clients import TELEMETRY_OUTBOX_LIMIT
from skiff_broker.metadata.topic_table import TopicConfig

MiB = 1024 * 1024
TOPIC = "memory-orders"
FLOODING_STREAMS = 4
# What a never-reading stream may cost the broker (messaging/clients.py): its
# bounded outbox of replies plus the server's buffers for one stream.
BUDGET_PER_STREAM = 16 * MiB
# Each Settings names this many long topics, so each reply is about 13 KB.
SETTINGS_TOPICS = 200
# Served rounds in a row in which no flooding stream got to send anything (after
# each sent more than its outbox holds): then flow control holds them all.
STALLED_ROUNDS = 3
# A bound on the work, not on time: the streams must be held back well before.
MAX_ROUNDS = 500
PER_ROUND = 5
DEADLINE_S = 60.0


class FloodingStream:
    """A Telemetry stream on its own connection that sends Settings and never reads."""

    def __init__(self, endpoint: str, number: int) -> None:
        self.sent = 0
        self._stopped = threading.Event()
        self._channel = grpc.insecure_channel(endpoint)
        settings = pb.Settings(
            client_type=pb.ClientType.PRODUCER,
            publishing=pb.Publishing(
                topics=[
                    pb.Resource(name=f"flood-{number}-{i:04d}-" + "x" * 48)
                    for i in range(SETTINGS_TOPICS)
                ]
            ),
        )
        self.command = spb.TelemetryCommand(settings=settings)
        self._call = MessagingServiceStub(self._channel).Telemetry(
            self._commands(), metadata=[("x-mq-client-id", f"flooder-{number}-{uuid.uuid4().hex}")]
        )

    def _commands(self) -> Iterator[spb.TelemetryCommand]:
        while not self._stopped.is_set():
            self.sent += 1
            yield self.command

    def close(self) -> None:
        self._stopped.set()
        self._call.cancel()
        self._channel.close()


@contextlib.contextmanager
def flooding_streams(endpoint: str, count: int) -> Iterator[list[FloodingStream]]:
    streams = [FloodingStream(endpoint, number) for number in range(count)]
    try:
        yield streams
    finally:
        for stream in streams:
            stream.close()


class ServedClient:
    """The official client, producing and consuming one round at a time."""

    def __init__(self, endpoint: str) -> None:
        config = ClientConfiguration(endpoint, Credentials())
        self.producer = Producer(config, (TOPIC,))
        self.consumer = SimpleConsumer(config, "memory-readers", {TOPIC: FilterExpression()}, 2)
        self.produced = 0

    def __enter__(self) -> ServedClient:
        self.producer.startup()
        self.consumer.startup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.consumer.shutdown()
        self.producer.shutdown()

    def round(self) -> None:
        """Send a few messages and receive exactly those back."""
        sent = set()
        for _ in range(PER_ROUND):
            msg = Message()
            msg.topic = TOPIC
            msg.body = f"served-{self.produced}".encode()
            self.produced += 1
            sent.add(msg.body)
            self.producer.send(msg)
        received = set()
        end = time.monotonic() + DEADLINE_S
        while received != sent:
            assert time.monotonic() < end, f"the served client got {received} of {sent}"
            for msg in self.consumer.receive(PER_ROUND, 30):
                received.add(msg.body)
                self.consumer.ack(msg)


def test_never_reading_telemetry_streams_stay_within_the_memory_budget(tmp_path: Path) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1))
    with running_broker(tmp_path) as broker:
        run_flood(broker)


def run_flood(broker: BrokerProcess) -> None:
    pid = broker.proc.pid
    budget = FLOODING_STREAMS * BUDGET_PER_STREAM
    with ServedClient(broker.endpoint) as served:
        served.round()  # the served client's own working set is in the baseline
        baseline = resident_bytes(pid)
        peak = baseline
        with flooding_streams(broker.endpoint, FLOODING_STREAMS) as streams:
            reply_size = streams[0].command.ByteSize()
            # Unheld, the replies offered by then would be far over budget.
            offered_limit = 8 * budget
            stalled = 0
            last_sent = -1
            rounds = 0
            while stalled < STALLED_ROUNDS:
                assert rounds < MAX_ROUNDS, (
                    f"the streams were not held back: {[s.sent for s in streams]} sent"
                )
                served.round()
                rounds += 1
                peak = max(peak, resident_bytes(pid))
                grown = (peak - baseline) / MiB
                sent_mib = [round(s.sent * reply_size / MiB) for s in streams]
                assert peak - baseline <= budget, (
                    f"broker RSS grew by {grown:.0f} MiB with {FLOODING_STREAMS} never-reading "
                    f"streams; the budget is {budget / MiB:.0f} MiB. Each stream sent about "
                    f"{sent_mib} MiB of Settings before flow control held it back"
                )
                sent = sum(stream.sent for stream in streams)
                assert sent * reply_size < offered_limit, (
                    f"the streams were never held back: {sent} Settings sent"
                )
                past_outbox = all(s.sent > TELEMETRY_OUTBOX_LIMIT for s in streams)
                stalled = stalled + 1 if sent == last_sent and past_outbox else 0
                last_sent = sent
            assert served.produced == rounds * PER_ROUND + PER_ROUND
        assert broker.proc.poll() is None
