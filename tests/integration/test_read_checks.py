"""What a restarted or busy broker answers when its index or consume queues disagree with
the log, with real broker processes.

- Index entries a kill left counted but out of their hash chains (the header written,
  the slots not) are found by key and by message ID after a restart, clean or not.
- A consume-queue unit whose commit-log offset was flipped on disk while the broker was
  stopped cleanly: every message still reads back (PullConsumer and the official
  client), with one WARNING, never "deleted by retention".
- Reads while retention deletes segments: an "offsets deleted" answer always points
  past the offset asked for.
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from tests.support.broker_process import (
    SHORT_INVISIBLE_ARGS,
    SMALL_FILES_ENV,
    BrokerProcess,
    create_topics,
    data_dir_of,
    running_broker,
)
from tests.support.official_client import receive_until_quiet
from tests.support.queue_ends import wait_for_messages
from tests.support.retention_broker import RETENTION_ARGS, wait_for_deletion

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.pull_consumer import DataLost, PullConsumer
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.store import index_file

TOPIC = "checked-orders"
QUEUES = 2
INVISIBLE_S = 3
DEADLINE_S = 90.0


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, QUEUES, QUEUES))
    return tmp_path


def send(broker: BrokerProcess, count: int, per_request: int = 30) -> list[OutgoingMessage]:
    sent = []
    with MessagingClient(broker.endpoint) as messaging:
        for first in range(0, count, per_request):
            batch = [
                OutgoingMessage(TOPIC, b"order %05d" % i, keys=(f"order-{i}",))
                for i in range(first, min(count, first + per_request))
            ]
            messaging.send(batch)
            sent += batch
    wait_for_messages(broker.endpoint, TOPIC, len(sent))
    return sent


def warnings_of(broker: BrokerProcess) -> list[str]:
    return [r.get("msg", "") for r in broker.log_lines() if r.get("level") == "warning"]


# -- the index window -------------------------------------------------------------


def unlink_newest_entries(index_dir: Path, newest: int) -> int:
    """Put the newest index file's slots back as they were before its last ``newest``
    entries: what a kill after the header's write and before the slots' leaves."""
    (path,) = sorted(p for p in index_dir.iterdir() if p.name.isdigit())[-1:]
    data = bytearray(path.read_bytes())
    # The slot count from the file's size and the entries the test brokers' files hold.
    index_num = int(SMALL_FILES_ENV["SKIFF_INDEX_FILE_ENTRIES"])
    slot_count = (
        len(data) - index_file.HEADER_SIZE - index_num * index_file.ENTRY_SIZE
    ) // index_file.SLOT_SIZE
    count = struct.unpack_from(">i", data, 36)[0]
    first_lost = count - newest
    assert first_lost > 1
    slots = np.frombuffer(data, ">i4", slot_count, index_file.HEADER_SIZE).copy()
    entries_at = index_file.HEADER_SIZE + slot_count * index_file.SLOT_SIZE
    previous = np.frombuffer(
        data, [("h", ">i4"), ("o", ">i8"), ("t", ">i4"), ("p", ">i4")], count, entries_at
    )["p"]
    for slot in np.flatnonzero(slots >= first_lost):
        head = int(slots[slot])
        while head >= first_lost:
            head = int(previous[head])
        slots[slot] = head
    data[index_file.HEADER_SIZE : entries_at] = slots.astype(">i4").tobytes()
    path.write_bytes(bytes(data))
    return first_lost


@pytest.mark.parametrize("exit", ["clean stop", "kill"])
def test_index_entries_a_kill_left_out_of_their_chains_are_found_after_restart(
    tmp: Path, exit: str
) -> None:
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        sent = send(broker, 120)
        with AdminClient(broker.endpoint) as admin:
            # Indexed before the stop: the newest one is found by its key.
            deadline = time.monotonic() + DEADLINE_S
            while not admin.query_messages_by_key(TOPIC, sent[-1].keys[0]):
                assert time.monotonic() < deadline, "the newest message was never indexed"
                time.sleep(0.2)
        broker.stop() if exit == "clean stop" else broker.kill()
    # Two keys a record (its key and its message ID): the last 40 records' entries.
    unlink_newest_entries(data_dir_of(tmp) / "index", 80)

    with (
        running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker,
        AdminClient(broker.endpoint) as admin,
    ):
        missing_by_key = [
            m.keys[0] for m in sent if not admin.query_messages_by_key(TOPIC, m.keys[0])
        ]
        missing_by_id = []
        for m in sent:
            try:
                admin.lookup_message(TOPIC, m.message_id)
            except Exception:  # not found, whatever the answer says
                missing_by_id.append(m.message_id)
    assert missing_by_key == []
    assert missing_by_id == []


# -- a damaged consume-queue unit after a clean stop ------------------------------


def unit_file(tmp: Path, queue_id: int) -> Path:
    return data_dir_of(tmp) / "consumequeue" / TOPIC / str(queue_id) / f"{0:020d}"


def read_unit(tmp: Path, queue_id: int, queue_offset: int) -> tuple[int, int, int]:
    with open(unit_file(tmp, queue_id), "rb") as f:
        f.seek(queue_offset * 20)
        return struct.unpack(">qiq", f.read(20))


def write_unit_offset(tmp: Path, queue_id: int, queue_offset: int, physical: int) -> None:
    with open(unit_file(tmp, queue_id), "r+b") as f:
        f.seek(queue_offset * 20)
        f.write(struct.pack(">q", physical))


def pull_all(broker: BrokerProcess, queue_id: int) -> list[bytes]:
    with PullConsumer(broker.endpoint) as consumer:
        end = consumer.max_offset(TOPIC, queue_id)
        return [m.body for m in consumer.read_range(TOPIC, queue_id, 0, end)]


def drain(broker: BrokerProcess) -> list[bytes]:
    """Receive and ack with the official client until a long poll brings nothing."""
    return receive_until_quiet(broker.endpoint, "checked-group", TOPIC, INVISIBLE_S, DEADLINE_S)


def test_a_damaged_unit_after_a_clean_stop_reads_back_with_one_warning(tmp: Path) -> None:
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        sent = send(broker, 200)
    # Clean stop. Queue 0: unit 7's offset flipped (every bit). Queue 1: unit 9 points
    # at the record of unit 10, a real record of the same queue but not its own.
    physical, _, _ = read_unit(tmp, 0, 7)
    write_unit_offset(tmp, 0, 7, ~physical)
    write_unit_offset(tmp, 1, 9, read_unit(tmp, 1, 10)[0])
    bodies = sorted(m.body for m in sent)

    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        try:
            pulled = pull_all(broker, 0)  # the fetch path (get_records) meets unit 7
        except DataLost as lost:
            pytest.fail(f"a damaged unit read as lost: {lost}")
        received = drain(broker)  # the official client (receive: get_messages) meets unit 9
        pulled_again = pull_all(broker, 0)
        pulled_other = pull_all(broker, 1)
        warnings = [w for w in warnings_of(broker) if "consume queue" in w and TOPIC in w]
        log = broker.log()
    assert sorted(received) == bodies, "every message reads back through the official client"
    assert sorted(pulled + pulled_other) == bodies, "and through PullConsumer, each once"
    assert pulled_again == pulled
    assert "deleted by retention" not in log
    assert len(warnings) == 2, warnings  # one per damaged unit
    assert any(f"{TOPIC}/0" in w and "unit 7" in w for w in warnings), warnings
    assert any(f"{TOPIC}/1" in w and "unit 9" in w for w in warnings), warnings


# -- reads while retention deletes ------------------------------------------------


def test_reads_during_retention_never_point_at_the_offset_asked_for(tmp_path: Path) -> None:
    topic = "retained-orders"
    answers: list[tuple[int, int]] = []
    problems: list[BaseException] = []
    stop = threading.Event()
    with running_broker(tmp_path, *SHORT_INVISIBLE_ARGS, *RETENTION_ARGS) as broker:
        with AdminClient(broker.endpoint) as admin:
            admin.create_topic(topic, read_queues=1)

        def read_the_oldest() -> None:
            # A consumer that fell behind retention: it asks for the oldest offset the
            # queue says it holds, which retention may be deleting right then.
            try:
                with PullConsumer(broker.endpoint) as consumer:
                    while not stop.is_set():
                        offset = consumer.min_offset(topic, 0)
                        try:
                            next(iter(consumer.fetch_range(topic, 0, offset, offset + 4)), None)
                        except DataLost as lost:
                            answers.append((lost.offset, lost.first_available))
            except BaseException as exc:  # reported by the test
                problems.append(exc)

        readers = [threading.Thread(target=read_the_oldest) for _ in range(2)]
        for reader in readers:
            reader.start()
        try:
            with MessagingClient(broker.endpoint) as messaging:
                # 4 KiB each, for 40 s: a 64 KiB segment every 16, and retention rounds
                # (every 10 s) deleting them while the readers ask.
                end = time.monotonic() + 40
                i = 0
                while time.monotonic() < end:
                    messaging.send([OutgoingMessage(topic, f"{i:04d}".encode() * 1024)])
                    i += 1
            wait_for_deletion(broker.endpoint, topic, 0, past=0)
        finally:
            stop.set()
            for reader in readers:
                reader.join(timeout=60)
    assert problems == []
    print(f"{len(answers)} answers that offsets were deleted")
    contradictory = [(asked, start) for asked, start in answers if start <= asked]
    assert contradictory == [], f"{len(contradictory)} of {len(answers)} answers"
