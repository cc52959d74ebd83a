"""Master/replica replication with real broker processes on loopback.

A replica follows its master's commit log over the replication port and must end
up with the same bytes at the same offsets; consumers read from it (pull and pop)
while producers and consumer-group resets are kept off it. SYNC replication
acknowledges a send only once the replica holds it: after SIGKILL of the master
under load, every acknowledged message is on the replica. A replica that kept
bytes the new master never had cuts them, and promotion refuses a replica that
is not in sync unless forced.
An old master started again with its first command after its replica was
promoted refuses to start with one line that says how to rejoin, and following
it loses no acknowledged message; a master whose former replica is gone starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
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
from rocketmq.grpc_protocol import service_pb2_grpc
from tests.support.broker_process import (
    SKIFF,
    BrokerProcess,
    broker_env,
    create_topics,
    data_dir_of,
    start_broker,
)
from tests.support.kube_control_plane import free_port
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient, BrokerInfo, ResetTo
from skiff_broker.client.errors import BrokerUnavailable, FailedPrecondition, MessagingError
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage, SendReceipt
from skiff_broker.client.producer import BatchingProducer
from skiff_broker.client.records import encode_record, topic_field
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc
from skiff_broker.store.message import encode_properties

TOPIC = "replicated-orders"
QUEUES = 4
DEADLINE_S = 60.0
# Short heartbeats so that a lost peer is noticed within the test's patience.
FAST_HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "5")


# -- brokers ----------------------------------------------------------------------


class Group:
    """The brokers a test started; every one still running is killed at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.brokers: list[BrokerProcess] = []

    def master(self, name: str, *args: str) -> BrokerProcess:
        return self._start(name, "--role", "MASTER", *FAST_HEARTBEATS, *args)

    def replica(self, name: str, master: BrokerProcess | str, *args: str) -> BrokerProcess:
        address = master if isinstance(master, str) else master.ha_endpoint
        return self._start(
            name, "--role", "REPLICA", "--master-address", address, *FAST_HEARTBEATS, *args
        )

    def _start(self, name: str, *args: str) -> BrokerProcess:
        home = self.tmp_path / name
        home.mkdir(exist_ok=True)
        broker = start_broker(home, *args)
        self.brokers.append(broker)
        return broker

    def cleanup(self) -> None:
        for broker in self.brokers:
            if broker.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(broker.proc.pid, signal.SIGCONT)
                broker.kill()


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    g = Group(tmp_path)
    # The master's topic; replicas must receive it from the master.
    create_topics(data_dir_of(tmp_path / "master"), TopicConfig(TOPIC, QUEUES, QUEUES))
    try:
        yield g
    finally:
        g.cleanup()


def info(broker: BrokerProcess) -> BrokerInfo:
    with AdminClient(broker.endpoint) as admin:
        return admin.broker_info()


def wait_caught_up(master: BrokerProcess, replica: BrokerProcess) -> int:
    """Until the replica's log and queues reach the master's end; returns that end."""
    end = info(master).commit_log_max_offset

    def caught_up() -> bool:
        state = info(replica)
        return state.commit_log_max_offset == end and state.dispatched_offset == end

    wait_for(caught_up, f"the replica to reach offset {end}")
    return end


def log_bytes(broker: BrokerProcess, end: int) -> bytes:
    """The first ``end`` bytes of a broker's commit log, read from its segment files."""
    directory = broker.data_dir / "commitlog"
    data = b"".join((directory / name).read_bytes() for name in sorted(os.listdir(directory)))
    assert len(data) >= end
    return data[:end]


# -- clients ----------------------------------------------------------------------


def send(broker: BrokerProcess, bodies: list[bytes], *, tag: str = "t") -> dict[str, bytes]:
    """Send one message per request; returns the acknowledged ones by message id."""
    with MessagingClient(broker.endpoint) as client:
        messages = [OutgoingMessage(TOPIC, body, tag=tag) for body in bodies]
        receipts = list(client.send_each(messages, in_flight=16))
    return {r.message_id: m.body for r, m in zip(receipts, messages, strict=True)}


def pull_pairs(broker: BrokerProcess) -> list[tuple[str, bytes]]:
    """(message id, body) of every message of the topic through raw PullMessage."""
    found: list[tuple[str, bytes]] = []
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                request = spb.PullMessageRequest(
                    group=pb.Resource(name="replica-reader"),
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=queue_id),
                    offset=offset,
                    batch_size=256,
                    filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                )
                batch = []
                for frame in stub.PullMessage(request, timeout=30):
                    content = frame.WhichOneof("content")
                    if content == "message":
                        batch.append(frame.message)
                    elif content == "next_offset":
                        offset = frame.next_offset
                if not batch:
                    break
                found.extend((m.system_properties.message_id, m.body) for m in batch)
    return found


def pulled_bodies(broker: BrokerProcess) -> list[bytes]:
    """Bodies of every message of the topic through raw PullMessage."""
    return [body for _, body in pull_pairs(broker)]


def pull_all(broker: BrokerProcess) -> dict[str, bytes]:
    """Every message of the topic through raw PullMessage, by message id."""
    return dict(pull_pairs(broker))


def routes(broker: BrokerProcess) -> list[pb.MessageQueue]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
        response = stub.QueryRoute(request, timeout=30)
    assert response.status.code == pb.Code.OK, response.status
    return list(response.message_queues)


def client_config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


# -- tests ------------------------------------------------------------------------


async def batching_send(broker: BrokerProcess, body: bytes) -> SendReceipt | Exception:
    """One message through BatchingProducer (a record append); its receipt or its error."""
    async with BatchingProducer(broker.endpoint, request_timeout_s=30) as producer:
        try:
            return await producer.send(TOPIC, body)
        except Exception as exc:
            return exc


def test_async_replica_holds_the_same_bytes_and_takes_no_writes(group: Group) -> None:
    master = group.master("master")
    replica = group.replica("replica", master)
    sent = send(master, [b"order-%d" % i * 20 for i in range(300)])
    # Through the official client too: its route leads it to the master. (Its message
    # ids may repeat those of the other client in this process, so bodies are compared.)
    producer = Producer(client_config(master), (TOPIC,))
    producer.startup()
    official = []
    try:
        for i in range(20):
            message = Message()
            message.topic = TOPIC
            message.body = b"official-%d" % i
            producer.send(message)
            official.append(message.body)
    finally:
        producer.shutdown()

    end = wait_caught_up(master, replica)
    assert log_bytes(replica, end) == log_bytes(master, end)
    assert sorted(pulled_bodies(replica)) == sorted([*sent.values(), *official])

    master_state, replica_state = info(master), info(replica)
    assert (master_state.role, master_state.replication_mode) == ("MASTER", "ASYNC")
    (seen,) = master_state.replicas
    assert (seen.acked_offset, seen.lag_bytes, seen.in_sync, seen.connected) == (end, 0, True, True)
    shown = subprocess.run(
        [*SKIFF, "admin", "info", "--endpoint", master.endpoint],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[-2:]
    assert header.startswith("REPLICA") and "LAG BYTES" in header and "IN SYNC" in header
    assert row.split()[2:] == [str(end), "0", "yes", "yes"]
    assert replica_state.role == "REPLICA"
    assert replica_state.master_address == master.ha_endpoint
    assert replica_state.epoch == master_state.epoch == 1
    assert not replica_state.writable

    # The replica offers its queues for reading only, and refuses a producer clearly.
    assert {q.permission for q in routes(replica)} == {pb.Permission.READ}
    assert {q.permission for q in routes(master)} == {pb.Permission.READ_WRITE}
    with (
        MessagingClient(replica.endpoint) as client,
        pytest.raises(MessagingError, match="is a replica and takes no writes") as refused,
    ):
        client.send([OutgoingMessage(TOPIC, b"to the replica")])
    assert refused.value.code == "FORBIDDEN"
    # Skiff's producer finds no writable queue there; a record append sent anyway is refused.
    routed = asyncio.run(batching_send(replica, b"appended to the replica"))
    assert isinstance(routed, MessagingError) and routed.code == "FORBIDDEN", routed
    record = encode_record(topic_field(TOPIC), b"x", encode_properties({"UNIQ_KEY": "ID"}), 1)
    with (
        grpc.insecure_channel(replica.endpoint) as channel,
        pytest.raises(grpc.RpcError) as appended,
    ):
        records_pb2_grpc.RecordServiceStub(channel).Append(
            rpb.AppendRequest(topic=TOPIC, records=record), timeout=30
        )
    assert appended.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "is a replica and takes no writes" in appended.value.details()
    assert info(replica).commit_log_max_offset == end


def test_topic_config_and_consumer_offsets_reach_the_replica(group: Group) -> None:
    master = group.master("master")
    replica = group.replica("replica", master)
    with AdminClient(master.endpoint) as admin:
        admin.create_topic("created-later", read_queues=2, write_queues=2)
    with AdminClient(replica.endpoint) as admin:
        wait_for(
            lambda: "created-later" in {t.name for t in admin.list_topics()},
            "the new topic on the replica",
        )
        with pytest.raises(FailedPrecondition, match="replica"):
            admin.create_topic("on-the-replica")

    queue = pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=2)
    reader = pb.Resource(name="offset-keeper")
    with grpc.insecure_channel(master.endpoint) as channel:
        update = spb.UpdateOffsetRequest(group=reader, message_queue=queue, offset=17)
        reply = service_pb2_grpc.MessagingServiceStub(channel).UpdateOffset(update, timeout=30)
        assert reply.status.code == pb.Code.OK

    def replica_offset() -> int:
        with grpc.insecure_channel(replica.endpoint) as channel:
            request = spb.GetOffsetRequest(group=reader, message_queue=queue)
            reply = service_pb2_grpc.MessagingServiceStub(channel).GetOffset(request, timeout=30)
        return reply.offset if reply.status.code == pb.Code.OK else -1

    wait_for(lambda: replica_offset() == 17, "the committed offset on the replica")


def test_group_offsets_are_reset_on_the_master_and_refused_on_a_replica(group: Group) -> None:
    master = group.master("master")
    replica = group.replica("replica", master)
    with AdminClient(master.endpoint) as admin:
        admin.reset_consumer_group("resetters", TOPIC, ResetTo.LATEST)
    with AdminClient(replica.endpoint) as admin:
        wait_for(
            lambda: "resetters" in {g.group for g in admin.list_consumer_groups()},
            "the group on the replica",
        )
        # A dry run changes nothing, so a replica answers it.
        assert len(admin.reset_consumer_group("resetters", TOPIC, ResetTo.EARLIEST, dry_run=True))
        with pytest.raises(FailedPrecondition, match=r"replica.*on the master"):
            admin.reset_consumer_group("resetters", TOPIC, ResetTo.EARLIEST)
        with pytest.raises(FailedPrecondition, match=r"replica.*on the master"):
            admin.delete_consumer_group("resetters")
    with AdminClient(master.endpoint) as admin:
        admin.delete_consumer_group("resetters")
    with AdminClient(replica.endpoint) as admin:
        wait_for(
            lambda: "resetters" not in {g.group for g in admin.list_consumer_groups()},
            "the deletion on the replica",
        )


def test_sync_replication_loses_no_acknowledged_message_when_the_master_is_killed(
    group: Group,
) -> None:
    master = group.master("master", "--replication-mode", "SYNC")
    replica = group.replica("replica", master)
    acknowledged: dict[str, bytes] = {}
    stop = threading.Event()

    def produce() -> None:
        with MessagingClient(master.endpoint, timeout=10) as client:
            counter = 0
            while not stop.is_set():
                messages = [
                    OutgoingMessage(TOPIC, b"sync-%06d-" % (counter + i) + b"x" * 200)
                    for i in range(64)
                ]
                counter += 64
                try:
                    for receipt, message in zip(
                        client.send_each(messages, in_flight=32), messages, strict=False
                    ):
                        acknowledged[receipt.message_id] = message.body
                except (BrokerUnavailable, MessagingError):
                    return

    producers = [threading.Thread(target=produce) for _ in range(2)]
    for thread in producers:
        thread.start()
    wait_for(lambda: len(acknowledged) >= 2000, "load on the master")
    master.kill()
    stop.set()
    for thread in producers:
        thread.join(timeout=60)
    assert len(acknowledged) >= 2000

    # The replica still runs: everything acknowledged is readable there, unchanged.
    on_replica = pull_all(replica)
    missing = [m for m in acknowledged if m not in on_replica]
    assert not missing, f"{len(missing)} acknowledged messages are not on the replica"
    assert all(on_replica[m] == body for m, body in acknowledged.items())
    # And its log is the master's, byte for byte, as far as it goes.
    end = info(replica).commit_log_max_offset
    assert log_bytes(replica, end) == log_bytes(master, end)


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_restarted_replica_resumes_from_its_own_offset_and_catches_up(
    group: Group, how: str
) -> None:
    master = group.master("master")
    replica = group.replica("replica", master)
    first = send(master, [b"before-%d" % i for i in range(200)])
    held = wait_caught_up(master, replica)
    # A clean stop, or SIGKILL: then the replica's own crash recovery runs first.
    getattr(replica, how)()
    wait_for(lambda: not info(master).replicas[0].connected, "the master to see the replica go")
    later = send(master, [b"while-away-%d" % i * 50 for i in range(500)])
    assert not info(master).replicas[0].in_sync

    replica = group.replica("replica", master)
    end = wait_caught_up(master, replica)
    assert end > held
    assert log_bytes(replica, end) == log_bytes(master, end)
    assert pull_all(replica) == first | later
    resumed = [r["msg"] for r in replica.log_lines() if r["msg"].startswith("following master")]
    assert resumed and f"from {held} " in resumed[-1], resumed
    wait_for(lambda: info(master).replicas[0].in_sync, "the replica back in sync")


def test_reads_pull_and_pop_from_a_replica_while_the_master_is_down(group: Group) -> None:
    master = group.master("master")
    replica = group.replica("replica", master)
    sent = send(master, [b"read-me-%d" % i for i in range(120)], tag="keep")
    wait_caught_up(master, replica)
    master.kill()

    assert pull_all(replica) == sent
    consumer = SimpleConsumer(
        client_config(replica), "replica-poppers", {TOPIC: FilterExpression("keep")}, 5
    )
    consumer.startup()
    received: dict[str, bytes] = {}
    try:
        end = time.monotonic() + DEADLINE_S
        while len(received) < len(sent) and time.monotonic() < end:
            for message in consumer.receive(32, 30):
                received[message.message_id] = message.body
                consumer.ack(message)
    finally:
        consumer.shutdown()
    assert received == sent


def test_promotion_is_refused_out_of_sync_and_works_in_sync(group: Group) -> None:
    master = group.master("master")
    # Nothing listens at this address: the replica never hears from a master.
    orphan = group.replica("orphan", "127.0.0.1:9")
    with AdminClient(orphan.endpoint) as admin:
        with pytest.raises(FailedPrecondition, match=r"not in sync.*never heard"):
            admin.promote()
        assert admin.broker_info().role == "REPLICA"

    replica = group.replica("replica", master)
    sent = send(master, [b"kept-%d" % i for i in range(50)])
    held = wait_caught_up(master, replica)
    wait_for(lambda: info(replica).replica_in_sync, "the replica in sync")
    with AdminClient(master.endpoint) as admin, pytest.raises(FailedPrecondition, match="master"):
        admin.promote()
    master.kill()

    result = subprocess.run(
        [*SKIFF, "admin", "promote", "--endpoint", replica.endpoint],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "is now MASTER, epoch 2" in result.stdout
    state = info(replica)
    assert (state.role, state.epoch, state.epoch_start_offset) == ("MASTER", 2, held)
    assert state.writable and state.ha_address
    more = send(replica, [b"new-term-%d" % i for i in range(30)])
    assert pull_all(replica) == sent | more
    assert {q.permission for q in routes(replica)} == {pb.Permission.READ_WRITE}


def test_forced_promotion_and_a_diverged_replica_cuts_its_log(group: Group) -> None:
    # Term 1: a master and its replica share 100 messages.
    old = group.master("master")
    follower = group.replica("replica", old)
    shared = send(old, [b"shared-%d" % i for i in range(100)])
    common = wait_caught_up(old, follower)
    # The follower goes; the old master takes 60 more that only it ever holds.
    follower.stop()
    diverged = send(old, [b"diverged-%d" % i for i in range(60)])
    old_end = info(old).commit_log_max_offset
    old.stop()

    # The follower comes back to a dead master; it cannot know it is in sync.
    follower = group.replica("replica", old.ha_endpoint)
    with AdminClient(follower.endpoint) as admin:
        with pytest.raises(FailedPrecondition, match="not in sync"):
            admin.promote()
        promoted = admin.promote(force=True)
    assert (promoted.role, promoted.epoch, promoted.epoch_start_offset) == ("MASTER", 2, common)
    new_term = send(follower, [b"term-2-%d" % i * 3 for i in range(40)])

    # The old master returns as a replica of the new one: its 60 messages must go.
    returned = group.replica("master", promoted.ha_address)
    end = wait_caught_up(follower, returned)
    assert end != old_end
    assert log_bytes(returned, end) == log_bytes(follower, end)
    assert pull_all(returned) == shared | new_term
    assert not set(diverged) & set(pull_all(returned))
    cut = [r["msg"] for r in returned.log_lines() if "diverged" in r["msg"]]
    assert cut and f"at {common}" in cut[0], cut
    assert info(returned).epoch == 2


def test_a_stalled_replica_falls_out_of_sync_and_sync_sends_time_out(group: Group) -> None:
    gap = 64 * 1024
    master = group.master(
        "master",
        "--replication-mode",
        "SYNC",
        "--ha-max-gap",
        str(gap),
        "--sync-replication-timeout",
        "1",
        # The stalled replica's connection stays open: only the gap takes it out of sync.
        "--ha-heartbeat-timeout",
        "60",
    )
    replica = group.replica("replica", master, "--ha-heartbeat-timeout", "60")
    send(master, [b"in-sync"])
    wait_caught_up(master, replica)

    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        with MessagingClient(master.endpoint, timeout=30) as client:
            big = [OutgoingMessage(TOPIC, bytes([i]) * 30_000) for i in range(3)]
            with pytest.raises(MessagingError) as timed_out:
                client.send(big)
            assert timed_out.value.code == "SLAVE_PERSISTENCE_TIMEOUT"
            assert "in-sync replicas" in str(timed_out.value)

            (stalled,) = info(master).replicas
            assert stalled.connected and not stalled.in_sync
            assert stalled.lag_bytes > gap

            with pytest.raises(MessagingError) as again:
                client.send([OutgoingMessage(TOPIC, b"while out of sync")])
            assert again.value.code == "SLAVE_PERSISTENCE_TIMEOUT"
            # Records appended by Skiff's producer get the same answer, never a silent success.
            appended = asyncio.run(batching_send(master, b"appended while out of sync"))
            assert isinstance(appended, MessagingError), appended
            assert appended.code == "SLAVE_PERSISTENCE_TIMEOUT"
            assert "in-sync replicas" in appended.message
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)

    # Back: it catches up, is in sync again, and SYNC sends succeed.
    wait_for(lambda: info(master).replicas[0].in_sync, "the replica back in sync")
    assert send(master, [b"after"])


@pytest.mark.parametrize(
    ("pod_name", "extra", "message"),
    [
        ("skiff", (), "ending in -<ordinal>"),
        ("skiff-a-1", (), "needs its master's replication address"),
    ],
)
def test_auto_role_needs_an_ordinal_and_a_replica_needs_its_master(
    tmp_path: Path, pod_name: str, extra: tuple[str, ...], message: str
) -> None:
    result = subprocess.run(
        [*SKIFF, "broker", "--data-dir", str(tmp_path), "--role", "AUTO", *extra],
        env=broker_env({"SKIFF_POD_NAME": pod_name}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_heartbeats_find_a_silent_peer_in_both_directions(group: Group) -> None:
    quick = ("--ha-heartbeat-interval", "0.3", "--ha-heartbeat-timeout", "2")
    master = group.master("master", *quick)
    replica = group.replica("replica", master, *quick)
    send(master, [b"hello"])
    wait_caught_up(master, replica)
    assert info(master).replicas[0].connected and info(replica).replica_connected

    # A frozen replica keeps its connection open: only its missing heartbeats tell.
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: not info(master).replicas[0].connected, "the master to drop the silent replica"
        )
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    wait_for(lambda: info(master).replicas[0].connected, "the replica to reconnect")

    os.kill(master.proc.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: not info(replica).replica_connected, "the replica to drop the silent master"
        )
    finally:
        os.kill(master.proc.pid, signal.SIGCONT)
    wait_for(lambda: info(replica).replica_connected, "the replica to follow again")


def test_a_replica_follows_its_master_through_a_restart_into_a_new_term(group: Group) -> None:
    ha_listen = f"127.0.0.1:{free_port()}"
    master = group.master("master", "--ha-listen", ha_listen)
    replica = group.replica("replica", master)
    before = send(master, [b"term-1-%d" % i for i in range(80)])
    wait_caught_up(master, replica)
    master.stop()
    wait_for(lambda: not info(replica).replica_connected, "the replica to notice")

    master = group.master("master", "--ha-listen", ha_listen)
    assert info(master).epoch == 2
    after = send(master, [b"term-2-%d" % i for i in range(80)])
    end = wait_caught_up(master, replica)
    assert log_bytes(replica, end) == log_bytes(master, end)
    assert pull_all(replica) == before | after
    wait_for(lambda: info(replica).epoch == 2, "the new term on the replica")
    assert (replica.data_dir / "epoch").read_text() == (master.data_dir / "epoch").read_text()


def test_an_old_master_started_again_as_it_was_refuses_and_rejoins_losing_nothing(
    group: Group,
) -> None:
    first = ("--replication-mode", "ASYNC")
    old = group.master("master", *first)
    follower = group.replica("replica", old)
    before = send(old, [b"term-1-%d" % i for i in range(60)])
    wait_caught_up(old, follower)
    wait_for(lambda: info(follower).replica_in_sync, "the replica in sync")
    old.kill()
    with AdminClient(follower.endpoint) as admin:
        promoted = admin.promote()
    assert (promoted.role, promoted.epoch) == ("MASTER", 2)
    # Acknowledged by the promoted broker alone.
    after = send(follower, [b"term-2-%d" % i for i in range(40)])
    old_epochs = (old.data_dir / "epoch").read_bytes()

    result = subprocess.run(
        old.command, env=broker_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    line = errors[0]
    assert f"broker {follower.endpoint} was promoted to master of group broker-a at epoch 2" in (
        line
    )
    assert line.endswith(f"--role REPLICA --master-address {promoted.ha_address}"), line
    # It began no term, so it never took a write.
    assert (old.data_dir / "epoch").read_bytes() == old_epochs
    assert "listening on" not in result.stderr

    # Doing what the line says: the first command with the options it names.
    rejoin = line.partition("start it with ")[2].split()
    returned = group.master("master", *first, *rejoin)
    end = wait_caught_up(follower, returned)
    state = info(returned)
    assert (state.role, state.epoch, state.master_address) == ("REPLICA", 2, promoted.ha_address)
    assert log_bytes(returned, end) == log_bytes(follower, end)
    assert pull_all(returned) == before | after
    assert pull_all(follower) == before | after


def test_a_master_whose_former_replica_is_gone_starts_and_names_it(group: Group) -> None:
    master = group.master("master")
    replica = group.replica("replica", master)
    before = send(master, [b"kept-%d" % i for i in range(20)])
    wait_caught_up(master, replica)
    replica.stop()
    master.stop()

    master = group.master("master")
    state = info(master)
    assert (state.role, state.epoch, state.writable) == ("MASTER", 2, True)
    unreachable = [r["msg"] for r in master.log_lines() if "not reachable" in r["msg"]]
    assert unreachable and replica.endpoint in unreachable[0], unreachable
    after = send(master, [b"later-%d" % i for i in range(20)])
    assert pull_all(master) == before | after
