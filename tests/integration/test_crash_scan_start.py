"""A crash restart scans from the checkpoint's scan start, not from a segment's start.

Real broker processes on loopback, killed with SIGKILL while a producer sends. After
the restart every acknowledged message is readable by offset (pull) and by a
consumer; recovery says it checked the log from the checkpoint's ``scan_start``,
a record in the middle of a segment. The records below that start are checked in
the background: a damaged one is reported (WARNING and damage report) and never
served. A checkpoint whose start lies (inside a record, past the log's end) is not
trusted: recovery scans from the segment's start as before.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from tests.support.broker_process import (
    BrokerProcess,
    create_topics,
    data_dir_of,
    running_broker,
    start_broker,
)
from tests.support.queue_ends import wait_until_dispatched
from tests.support.waiting import wait_for

from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.pull_consumer import PullConsumer, PullStatus
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.store.checkpoint import Checkpoint

TOPIC = "scan-start"
GROUP = "scan-start-group"
QUEUES = 4
# Small segments keep the test short; a message must still fit in one.
SEGMENT = 2 * 1024 * 1024
BROKER_ARGS = ("--commit-log-file-size", str(SEGMENT), "--max-message-size", "1m")
DEADLINE_S = 90.0


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, QUEUES, QUEUES))
    return tmp_path


def checkpoint_of(broker: BrokerProcess) -> Checkpoint:
    return Checkpoint.load(str(broker.data_dir / "checkpoint"))


def body(i: int) -> bytes:
    # About 100 bytes, unique, and findable in the commit log's bytes.
    return b"scan-start-body-%08d-" % i + b"x" * 74


class Sender:
    """Sends batches of messages until stopped or refused; keeps the acknowledged bodies."""

    def __init__(self, endpoint: str, first: int = 0) -> None:
        self.endpoint = endpoint
        self.next = first
        self.acked: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sender:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with MessagingClient(self.endpoint) as client:
                while not self._stop.is_set():
                    bodies = [body(i) for i in range(self.next, self.next + 50)]
                    self.next += 50
                    client.send([OutgoingMessage(TOPIC, b) for b in bodies])
                    self.acked.update(bodies)
        except Exception:
            return  # the broker was killed: what was acknowledged is in ``acked``

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def pulled_bodies(endpoint: str) -> list[bytes]:
    """Every message body of the topic, read by offset from each queue's first offset."""
    bodies: list[bytes] = []
    with PullConsumer(endpoint) as consumer:
        for queue in consumer.queue_ranges(TOPIC):
            offset = queue.min_offset
            while offset < queue.max_offset:
                got = consumer.pull(TOPIC, queue.queue_id, offset, max_messages=256)
                assert got.status is PullStatus.FOUND, (queue, offset, got.status)
                assert got.next_offset > offset
                bodies += [m.body for m in got.messages]
                offset = got.next_offset
    return bodies


def consumed_bodies(endpoint: str) -> list[bytes]:
    """Every message body an official SimpleConsumer receives (acking each)."""
    client = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()), GROUP, {TOPIC: FilterExpression()}, 3
    )
    client.startup()
    bodies: list[bytes] = []
    try:
        end = time.monotonic() + DEADLINE_S
        while batch := client.receive(32, 10):
            assert time.monotonic() < end, "messages keep coming"
            for message in batch:
                bodies.append(message.body)
                client.ack(message)
    finally:
        client.shutdown()
    return bodies


def recovery_line(broker: BrokerProcess) -> str:
    lines = [
        r["msg"]
        for r in broker.log_lines()
        if r.get("msg", "").startswith("recovered after a crash")
    ]
    assert len(lines) == 1, broker.log()[-3000:]
    return lines[0]


def kill_while_sending(tmp: Path, minimum_start: int) -> tuple[set[bytes], int]:
    """Run a broker, send until its checkpoint's scan start passed ``minimum_start``,
    SIGKILL it mid-send; returns the acknowledged bodies and the scan start on disk."""
    broker = start_broker(tmp, *BROKER_ARGS)
    sender = Sender(broker.endpoint).start()
    try:
        wait_for(
            lambda: checkpoint_of(broker).scan_start > minimum_start,
            deadline_s=DEADLINE_S,
            what=f"the checkpoint's scan start to pass {minimum_start}",
        )
        # Keep sending a little longer: the kill lands mid-write, past the start.
        acked_then = len(sender.acked)
        wait_for(lambda: len(sender.acked) > acked_then + 500, deadline_s=DEADLINE_S, what="sends")
    finally:
        broker.kill()
        sender.stop()
    return sender.acked, Checkpoint.load(str(data_dir_of(tmp) / "checkpoint")).scan_start


def test_kill_mid_write_restarts_from_the_scan_start_and_keeps_every_ack(tmp):
    acked, scan_start = kill_while_sending(tmp, SEGMENT // 4)
    assert scan_start % SEGMENT, "the scan start should lie inside a segment"

    with running_broker(tmp, *BROKER_ARGS) as broker:
        line = recovery_line(broker)
        assert f"checked from {scan_start}," in line, line
        wait_until_dispatched(broker.endpoint)
        pulled = pulled_bodies(broker.endpoint)
        assert len(pulled) == len(set(pulled)), "a message is in its queue twice"
        assert acked <= set(pulled), f"{len(acked - set(pulled))} acknowledged messages lost"
        consumed = consumed_bodies(broker.endpoint)
        assert acked <= set(consumed), f"{len(acked - set(consumed))} never delivered"
        sound = re.compile(rf"commit-log records \d+\.\.{scan_start} are sound")
        wait_for(
            lambda: any(sound.fullmatch(r.get("msg", "")) for r in broker.log_lines()),
            "the background check of the records below the scan start",
            DEADLINE_S,
        )


def flip_body_byte(data_dir: Path, wanted: bytes) -> int:
    """Flip one byte of the body ``wanted`` in the commit log; its global offset."""
    for segment in sorted((data_dir / "commitlog").iterdir()):
        raw = segment.read_bytes()
        at = raw.find(wanted)
        if at >= 0:
            with open(segment, "r+b") as f:
                f.seek(at + 3)
                f.write(bytes([raw[at + 3] ^ 0x20]))
            return int(segment.name) + at
    raise AssertionError(f"{wanted!r} is not in the commit log")


def test_damage_below_the_scan_start_is_found_in_the_background_and_never_served(tmp):
    acked, scan_start = kill_while_sending(tmp, SEGMENT // 4)
    segment_start = scan_start - scan_start % SEGMENT
    # A record between the segment's start and the scan start: the restart's scan
    # does not read it; a scan from the segment's start would have.
    victim = acked_body_between(data_dir_of(tmp), acked, segment_start, scan_start - 4096)
    at = flip_body_byte(data_dir_of(tmp), victim)

    with running_broker(tmp, *BROKER_ARGS) as broker:
        assert f"checked from {scan_start}," in recovery_line(broker)
        wait_for(
            lambda: any(
                e["kind"] == "skipped" and e["offset"] <= at < e["offset"] + e["length"]
                for e in damage_report(broker)
            ),
            deadline_s=DEADLINE_S,
            what="the damaged record in the damage report",
        )
        (entry,) = [e for e in damage_report(broker) if e["kind"] == "skipped"]
        assert entry["found_by"] == "background check"
        warnings = [
            r["msg"]
            for r in broker.log_lines()
            if r.get("level") == "warning" and "background check of older records" in r["msg"]
        ]
        assert len(warnings) == 1 and str(entry["offset"]) in warnings[0], warnings
        wait_until_dispatched(broker.endpoint)
        pulled = set(pulled_bodies(broker.endpoint))
        consumed = set(consumed_bodies(broker.endpoint))
    damaged = victim[:3] + bytes([victim[3] ^ 0x20]) + victim[4:]
    for seen in (pulled, consumed):
        assert damaged not in seen and victim not in seen, "the damaged record was served"
        assert acked - {victim} <= seen, f"{len(acked - {victim} - seen)} other messages lost"


def acked_body_between(data_dir: Path, acked: set[bytes], low: int, high: int) -> bytes:
    """The body of an acknowledged message stored between commit-log offsets low and high."""
    segment = data_dir / "commitlog" / f"{low - low % SEGMENT:020d}"
    raw = segment.read_bytes()
    base = int(segment.name)
    at = raw.find(b"scan-start-body-", (low + high) // 2 - base)
    while 0 <= at < high - base:
        found = raw[at : at + len(body(0))]
        if found in acked:
            return found
        at = raw.find(b"scan-start-body-", at + 1)
    raise AssertionError(f"no acknowledged message between {low} and {high}")


def damage_report(broker: BrokerProcess) -> list[dict]:
    path = broker.data_dir / "damage-report.json"
    return json.loads(path.read_text()) if path.exists() else []


def lie_in_checkpoint(data_dir: Path, scan_start: int) -> None:
    """Rewrite the checkpoint with ``scan_start``, all else as the killed broker left it."""
    checkpoint = Checkpoint.load(str(data_dir / "checkpoint"))
    checkpoint.scan_start = scan_start
    checkpoint.flush()


@pytest.mark.parametrize("lie", ["inside a record", "past the end"])
def test_a_checkpoint_whose_scan_start_lies_falls_back_to_the_segment_scan(tmp, lie):
    acked, scan_start = kill_while_sending(tmp, SEGMENT // 4)
    lied = scan_start + 7 if lie == "inside a record" else 64 * SEGMENT
    lie_in_checkpoint(data_dir_of(tmp), lied)

    with running_broker(tmp, *BROKER_ARGS) as broker:
        told = f"the checkpoint's scan start {lied} is not where a valid record starts"
        warnings = [r["msg"] for r in broker.log_lines() if r.get("level") == "warning"]
        assert any(told in w for w in warnings), warnings
        line = recovery_line(broker)
        start = int(line.split("checked from ")[1].split(",")[0])
        assert start % SEGMENT == 0 and start <= scan_start, line
        wait_until_dispatched(broker.endpoint)
        pulled = pulled_bodies(broker.endpoint)
        assert acked <= set(pulled), f"{len(acked - set(pulled))} acknowledged messages lost"
        assert len(pulled) == len(set(pulled))
