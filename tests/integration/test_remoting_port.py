"""The remoting port byte by byte: name-server answers, pulls, offsets and hostile clients.

Requests are written as RocketMQ's framing lays them out; a real broker process answers.
Hostile clients (malformed frames, a huge length, unknown codes, one that never reads)
lose their own connection at most: the broker keeps serving everyone else, and its memory
stays bounded while a client refuses to read.
"""

from __future__ import annotations

import json
import struct
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from tests.support.broker_fixture import module_broker
from tests.support.broker_process import SKIFF, BrokerProcess, broker_env, running_broker
from tests.support.process_stats import ResidentWatch, resident_bytes
from tests.support.remoting_client import Remoting
from tests.support.waiting import wait_for

from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.frames import (
    ONEWAY_FLAG,
    ROCKETMQ,
    RemotingCommand,
    encode,
)

TOPIC = "ledger"
broker = module_broker(
    "remoting", topics=[TopicConfig(TOPIC, 2, 2), TopicConfig("untouched", 1, 1)]
)


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Remoting]:
    remoting = Remoting(broker.remoting_endpoint)
    yield remoting
    remoting.close()


def _send(client: Remoting, body: bytes, tag: str, unique: str, queue: int = 0) -> RemotingCommand:
    properties = f"UNIQ_KEY\x01{unique}\x02TAGS\x01{tag}\x02WAIT\x01true\x02"
    return client.call(
        310, body, a="p", b=TOPIC, c="TBW102", d=4, e=queue, f=0, g=0, h=0, i=properties
    )


def _max_offset(client: Remoting, queue: int) -> int:
    return int(client.call(30, topic=TOPIC, queueId=queue).ext_fields["offset"])


def _pull(client: Remoting, group: str, offset: int, **extra: object) -> RemotingCommand:
    fields = dict(
        consumerGroup=group,
        topic=TOPIC,
        queueId=0,
        queueOffset=offset,
        maxMsgNums=32,
        sysFlag=0x4,
        commitOffset=0,
        suspendTimeoutMillis=0,
        subscription="*",
        subVersion=0,
        expressionType="TAG",
    )
    fields.update(extra)
    return client.call(11, **fields)


def test_routes_point_at_the_remoting_port_and_unknown_topics_say_so(broker, client):
    route = client.call(105, topic=TOPIC)
    assert route.code == 0
    data = json.loads(route.body)
    assert data["brokerDatas"][0]["brokerAddrs"] == {"0": broker.remoting_endpoint}
    assert data["queueDatas"][0]["readQueueNums"] == 2 and data["queueDatas"][0]["perm"] == 6
    missing = client.call(105, topic="no-such-topic")
    assert missing.code == 17 and "no-such-topic" in missing.remark
    assert TOPIC in json.loads(client.call(206).body)["topicList"]
    cluster = json.loads(client.call(106).body)
    assert cluster["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


def test_a_suspended_pull_waits_for_the_next_message_and_offsets_are_kept(broker, client):
    before = _max_offset(client, 0)
    assert _send(client, b"first", "T1", "ID-FIRST").code == 0
    # Readable once dispatched: the queue's end is then past it.
    end = wait_for(lambda: _max_offset(client, 0) > before and _max_offset(client, 0), "dispatch")
    waiting: dict[str, RemotingCommand] = {}

    def long_poll() -> None:
        other = Remoting(broker.remoting_endpoint)
        try:
            waiting["answer"] = _pull(
                other, "g1", end, sysFlag=0x2 | 0x4, suspendTimeoutMillis=15000
            )
        finally:
            other.close()

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(0.5)  # the pull is suspended before the message arrives
    assert "answer" not in waiting
    assert _send(client, b"later", "T2", "ID-LATER").code == 0
    poller.join(30)
    answer = waiting["answer"]
    assert answer.code == 0 and b"later" in answer.body and b"ID-LATER" in answer.body
    assert int(answer.ext_fields["nextBeginOffset"]) == end + 1
    # An offset committed with a pull (sys flag 1) is the group's, read back by code 14.
    _pull(client, "g1", end + 1, sysFlag=0x1 | 0x4, commitOffset=end + 1)
    assert client.call(14, consumerGroup="g1", topic=TOPIC, queueId=0).ext_fields["offset"] == (
        str(end + 1)
    )
    assert client.call(15, consumerGroup="g1", topic=TOPIC, queueId=0, commitOffset=1).code == 0
    assert client.call(14, consumerGroup="g1", topic=TOPIC, queueId=0).ext_fields["offset"] == "1"
    # A tag filter leaves other tags out; one past the end is not found.
    filtered = _pull(client, "g2", 0, subscription="T2")
    assert filtered.code == 0 and b"ID-LATER" in filtered.body and b"ID-FIRST" not in filtered.body
    assert _pull(client, "g2", end + 1).code == 19


def test_sends_the_rules_refuse_are_answered_and_nothing_is_stored(client):
    before = client.call(30, topic=TOPIC, queueId=1).ext_fields["offset"]
    forged = client.call(
        310, b"x", a="p", b=TOPIC, e=1, i="UNIQ_KEY\x01A\x02REAL_TOPIC\x01other\x02"
    )
    assert forged.code == 13 and "REAL_TOPIC" in forged.remark
    assert client.call(310, b"x", a="p", b="nowhere", e=0, i="UNIQ_KEY\x01A\x02").code == 17
    assert client.call(310, b"x", a="p", b=TOPIC, e=9, i="UNIQ_KEY\x01A\x02").code == 1
    assert client.call(320, b"\x00\x00\x00\x50garbage", a="p", b=TOPIC, e=1).code == 13
    assert client.call(30, topic=TOPIC, queueId=1).ext_fields["offset"] == before


def test_a_message_sent_without_an_id_is_given_one_by_the_broker(client):
    """As RocketMQ's broker does for a single message; the Go client v2 sends batches so."""
    end = _max_offset(client, 0)
    answer = client.call(310, b"no id", a="p", b=TOPIC, e=0, i="TAGS\x01NOID\x02")
    assert answer.code == 0, answer.remark
    wait_for(lambda: _max_offset(client, 0) > end, "dispatch")
    pulled = _pull(client, "g-noid", end)
    assert pulled.code == 0 and b"no id" in pulled.body
    # The stored properties carry the ID the broker made (34 hex digits).
    tail = pulled.body.split(b"UNIQ_KEY\x01", 1)[1]
    assert len(tail.split(b"\x02", 1)[0]) == 34


def test_unknown_codes_are_answered_at_once_and_oneway_requests_never(broker, client):
    answer = client.call(9999)
    assert answer.code == 3 and "9999" in answer.remark
    assert client.call(9999).code == 3
    noted = [r for r in broker.log_lines() if "request code 9999" in r.get("msg", "")]
    assert len(noted) == 1, "an unknown code is logged once, however often it comes"
    # A oneway request of an unknown code gets no answer: the next answer is the next call's.
    client.sock.sendall(encode(RemotingCommand(code=9998, opaque=777, flag=ONEWAY_FLAG)))
    assert client.call(206).code == 0
    assert all(command.opaque != 777 for command in client.pending)
    # Binary (ROCKETMQ) headers are answered in kind.
    client.sock.sendall(encode(RemotingCommand(code=206, opaque=778, serialize_type=ROCKETMQ)))
    assert client.answer_to(778).serialize_type == ROCKETMQ


@pytest.mark.parametrize(
    "hostile",
    [
        struct.pack(">iI", 8, (9 << 24) | 4) + b"{}{}",  # unknown serialize type
        struct.pack(">i", 2**31 - 1),  # a 2 GiB frame announced
        struct.pack(">i", -5),  # a negative length
        struct.pack(">iI", 8, 4) + b"{no}",  # a header that is not JSON
        struct.pack(">iI", 8, 200) + b"{}{}",  # a header longer than its frame
    ],
)
def test_a_malformed_frame_closes_only_its_connection(broker, hostile):
    bad = Remoting(broker.remoting_endpoint)
    try:
        bad.sock.sendall(hostile)
        assert bad.closed_by_broker()
    finally:
        bad.close()
    good = Remoting(broker.remoting_endpoint)
    try:
        assert good.call(206).code == 0
    finally:
        good.close()


GARBAGE_CONNECTIONS = 1_000
# The broker's working set moves by allocator slack and the other tests' calls; what a
# closed connection leaves behind must not add to it.
MEMORY_SLACK = 32 * 1024 * 1024


def test_connections_ended_by_a_malformed_frame_leave_nothing_behind(broker):
    # A request, then a malformed frame and 256 KiB of noise in the same write: the
    # broker answers the request, closes the connection, and keeps nothing of the chunk
    # it read (each one was once held until the collector's next full pass).
    chunk = encode(RemotingCommand(code=206)) + struct.pack(">i", -9) + b"\xa5" * 256 * 1024
    with ResidentWatch(broker.proc.pid) as rss:
        for _ in range(GARBAGE_CONNECTIONS):
            hostile = Remoting(broker.remoting_endpoint)
            try:
                hostile.sock.sendall(chunk)
                assert hostile.closed_by_broker()
            finally:
                hostile.close()
        good = Remoting(broker.remoting_endpoint)
        try:
            assert good.call(206).code == 0
        finally:
            good.close()
        rss.settled()
    print(f"{GARBAGE_CONNECTIONS} connections ended by a malformed frame: {rss.report()}")
    assert rss.after - rss.before <= MEMORY_SLACK, rss.report()


def test_a_client_that_never_reads_is_held_back_while_others_are_served(broker):
    rss_before = resident_bytes(broker.proc.pid)
    greedy = Remoting(broker.remoting_endpoint)
    greedy.sock.setblocking(False)
    route_request = encode(RemotingCommand(code=105, ext_fields={"topic": TOPIC}))
    written = 0
    stalled_rounds = 0
    # Write route requests and never read their answers until the broker stops reading.
    try:
        while stalled_rounds < 20 and written < 200_000_000:
            try:
                written += greedy.sock.send(route_request * 64)
                stalled_rounds = 0
            except BlockingIOError:
                stalled_rounds += 1
                time.sleep(0.05)
        assert written < 200_000_000, "the broker kept reading from a client that never reads"
        other = Remoting(broker.remoting_endpoint)
        try:
            assert other.call(105, topic=TOPIC).code == 0
        finally:
            other.close()
        grown = resident_bytes(broker.proc.pid) - rss_before
        # Answers held for it are bounded by what it could send before being held back.
        assert grown < 64 * 1024 * 1024, f"the broker grew by {grown} bytes"
    finally:
        greedy.close()
    after = Remoting(broker.remoting_endpoint)
    try:
        assert after.call(206).code == 0
    finally:
        after.close()


def test_silent_and_idle_connections_are_closed(tmp_path):
    args = ("--preface-timeout", "1", "--idle-connection-timeout", "1")
    with running_broker(tmp_path, *args) as quick:
        silent = Remoting(quick.remoting_endpoint)
        idle = Remoting(quick.remoting_endpoint)
        try:
            # Half a frame and nothing more: closed at the opening deadline.
            silent.sock.sendall(struct.pack(">i", 100))
            assert idle.call(206).code == 0
            assert silent.closed_by_broker() and idle.closed_by_broker()
        finally:
            silent.close()
            idle.close()


def test_a_delay_level_holds_the_message_back_then_delivers_it(client):
    before = _max_offset(client, 1)
    properties = "UNIQ_KEY\x01ID-DELAYED\x02TAGS\x01D\x02DELAY\x013\x02"
    # Level 3 is 10 s in RocketMQ's default levels.
    assert client.call(310, b"later", a="p", b=TOPIC, e=1, i=properties).code == 0
    assert _max_offset(client, 1) == before
    wait_for(lambda: _max_offset(client, 1) > before, "the delayed message's delivery", 60)
    pulled = _pull(client, "delayed-readers", before, queueId=1)
    assert pulled.code == 0 and b"ID-DELAYED" in pulled.body
    batch_with_delay = client.call(
        320, _batch_entry(b"a", properties) + _batch_entry(b"b", properties), a="p", b=TOPIC, e=1
    )
    assert batch_with_delay.code == 13 and "delay" in batch_with_delay.remark


def _batch_entry(body: bytes, properties: str) -> bytes:
    raw = properties.encode()
    total = 20 + len(body) + 2 + len(raw)
    return (
        struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(raw)) + raw
    )


def test_a_busy_remoting_port_fails_the_start_and_names_the_option(broker, tmp_path):
    done = subprocess.run(
        [
            *SKIFF,
            "broker",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "127.0.0.1:0",
            "--remoting-listen",
            broker.remoting_endpoint,
        ],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "is in use by another process; pick another with --remoting-listen" in done.stderr
    assert not (tmp_path / "d" / "commitlog").exists()


def test_remoting_off_serves_no_remoting_port(tmp_path):
    with running_broker(tmp_path, "--remoting-listen", "off") as plain:
        assert plain.remoting_endpoint == ""
        assert not [r for r in plain.log_lines() if "remoting clients on" in r.get("msg", "")]


def test_a_pull_of_a_queue_no_message_reached_waits_and_is_not_found(client):
    # Not "retry at once": an idle consumer would pull in a tight loop.
    answer = _pull(
        client, "idle", 0, topic="untouched", sysFlag=0x2 | 0x4, suspendTimeoutMillis=300
    )
    assert answer.code == 19 and answer.ext_fields["nextBeginOffset"] == "0"


def test_offsets_of_a_queue_that_is_not_there_are_refused_with_the_reason(client):
    missing = client.call(30, topic="no-such-topic", queueId=0)
    assert missing.code == 17 and "no-such-topic does not exist" in missing.remark
    beyond = client.call(14, consumerGroup="g", topic=TOPIC, queueId=999)
    assert beyond.code == 1 and "queueId 999 is illegal" in beyond.remark
    # The connection is still served.
    assert client.call(30, topic=TOPIC, queueId=0).code == 0
