"""Damaged commit logs and consume queues, with real broker processes and the official client.

A broker is filled by the official RocketMQ client and killed with SIGKILL;
bytes are then damaged on disk as a failing disk would, and a restarted broker
must give back every message but the damaged one. ``skiff store check`` and
``--repair`` are run as a user would, on a stopped copy.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
)
from tests.support.broker_process import (
    SHORT_INVISIBLE_ARGS,
    SKIFF,
    BrokerProcess,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
)
from tests.support.official_client import receive_until_quiet

from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.store.message import MESSAGE_MAGIC, SIZE_MAGIC, decode_record

TOPIC = "damage-orders"
GROUP = "damage-group"
QUEUES = 2
DEADLINE_S = 90.0
INVISIBLE_S = 3
# Enough 30 KiB messages to fill the tests' 8 MiB segments more than twice.
COUNT = 600
BODY_BYTES = 30 * 1024


def body_of(i: int) -> bytes:
    return (b"order-%06d|" % i).ljust(BODY_BYTES, b"x")


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    create_topics(data_dir_of(tmp_path), TopicConfig(TOPIC, QUEUES, QUEUES))
    return tmp_path


def config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


def produce(broker: BrokerProcess, count: int) -> set[bytes]:
    client = Producer(config(broker), (TOPIC,))
    client.startup()
    try:
        sent = set()
        for i in range(count):
            msg = Message()
            msg.topic = TOPIC
            msg.body = body_of(i)
            client.send(msg)
            sent.add(msg.body)
        return sent
    finally:
        client.shutdown()


def drain(broker: BrokerProcess) -> list[bytes]:
    """Receive and ack with the official client until a long poll brings nothing."""
    return receive_until_quiet(broker.endpoint, GROUP, TOPIC, INVISIBLE_S, DEADLINE_S)


# -- bytes on disk ----------------------------------------------------------------


def segments(data_dir: Path) -> list[Path]:
    return sorted(p for p in (data_dir / "commitlog").iterdir() if p.name.isdigit())


def records_of(segment: Path) -> list[tuple[int, int, bytes]]:
    """(position in the file, size, body) of every message record of a segment."""
    data = segment.read_bytes()
    found = []
    pos = 0
    while pos + 8 <= len(data):
        size, magic = SIZE_MAGIC.unpack_from(data, pos)
        if magic != MESSAGE_MAGIC:
            break
        found.append((pos, size, decode_record(data, pos).body))
        pos += size
    return found


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def victim_in_last_segment(data_dir: Path) -> tuple[Path, int, int, bytes]:
    """A record early in the newest segment (recovery checks it), with many after it."""
    last = [s for s in segments(data_dir) if records_of(s)][-1]
    records = records_of(last)
    assert len(records) > 20
    position, size, body = records[3]
    return last, position, size, body


def store_check(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SKIFF, "store", "check", "--data-dir", str(data_dir), *args],
        env=broker_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def warnings_of(broker: BrokerProcess) -> list[str]:
    return [r.get("msg", "") for r in broker.log_lines() if r.get("level") == "warning"]


# -- tests ------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["body", "totalsize", "physicaloffset"])
def test_a_flipped_byte_then_a_crash_loses_only_that_message(tmp: Path, field: str) -> None:
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        sent = produce(broker, COUNT)
        broker.kill()
    data_dir = data_dir_of(tmp)
    assert len(segments(data_dir)) >= 3
    segment, position, size, body = victim_in_last_segment(data_dir)
    offset = int(segment.name) + position
    flip_byte(segment, position + {"body": 100, "totalsize": 2, "physicaloffset": 34}[field])

    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        received = drain(broker)
        warnings = warnings_of(broker)
    assert sorted(received) == sorted(sent - {body}), "every other message reads back, once"
    assert any(
        w.startswith("skipped 1 damaged record(s)") and str(offset) in w for w in warnings
    ), warnings

    # The broker stopped cleanly: the check finds the damage already reported.
    checked = store_check(data_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"bytes at {offset} (in the report)" in checked.stdout
    assert "store is consistent" in checked.stdout
    copy = data_dir / "damaged" / f"{offset:020d}.bin"
    assert copy.stat().st_size == size


def test_an_overwritten_consume_queue_unit_is_rebuilt_after_a_crash(tmp: Path) -> None:
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        sent = produce(broker, 200)
        broker.kill()
    data_dir = data_dir_of(tmp)
    queue_file = data_dir / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    with open(queue_file, "r+b") as f:
        f.seek(7 * 20)  # the unit of queue offset 7: points at no record now
        f.write(struct.pack(">qiq", 123_456_789, 4242, 99))

    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        received = drain(broker)
        warnings = warnings_of(broker)
    assert sorted(received) == sorted(sent), "the message behind the bad unit reads back"
    assert any("orders/0: 1 unit(s) disagreed" in w and "1 rebuilt" in w for w in warnings), (
        warnings
    )


def test_store_check_and_repair_on_a_damaged_copy(tmp: Path) -> None:
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        sent = produce(broker, COUNT)
    data_dir = data_dir_of(tmp)
    copy_tmp = tmp / "copy"
    copy = data_dir_of(copy_tmp)
    shutil.copytree(data_dir, copy)
    # An old record of the first segment (a clean start would never scan it) and
    # a consume-queue unit.
    first = segments(copy)[0]
    position, size, body = records_of(first)[10]
    flip_byte(first, position + 100)
    queue_file = copy / "consumequeue" / TOPIC / "1" / f"{0:020d}"
    with open(queue_file, "r+b") as f:
        f.seek(3 * 20)
        f.write(bytes(8))  # the unit's commit-log offset zeroed

    found = store_check(copy, "--json")
    assert found.returncode == 1, found.stdout + found.stderr
    result = json.loads(found.stdout)
    assert [(d["offset"], d["length"], d["known"]) for d in result["damaged"]] == [
        (position, size, False)
    ]
    # The unit of the damaged record points at a record that fails its CRC: bad too.
    victim_queue = decode_record(first.read_bytes(), position, check_crc=False).queue_id
    expected = {f"{TOPIC}/1": 1}
    expected[f"{TOPIC}/{victim_queue}"] = expected.get(f"{TOPIC}/{victim_queue}", 0) + 1
    assert result["bad_units"] == expected
    assert result["records"] == COUNT - 1

    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        busy = store_check(data_dir, "--repair")
        assert busy.returncode != 0
        assert "in use by another process" in busy.stderr

    repaired = store_check(copy, "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert f"repair: skipped {size} bytes at {position}" in repaired.stdout
    assert (
        "2 consume-queue unit(s) disagreed with the log, 1 rebuilt, 1 left as holes"
        in repaired.stdout
    )
    assert "store is consistent" in repaired.stdout
    assert (copy / "damaged" / f"{position:020d}.bin").stat().st_size == size

    again = store_check(copy)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(in the report)" in again.stdout

    with running_broker(copy_tmp, *SHORT_INVISIBLE_ARGS) as broker:
        received = drain(broker)
    assert sorted(received) == sorted(sent - {body})


def test_store_check_reads_the_segment_size_from_the_files(tmp: Path) -> None:
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        produce(broker, 20)
    data_dir = data_dir_of(tmp)
    checked = store_check(data_dir, "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["segment_size"] == os.path.getsize(segments(data_dir)[0])
    wrong = store_check(data_dir, "--commit-log-file-size", "1g")
    assert wrong.returncode != 0
    assert "Traceback" not in wrong.stderr
    assert "leave the option out" in wrong.stderr


# -- files cut short or unreadable after a clean stop ------------------------------


@pytest.mark.parametrize("segment_index", [0, 1])
def test_a_segment_cut_short_keeps_every_record_before_the_cut(
    tmp: Path, segment_index: int
) -> None:
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        sent = produce(broker, COUNT)
    data_dir = data_dir_of(tmp)
    files = segments(data_dir)
    assert len(files) >= 3
    victim = files[segment_index]
    segment_size = victim.stat().st_size
    records = records_of(victim)
    # Mid-record, well inside the segment (as a copy or a file system cuts a file).
    position, size, _ = records[len(records) // 2]
    os.truncate(victim, position + size // 2)
    lost = {body for pos, _, body in records if pos >= position}
    assert lost and lost < sent

    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        received = drain(broker)
        warnings = warnings_of(broker)
    assert sorted(received) == sorted(sent - lost), "every record outside the cut reads back"
    assert any("cut short" in w and victim.name in w for w in warnings), warnings
    # Zero-extended to the segments' size, not moved away.
    assert victim.stat().st_size == segment_size


def epoch_lines(data_dir: Path) -> list[str]:
    return (data_dir / "epoch").read_text().splitlines()[2:]


@pytest.mark.parametrize("damage", ["flipped", "empty", "garbage"])
def test_a_damaged_epoch_file_starts_the_broker_with_every_message(tmp: Path, damage: str) -> None:
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        sent = produce(broker, 100)
    # A second start begins term 2; the file it replaced is the .bak.
    with running_broker(tmp, *SHORT_INVISIBLE_ARGS):
        pass
    data_dir = data_dir_of(tmp)
    main, backup = data_dir / "epoch", data_dir / "epoch.bak"
    assert epoch_lines(data_dir)[0] == "1-0" and len(epoch_lines(data_dir)) == 2
    assert backup.exists()
    if damage == "flipped":
        flip_byte(main, main.stat().st_size - 2)  # the .bak is good
    else:
        for copy in (main, backup):
            copy.write_bytes(b"" if damage == "empty" else os.urandom(50))

    with running_broker(tmp, *SHORT_INVISIBLE_ARGS) as broker:
        received = drain(broker)
        warnings = warnings_of(broker)
        assert sorted(received) == sorted(sent)
        # Still taking writes, in a term numbered above every one it may have used.
        assert produce(broker, 1)
    if damage == "flipped":
        assert any("read its previous version" in w for w in warnings), warnings
        assert epoch_lines(data_dir)[-1].startswith("3-")
    else:
        assert any("rebuilt from the commit log" in w for w in warnings), warnings
        # The whole log is one term, from its first offset.
        assert epoch_lines(data_dir) == ["1-0"]
