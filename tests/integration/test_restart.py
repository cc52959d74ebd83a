"""Restarting a broker on its data directory: consumers continue where they were.

A clean stop (SIGTERM) persists everything: acked messages never come back, and
messages that were received but not acked come back once, counted as a second
attempt. After SIGKILL (with SYNC_FLUSH, so every acknowledged send is on disk)
no sent message is lost, and only messages whose acks the broker had not yet
persisted may be delivered again.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from tests.support.broker_process import (
    COMMIT_LOG_FILE_SIZE,
    SHORT_INVISIBLE_ARGS,
    SKIFF,
    BrokerProcess,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
)

from skiff_broker.metadata.consumer_offsets import ConsumerOffsetTable
from skiff_broker.metadata.topic_table import TopicConfig

TOPIC = "restart-orders"
GROUP = "restart-group"
DEADLINE_S = 90.0
# Received-but-unacked messages become visible again this soon after the restart.
INVISIBLE_S = 3


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, 4, 4))
    return tmp_path


def config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


def produce(broker: BrokerProcess, count: int, start: int = 0) -> dict[str, bytes]:
    """Send ``count`` messages; returns the acknowledged ones by message id."""
    client = Producer(config(broker), (TOPIC,))
    client.startup()
    try:
        sent = {}
        for i in range(start, start + count):
            msg = Message()
            msg.topic = TOPIC
            msg.body = b"order-%d" % i
            sent[client.send(msg).message_id] = msg.body
        return sent
    finally:
        client.shutdown()


# A long poll outlasts the invisible time, so an empty one means nothing is still due.
AWAIT_S = INVISIBLE_S + 2


@contextlib.contextmanager
def consumer(broker: BrokerProcess) -> Iterator[SimpleConsumer]:
    client = SimpleConsumer(config(broker), GROUP, {TOPIC: FilterExpression()}, AWAIT_S)
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def receive(client: SimpleConsumer, count: int, *, ack: bool) -> list[Message]:
    """Exactly ``count`` messages (asking for no more than are still wanted)."""
    received: list[Message] = []
    end = time.monotonic() + DEADLINE_S
    while len(received) < count:
        assert time.monotonic() < end, f"only {len(received)} of {count} messages arrived"
        for msg in client.receive(count - len(received), INVISIBLE_S):
            received.append(msg)
            if ack:
                client.ack(msg)
    return received


def drain(client: SimpleConsumer) -> list[Message]:
    """Receive and ack until a long poll (longer than the invisible time) brings nothing."""
    received: list[Message] = []
    end = time.monotonic() + DEADLINE_S
    while batch := client.receive(32, INVISIBLE_S):
        assert time.monotonic() < end, "messages keep coming"
        for msg in batch:
            received.append(msg)
            client.ack(msg)
    return received


def ids(messages: list[Message]) -> list[str]:
    return sorted(m.message_id for m in messages)


def persisted_consumed(data_dir: Path) -> int:
    """Messages the group's committed offsets on disk cover, over all queues."""
    table = ConsumerOffsetTable(str(data_dir / "config" / "consumerOffset.json"))
    table.load()
    return sum(table.offsets_of(GROUP, TOPIC).values())


def stored_records(data_dir: Path) -> int:
    result = subprocess.run(
        [
            *SKIFF,
            "store",
            "check",
            "--data-dir",
            str(data_dir),
            "--commit-log-file-size",
            COMMIT_LOG_FILE_SIZE,
            "--json",
        ],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)["records"]


def test_clean_restart_continues_from_the_committed_offsets(tmp):
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        sent = produce(broker, 40)
        with consumer(broker) as client:
            acked = receive(client, 15, ack=True)
            unacked = receive(client, 5, ack=False)
        broker.stop()

    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        later = produce(broker, 10, start=40)
        with consumer(broker) as client:
            after = drain(client)

    assert ids(after) == sorted(set(sent) - set(ids(acked)) | set(later)), (
        "after a clean restart every message not acked comes back once, and no acked one"
    )
    attempts = {m.message_id: m.delivery_attempt for m in after}
    assert all(attempts[m.message_id] == 2 for m in unacked), "their first delivery counts"
    assert sum(a == 1 for a in attempts.values()) == len(after) - len(unacked)
    assert all(m.body == {**sent, **later}[m.message_id] for m in after)
    assert stored_records(data_dir_of(tmp)) == 50


def test_killed_sync_flush_broker_loses_no_acknowledged_message(tmp):
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS, "--flush-type", "SYNC_FLUSH") as broker:
        sent = produce(broker, 40)
        with consumer(broker) as client:
            persisted = receive(client, 15, ack=True)
            # Wait for the periodic persist, so these acks are known to be on disk.
            end = time.monotonic() + DEADLINE_S
            while persisted_consumed(broker.data_dir) != 15:
                assert time.monotonic() < end, "the broker never persisted the group's offsets"
                time.sleep(0.2)
            maybe_persisted = receive(client, 5, ack=True)
            receive(client, 5, ack=False)
        # Acknowledged by the broker, never received before the crash.
        sent |= produce(broker, 10, start=40)
        broker.kill()

    with (
        running_broker(tmp, *SHORT_INVISIBLE_ARGS, "--flush-type", "SYNC_FLUSH") as broker,
        consumer(broker) as client,
    ):
        after = drain(client)

    after_ids = set(ids(after))
    assert not after_ids & set(ids(persisted)), "acks persisted before the crash hold"
    assert after_ids | set(ids(maybe_persisted)) >= set(sent) - set(ids(persisted)), (
        "every acknowledged send is consumed"
    )
    assert after_ids <= set(sent)
    assert len(after) == len(after_ids), "one delivery each after the restart"
    assert all(m.body == sent[m.message_id] for m in after)
    assert stored_records(data_dir_of(tmp)) == 50
