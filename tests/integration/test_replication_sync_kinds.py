"""Under SYNC replication, DELAY and TRANSACTION messages are acknowledged only once a
replica holds them, like normal ones: a real master and replica, the replica stopped
(SIGSTOP), raw SendMessage calls of each kind.

Both kinds are stored on the event loop through the store's async put (the schedule
topic's copy, the half message), and the blocking puts that later move them (delivery
to the real topic, a rollback after the last check) run on the broker's own threads,
where the replication wait blocks as it should. Here the producer must see
SLAVE_PERSISTENCE_TIMEOUT while the replica is stopped, never OK; once the replica is
back, the same sends succeed and the replica's log holds them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, start_broker
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.metadata.topic_table import MessageType, TopicConfig

DELAYED = "sync-delayed"
TRANSACTIONAL = "sync-transactional"
FAST_HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "60")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    create_topics(
        data_dir_of(tmp_path / "master"),
        TopicConfig(DELAYED, 1, 1, message_type=MessageType.DELAY),
        TopicConfig(TRANSACTIONAL, 1, 1, message_type=MessageType.TRANSACTION),
    )
    started: list[BrokerProcess] = []
    try:
        master = start_broker(
            tmp_path / "master",
            "--role",
            "MASTER",
            "--replication-mode",
            "SYNC",
            "--sync-replication-timeout",
            "1",
            *FAST_HEARTBEATS,
        )
        started.append(master)
        (tmp_path / "replica").mkdir()
        replica = start_broker(
            tmp_path / "replica",
            "--role",
            "REPLICA",
            "--master-address",
            master.ha_endpoint,
            *FAST_HEARTBEATS,
        )
        started.append(replica)
        yield master, replica
    finally:
        for broker in started:
            if broker.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(broker.proc.pid, signal.SIGCONT)
                broker.kill()


def message(topic: str, message_type: int, body: bytes) -> pb.Message:
    system = pb.SystemProperties(
        message_id=uuid.uuid4().hex.upper(),
        body_encoding=pb.Encoding.IDENTITY,
        message_type=message_type,
        born_timestamp=Timestamp(seconds=int(time.time())),
        born_host="10.0.0.1",
    )
    if message_type == pb.MessageType.DELAY:
        # An hour ahead: the test sees the acknowledgement of its scheduling only.
        system.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 3_600_000)
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=system)


def send(broker: BrokerProcess, proto: pb.Message) -> pb.Status:
    with grpc.insecure_channel(broker.endpoint) as channel:
        response = MessagingServiceStub(channel).SendMessage(
            spb.SendMessageRequest(messages=[proto]), timeout=30
        )
    return response.status


def replica_caught_up(master: BrokerProcess, replica: BrokerProcess) -> bool:
    with AdminClient(master.endpoint) as admin:
        (status,) = admin.broker_info().replicas
    with AdminClient(replica.endpoint) as admin:
        held = admin.broker_info().commit_log_max_offset
    return status.in_sync and status.lag_bytes == 0 and held > 0


KINDS = [
    pytest.param(DELAYED, pb.MessageType.DELAY, id="delay"),
    pytest.param(TRANSACTIONAL, pb.MessageType.TRANSACTION, id="transaction-half"),
]


@pytest.mark.parametrize(("topic", "message_type"), KINDS)
def test_no_delay_or_transaction_message_is_acknowledged_before_a_replica_holds_it(
    pair: tuple[BrokerProcess, BrokerProcess], topic: str, message_type: int
) -> None:
    master, replica = pair
    assert send(master, message(topic, message_type, b"while in sync")).code == pb.Code.OK
    wait_for(lambda: replica_caught_up(master, replica), "the replica holding the first send")

    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        stalled = send(master, message(topic, message_type, b"while the replica is stopped"))
        assert stalled.code == pb.Code.SLAVE_PERSISTENCE_TIMEOUT, stalled
        assert "in-sync replicas" in stalled.message
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)

    wait_for(lambda: replica_caught_up(master, replica), "the replica caught up again")
    assert send(master, message(topic, message_type, b"after")).code == pb.Code.OK
    master.assert_loop_never_held()
    replica.assert_loop_never_held()
