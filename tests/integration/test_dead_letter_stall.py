"""Dead-lettering waits for the replicas without holding the broker's event loop.

A master under SYNC replication acknowledges a write once its in-sync replica
holds it. With that replica stopped (SIGSTOP: its connection stays open, so it
stays in sync), moving a message to ``%DLQ%<group>`` is a write that waits. While
it waits, another connection's request must be answered: before, the move was a
blocking store write made on the event loop, and every connection waited with it
until the replication timeout, or (under SYNC replication, where the replica's
acknowledgement could never arrive on the blocked loop) the move was acknowledged
without waiting for the replica at all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.broker_process import (
    SHORT_INVISIBLE_ARGS,
    BrokerProcess,
    create_topics,
    data_dir_of,
    start_broker,
)
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage, ReceivedMessage
from skiff_broker.metadata.topic_table import TopicConfig, TopicTable

TOPIC = "dlq-orders"
GROUP = "dlq-workers"
DLQ_TOPIC = f"%DLQ%{GROUP}"
# Far longer than the test needs the write to wait: the replica is let go well before.
SYNC_TIMEOUT_S = "120"
# The stopped replica's connection stays open: it stays in sync meanwhile.
HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "300")


@contextlib.contextmanager
def master_and_replica(tmp_path: Path, *master_args: str) -> Iterator[tuple[BrokerProcess, ...]]:
    create_topics(data_dir_of(tmp_path / "master"), TopicConfig(TOPIC, 1, 1))
    started: list[BrokerProcess] = []
    try:
        (tmp_path / "master").mkdir(exist_ok=True)
        master = start_broker(
            tmp_path / "master",
            "--role",
            "MASTER",
            "--replication-mode",
            "SYNC",
            "--sync-replication-timeout",
            SYNC_TIMEOUT_S,
            *HEARTBEATS,
            *SHORT_INVISIBLE_ARGS,
            *master_args,
        )
        started.append(master)
        (tmp_path / "replica").mkdir()
        replica = start_broker(
            tmp_path / "replica",
            "--role",
            "REPLICA",
            "--master-address",
            master.ha_endpoint,
            *HEARTBEATS,
        )
        started.append(replica)
        yield master, replica
    finally:
        for broker in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(broker.proc.pid, signal.SIGCONT)
            broker.kill()


def replica_in_sync(master: BrokerProcess, replica: BrokerProcess) -> bool:
    with AdminClient(master.endpoint) as admin:
        state = admin.broker_info()
    with AdminClient(replica.endpoint) as admin:
        copied = admin.broker_info().commit_log_max_offset
    return copied == state.commit_log_max_offset and any(r.in_sync for r in state.replicas)


def topics_on_disk(broker: BrokerProcess) -> set[str]:
    """The topics the broker has made durable (topics.json and its journal)."""
    table = TopicTable(str(broker.data_dir / "config" / "topics.json"))
    with contextlib.suppress(ValueError):
        table.load()
    return {topic.name for topic in table.all()}


def moves(broker: BrokerProcess) -> list[str]:
    """The broker's log lines saying a move to the DLQ topic finished (done or failed)."""
    return [
        r["msg"]
        for r in broker.log_lines()
        if DLQ_TOPIC in r.get("msg", "") and ("moved" in r["msg"] or "could not move" in r["msg"])
    ]


@pytest.mark.parametrize("door", ["ForwardMessageToDeadLetterQueue", "attempts used up"])
def test_a_dead_letter_waiting_for_a_stalled_replica_leaves_other_clients_served(
    tmp_path: Path, door: str
) -> None:
    with (
        master_and_replica(tmp_path, "--max-delivery-attempts", "1") as (master, replica),
        MessagingClient(master.endpoint, timeout=300) as client,
    ):
        client.send([OutgoingMessage(TOPIC, b"poison")])
        # Until the replica holds the log and counts as in sync: then SYNC writes wait for it.
        wait_for(lambda: replica_in_sync(master, replica), "the replica in sync")
        [received] = client.receive(GROUP, TOPIC, max_messages=1, invisible_s=1)
        assert received.body == b"poison"

        os.kill(replica.proc.pid, signal.SIGSTOP)
        outcome: list[object] = []

        def dead_letter() -> None:
            try:
                if door == "ForwardMessageToDeadLetterQueue":
                    client.forward_to_dead_letter(GROUP, TOPIC, received)
                else:
                    # Due again after its invisible time, with no attempt left.
                    outcome.extend(client.receive(GROUP, TOPIC, max_messages=1, wait_s=3))
                outcome.append("done")
            except Exception as exc:
                outcome.append(exc)

        mover = threading.Thread(target=dead_letter, daemon=True)
        mover.start()
        # The DLQ topic is made just before the message is written to it.
        wait_for(lambda: DLQ_TOPIC in topics_on_disk(master), "the DLQ topic")

        # Another connection is answered while the move waits for the replica.
        with AdminClient(master.endpoint, timeout=300) as admin:
            assert admin.broker_info().role == "MASTER"
        # The move still waits: it neither went ahead without the replica nor held the
        # other request until it was done.
        assert moves(master) == [], "the move did not wait for the replica while others were served"

        os.kill(replica.proc.pid, signal.SIGCONT)
        mover.join(timeout=300)
        assert not mover.is_alive()
        assert outcome[-1] == "done", outcome
        assert not [m for m in outcome if isinstance(m, ReceivedMessage)]
        wait_for(lambda: moves(master), "the move to the DLQ topic")
        [moved] = moves(master)
        assert moved.startswith(f"moved {received.message_id} after 1 attempts to {DLQ_TOPIC}")

        # The message now waits in the DLQ topic, once, and nowhere else.
        assert client.receive(GROUP, TOPIC, max_messages=1, wait_s=2) == []
        [dead] = client.receive("dlq-readers", DLQ_TOPIC, max_messages=1, wait_s=10)
        assert dead.body == b"poison"
        # And nothing held the master's event loop meanwhile.
        master.assert_loop_never_held()
