"""A data directory written by Apache RocketMQ 5 opens in Skiff with its messages and positions.

``tests/data/rocketmq5-store`` was made by ``scripts/make-rocketmq-store``: the
real RocketMQ 5 broker, the official Python client sending to two topics and a
consumer group acknowledging part of one, a clean stop. Its ``manifest.json``
lists every message sent (queue, offset, body, tag, keys, properties) and the
``offsetTable`` of RocketMQ's own ``consumerOffset.json`` (bare integer keys, as
fastjson writes them). A Skiff broker started on a copy, with RocketMQ's file
sizes, must serve all of it.
"""

from __future__ import annotations

import collections
import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.support.broker_process import (
    SHORT_INVISIBLE_ARGS,
    SKIFF,
    START_DEADLINE_S,
    broker_env,
    data_dir_of,
    running_broker,
)

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.pull_consumer import PullConsumer, PullStatus

STORE = Path(__file__).resolve().parent.parent / "data" / "rocketmq5-store"
MANIFEST = json.loads((STORE / "manifest.json").read_text())


def _sizes() -> tuple[str, ...]:
    """Skiff's options for RocketMQ's file sizes (segments must line up byte for byte)."""
    return (
        "--commit-log-file-size",
        str(MANIFEST["commit_log_file_size"]),
        # A message must fit a segment with room to spare; these are small.
        "--max-message-size",
        "256k",
        "--consume-queue-file-entries",
        str(MANIFEST["consume_queue_file_entries"]),
        "--index-file-entries",
        str(MANIFEST["index_file_entries"]),
    )


@pytest.fixture
def rocketmq_data(tmp_path: Path) -> Path:
    """A copy of the store as RocketMQ left it (its big files unpacked)."""
    target = data_dir_of(tmp_path)
    shutil.copytree(STORE, target, ignore=shutil.ignore_patterns("manifest.json"))
    for packed in list(target.rglob("*.gz")):
        with gzip.open(packed, "rb") as src, open(packed.with_suffix(""), "wb") as dst:
            shutil.copyfileobj(src, dst)
        packed.unlink()
    return tmp_path


def _expected_offsets() -> dict[tuple[str, str], dict[int, int]]:
    """(group, topic) -> queue -> committed offset, from RocketMQ's consumerOffset.json."""
    expected = {}
    for key, queues in MANIFEST["consumer_offset_file"].items():
        topic, _, group = key.rpartition("@")
        expected[(group, topic)] = {int(queue): offset for queue, offset in queues.items()}
    return expected


def test_the_manifest_positions_are_what_the_groups_acknowledged():
    """The data itself: RocketMQ's positions cover exactly the messages each group acked."""
    offsets = _expected_offsets()
    readers = offsets[(MANIFEST["group"], MANIFEST["consumed_topic"])]
    below = {
        m["message_id"]
        for m in MANIFEST["sent"]
        if m["topic"] == MANIFEST["consumed_topic"] and m["offset"] < readers[m["queue_id"]]
    }
    assert MANIFEST["acked"] and below == set(MANIFEST["acked"])
    # The second group read everything: its positions are the ends of the queues.
    ends = collections.Counter((m["topic"], m["queue_id"]) for m in MANIFEST["sent"])
    for topic in MANIFEST["topics"]:
        assert offsets[(MANIFEST["read_all_group"], topic)] == {
            queue: count for (t, queue), count in ends.items() if t == topic
        }


def test_every_message_reads_through_skiff(rocketmq_data):
    sent = MANIFEST["sent"]
    by_queue: dict[tuple[str, int], list[dict]] = collections.defaultdict(list)
    for message in sent:
        by_queue[(message["topic"], message["queue_id"])].append(message)
    with running_broker(rocketmq_data, *SHORT_INVISIBLE_ARGS, *_sizes()) as broker:
        with AdminClient(broker.endpoint) as admin:
            for topic, queues in MANIFEST["topics"].items():
                assert admin.get_topic(topic).read_queues == queues
                ranges = {
                    q.queue_id: (q.min_offset, q.max_offset) for q in admin.queue_offsets(topic)
                }
                assert ranges == {
                    queue: (0, len(by_queue[(topic, queue)])) for queue in range(queues)
                }
            # The index RocketMQ wrote answers key look-ups.
            for message in sent[::7]:
                found = admin.query_messages_by_key(message["topic"], message["keys"][0])
                assert [m.message_id for m in found] == [message["message_id"]]
        with PullConsumer(broker.endpoint, check_crc=True) as consumer:
            for (topic, queue_id), expected in sorted(by_queue.items()):
                pulled = consumer.pull(topic, queue_id, 0, max_messages=len(expected) + 8)
                assert pulled.status is PullStatus.FOUND
                assert pulled.next_offset == len(expected)
                got = {m.queue_offset: m for m in pulled.messages}
                assert sorted(got) == sorted(m["offset"] for m in expected)
                for message in expected:
                    stored = got[message["offset"]]
                    assert stored.message_id == message["message_id"]
                    assert stored.body == message["body"].encode()
                    assert stored.tag == message["tag"]
                    assert sorted(stored.keys) == message["keys"]
                    assert stored.properties.items() >= message["properties"].items()
                    assert stored.queue_id == queue_id


def test_every_consumer_position_reads_through_skiff(rocketmq_data):
    expected = _expected_offsets()
    with running_broker(rocketmq_data, *SHORT_INVISIBLE_ARGS, *_sizes()) as broker:
        for (group, topic), queues in sorted(expected.items()):
            with PullConsumer(broker.endpoint, group=group) as consumer:
                for queue_id, offset in queues.items():
                    assert consumer.committed_offset(topic, queue_id) == offset
            with AdminClient(broker.endpoint) as admin:
                lag = admin.consumer_lag(group, topic)
                ends = {q.queue_id: q.max_offset for q in admin.queue_offsets(topic)}
            assert {q.queue_id: q.consumer_offset for q in lag.queues} == queues
            assert lag.total_lag == sum(ends[q] - offset for q, offset in queues.items())
        warnings = [r["msg"] for r in broker.log_lines() if r.get("level") == "warning"]
        assert not [w for w in warnings if ".json" in w], warnings


def test_skiff_writes_the_positions_back_as_strict_json_keeping_rocketmqs_as_bak(
    rocketmq_data,
):
    group, topic = MANIFEST["group"], MANIFEST["consumed_topic"]
    config = data_dir_of(rocketmq_data) / "config"
    rocketmq_version = (config / "consumerOffset.json").read_bytes()
    with (
        running_broker(rocketmq_data, *SHORT_INVISIBLE_ARGS, *_sizes()) as broker,
        PullConsumer(broker.endpoint, group=group) as consumer,
    ):
        consumer.commit_offset(topic, 0, 2)
    written = json.loads((config / "consumerOffset.json").read_text())["offsetTable"]
    expected = {
        f"{t}@{g}": {str(q): o for q, o in queues.items()}
        for (g, t), queues in _expected_offsets().items()
    }
    expected[f"{topic}@{group}"]["0"] = 2
    assert written == expected
    assert (config / "consumerOffset.json.bak").read_bytes() == rocketmq_version


def test_segments_too_small_for_the_message_size_fail_cleanly(rocketmq_data):
    """A store error at start: one line, exit 1, the directory left as RocketMQ left it.

    The store keeps its 1 MiB segments whatever --commit-log-file-size says; they cannot
    hold the default largest message (4 MiB), and the error says what to start it with.
    """
    data_dir = data_dir_of(rocketmq_data)
    before = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*"))
    command = [
        *SKIFF,
        "broker",
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--ha-listen",
        "127.0.0.1:0",
        "--commit-log-file-size",
        "8m",
    ]
    for _ in range(2):  # the second attempt must not find the directory locked
        done = subprocess.run(
            command,
            env=broker_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_DEADLINE_S,
        )
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("Error: the commit-log segments in ")
        assert "are 1048576 bytes, too small for --max-message-size 4194304" in last
        assert last.endswith("start this store with --max-message-size 1047552 or less")
    # Refused before the store is opened: not even a lock file is new.
    after = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*"))
    assert after == before
    assert not (data_dir / "abort").exists()


def test_the_official_consumer_continues_where_rocketmq_left_the_group(rocketmq_data):
    """A RocketMQ 5 client in the group gets exactly what the group had not acknowledged."""
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    topic = MANIFEST["consumed_topic"]
    remaining = {m["message_id"] for m in MANIFEST["sent"] if m["topic"] == topic} - set(
        MANIFEST["acked"]
    )
    invisible_s = 3
    with running_broker(rocketmq_data, *SHORT_INVISIBLE_ARGS, *_sizes()) as broker:
        consumer = SimpleConsumer(
            ClientConfiguration(broker.endpoint, Credentials()),
            MANIFEST["group"],
            {topic: FilterExpression()},
            invisible_s + 2,  # a long poll outlasts the invisible time
        )
        consumer.startup()
        try:
            received: set[str] = set()
            # Until a long poll longer than the invisible time brings nothing more.
            while batch := consumer.receive(32, invisible_s):
                for message in batch:
                    assert message.message_id not in received, "delivered twice"
                    received.add(message.message_id)
                    consumer.ack(message)
        finally:
            consumer.shutdown()
    assert received == remaining
