"""A real broker on a really full disk: nothing acknowledged is lost without a word.

Each test mounts a small tmpfs as the broker's data directory (root only; the
tests skip, saying why, where mounting is not allowed) and writes with the
official RocketMQ client until the broker refuses. Afterwards every acknowledged
message is consumed again, or, where the user chose forcible cleaning and
retention deleted unexpired messages, accounted for in its WARNING.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
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
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker

from skiff_broker.metadata.topic_table import TopicConfig

MiB = 1024 * 1024
TOPIC = "disk-orders"
# Generous: each wait ends as soon as its condition holds.
DEADLINE_S = 120.0
# Large bodies fill a small disk in few sends (the default limit is 4 MiB).
BODY_SIZE = 256 * 1024
# RocketMQ's default store settings for consume-queue and index files (the test
# harness otherwise makes them small).
DEFAULT_FILES_ENV = {
    "SKIFF_CONSUME_QUEUE_FILE_ENTRIES": "300000",
    "SKIFF_INDEX_FILE_ENTRIES": "20000000",
}


@contextlib.contextmanager
def tmpfs_data_dir(tmp_path: Path, size: str) -> Iterator[Path]:
    """The broker's data directory on a tmpfs of ``size``; unmounted afterwards."""
    mount_point = data_dir_of(tmp_path)
    mount_point.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the full-disk tests needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk tests: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        # A broker that just exited may hold the mount for a moment.
        end = time.monotonic() + 10.0
        while subprocess.run(["umount", str(mount_point)], capture_output=True).returncode:
            if time.monotonic() > end:
                subprocess.run(["umount", "-l", str(mount_point)], check=True)
                break
            time.sleep(0.1)


def client_config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


def message(body: bytes) -> Message:
    msg = Message()
    msg.topic = TOPIC
    msg.body = body
    return msg


def body_of(number: int) -> bytes:
    return number.to_bytes(8, "big") + os.urandom(16) + bytes(BODY_SIZE - 24)


@contextlib.contextmanager
def producer(broker: BrokerProcess) -> Iterator[Producer]:
    client = Producer(client_config(broker), (TOPIC,))
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def write_until_refused(broker: BrokerProcess, max_sends: int) -> tuple[dict[str, int], str]:
    """Send until the broker refuses; the acknowledged message IDs (to their number)
    and the refusal's message."""
    acknowledged: dict[str, int] = {}
    with producer(broker) as client:
        for number in range(max_sends):
            try:
                receipt = client.send(message(body_of(number)))
            except Exception as exc:  # the official client's ClientException
                return acknowledged, str(exc)
            acknowledged[receipt.message_id] = number
    raise AssertionError(f"{max_sends} sends of {BODY_SIZE} bytes never filled the disk")


def consume_all(broker: BrokerProcess, group: str, expected: int) -> dict[str, int]:
    """Receive and ack until ``expected`` messages came back (at least one receive);
    their IDs to their number."""
    received: dict[str, int] = {}
    consumer = SimpleConsumer(client_config(broker), group, {TOPIC: FilterExpression()}, 2)
    consumer.startup()
    try:
        # A progress bound, not a time bound: on a loaded machine 200 bodies of 256 KiB
        # took longer than DEADLINE_S to read. Three empty long polls in a row: no more.
        empty_polls = 0
        while True:
            before = len(received)
            # Few at a time: a receive of 16 bodies of 256 KiB took 4 s here, close to
            # the client's 5 s deadline for it (its 3 s request timeout plus the 2 s wait).
            for msg in consumer.receive(4, 60):
                received[msg.message_id] = int.from_bytes(msg.body[:8], "big")
                assert len(msg.body) == BODY_SIZE
                consumer.ack(msg)
            empty_polls = empty_polls + 1 if len(received) == before else 0
            if len(received) >= expected or empty_polls >= 3:
                break
    finally:
        consumer.shutdown()
    return received


def deletion_warnings(broker: BrokerProcess) -> list[dict]:
    return [
        record
        for record in broker.log_lines()
        if record.get("level") == "warning" and "deleted_unconsumed" in record
    ]


def test_an_index_file_that_cannot_be_allocated_refuses_writes_naming_the_setting(
    tmp_path: Path,
) -> None:
    # 256 MiB cannot hold the default 420 MB index file. Before, the broker
    # acknowledged thousands of writes its dispatcher could never make readable.
    with tmpfs_data_dir(tmp_path, "256m") as data_dir:
        create_topics(data_dir, TopicConfig(TOPIC, 1, 1))
        with running_broker(tmp_path, env=DEFAULT_FILES_ENV) as broker:
            acknowledged, refusal = write_until_refused(broker, 10)
            assert acknowledged == {}
            assert "index file" in refusal, refusal
            assert "--index-file-entries" in refusal, refusal
            # Still serving: the topic's route and a consumer's receive answer.
            assert consume_all(broker, "disk-index-readers", 0) == {}
            with producer(broker) as client, pytest.raises(Exception, match="index-file-entries"):
                client.send(message(body_of(0)))
            assert not deletion_warnings(broker)


def segment_deletions(broker: BrokerProcess) -> list[str]:
    return [
        record["msg"]
        for record in broker.log_lines()
        if record.get("msg", "").startswith("deleted segment ")
    ]


def test_by_default_a_full_disk_deletes_nothing_unconsumed_and_resumes_once_read(
    tmp_path: Path,
) -> None:
    group = f"disk-readers-{uuid.uuid4().hex[:8]}"
    with tmpfs_data_dir(tmp_path, "64m") as data_dir:
        create_topics(data_dir, TopicConfig(TOPIC, 2, 2))
        with running_broker(tmp_path) as broker:
            acknowledged, refusal = write_until_refused(broker, 1000)
            assert len(acknowledged) > 64 * MiB // BODY_SIZE // 2
            assert "larger disk" in refusal, refusal
            # Retention rounds run while the disk is full: they may delete nothing unread.
            end = time.monotonic() + DEADLINE_S
            while "refusing writes" not in broker.log() and time.monotonic() < end:
                time.sleep(0.2)
            assert "refusing writes" in broker.log(), "the disk check never saw the disk full"
            with producer(broker) as client, pytest.raises(Exception) as refused:
                client.send(message(body_of(0)))
            assert "--clean-file-forcibly" in str(refused.value), refused.value
            assert "consuming group" in str(refused.value), refused.value
            assert segment_deletions(broker) == []

            received = consume_all(broker, group, len(acknowledged))
            assert received == acknowledged

            # Read by the only group: retention may now delete those segments, and
            # writes resume. A volume bound, not a time bound.
            resumed = None
            with producer(broker) as client:
                for number in range(10 * 64 * MiB // BODY_SIZE):
                    try:
                        resumed = client.send(message(body_of(len(acknowledged) + number)))
                        break
                    except Exception as exc:
                        assert "larger disk" in str(exc), exc
                        time.sleep(0.5)
            assert resumed is not None, "writes never resumed after every message was read"
            assert segment_deletions(broker), "nothing was deleted, yet writes resumed"
            assert not deletion_warnings(broker)


def test_keeping_unexpired_messages_refuses_writes_and_every_acknowledged_one_is_read(
    tmp_path: Path,
) -> None:
    with tmpfs_data_dir(tmp_path, "64m") as data_dir:
        create_topics(data_dir, TopicConfig(TOPIC, 2, 2))
        with running_broker(tmp_path, "--no-clean-file-forcibly") as broker:
            acknowledged, refusal = write_until_refused(broker, 1000)
            assert len(acknowledged) > 64 * MiB // BODY_SIZE // 2
            assert "larger disk" in refusal, refusal
            # Give retention rounds to run: with forcible cleaning off it deletes nothing.
            end = time.monotonic() + DEADLINE_S
            while "refusing writes" not in broker.log() and time.monotonic() < end:
                time.sleep(0.2)
            assert "refusing writes" in broker.log(), "the disk check never saw the disk full"
            with producer(broker) as client, pytest.raises(Exception, match="clean-file-forcibly"):
                client.send(message(body_of(0)))

            received = consume_all(broker, "disk-keepers", len(acknowledged))
            assert received == acknowledged
            assert not deletion_warnings(broker)


def test_deleting_unexpired_messages_warns_with_counts_for_every_one_it_took(
    tmp_path: Path,
) -> None:
    group = f"disk-late-{uuid.uuid4().hex[:8]}"
    with tmpfs_data_dir(tmp_path, "64m") as data_dir:
        create_topics(data_dir, TopicConfig(TOPIC, 2, 2))
        # RocketMQ's default, opt-in here: past 85% use the oldest segments go,
        # consumed or not.
        with running_broker(tmp_path, "--clean-file-forcibly") as broker:
            acknowledged: dict[str, int] = {}
            refusals = 0
            with producer(broker) as client:
                number = 0
                # A volume bound, not a time bound: ten times the disk.
                while not deletion_warnings(broker):
                    assert number < 10 * 64 * MiB // BODY_SIZE, "retention never deleted"
                    try:
                        receipt = client.send(message(body_of(number)))
                    except Exception as exc:
                        assert "larger disk" in str(exc), exc
                        refusals += 1
                        time.sleep(0.2)
                    else:
                        acknowledged[receipt.message_id] = number
                    number += 1
            warnings = deletion_warnings(broker)
            deleted = sum(w["deleted_unconsumed"][TOPIC]["messages"] for w in warnings)
            deleted_bytes = sum(w["deleted_unconsumed"][TOPIC]["bytes"] for w in warnings)
            assert deleted > 0
            assert deleted_bytes >= deleted * BODY_SIZE
            assert all("--no-clean-file-forcibly" in w["msg"] for w in warnings)

            received = consume_all(broker, group, len(acknowledged) - deleted)
            # What is still there is acknowledged; the warnings count what is not.
            assert set(received.items()) <= set(acknowledged.items())
            assert len(received) == len(acknowledged) - deleted
            # The deleted ones are the oldest: everything readable came after them.
            lost = sorted(set(acknowledged.values()) - set(received.values()))
            assert lost == sorted(acknowledged.values())[: len(lost)]
