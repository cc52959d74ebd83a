"""A replica checks every record its master sends before writing any (real broker processes).

The master's data directory is filled in-process first, so the replica copies a
backlog: runs of the master's 1 MiB transfer size end inside records, and
segments end in BLANK records whose padding the replica writes itself.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from tests.support.broker_process import (
    SMALL_FILES_ENV,
    BrokerProcess,
    create_topics,
    data_dir_of,
    killed_afterwards,
    start_broker,
)
from tests.support.waiting import wait_for

from skiff_broker.client.admin import AdminClient
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

TOPIC = "copied"
SEGMENT = "2m"
SEGMENT_BYTES = 2 * 1024 * 1024
MAX_MESSAGE = "256k"
HEARTBEATS = ("--ha-heartbeat-interval", "0.5", "--ha-heartbeat-timeout", "5")


def fill(data_dir: Path, total_bytes: int) -> list[tuple[int, int]]:
    """Messages of varied sizes into a store laid out as the broker expects; (offset, size) each."""
    create_topics(data_dir, TopicConfig(TOPIC, 2, 2))
    entries = int(SMALL_FILES_ENV["SKIFF_INDEX_FILE_ENTRIES"])
    store = MessageStore(
        StoreConfig(
            data_dir=str(data_dir),
            commit_log_file_size=SEGMENT_BYTES,
            max_message_size=256 * 1024,
            consume_queue_units_per_file=int(SMALL_FILES_ENV["SKIFF_CONSUME_QUEUE_FILE_ENTRIES"]),
            max_index_num=entries,
            max_hash_slot_num=entries // 4,
        )
    )
    store.start()
    rnd = random.Random(7)
    written: list[tuple[int, int]] = []
    seq = 0
    while not written or written[-1][0] < total_bytes:
        batch = [
            Message(
                TOPIC, rnd.randbytes(rnd.randint(100, 30_000)), seq % 2, {"UNIQ_KEY": f"M{seq}"}
            )
            for seq in range(seq, seq + 16)
        ]
        seq += 16
        result = store.put_messages(batch)
        assert result.ok and result.append is not None, result.reason
        written += zip(result.append.physical_offsets, result.append.sizes, strict=True)
    store.shutdown()
    return written


def log_end(broker: BrokerProcess) -> int:
    with AdminClient(broker.endpoint) as admin:
        return admin.broker_info().commit_log_max_offset


def log_bytes(broker: BrokerProcess, end: int) -> bytes:
    directory = broker.data_dir / "commitlog"
    # Segments only: the allocator may be preparing the next one under a .tmp name.
    names = sorted(name for name in os.listdir(directory) if name.isdigit())
    return b"".join((directory / name).read_bytes() for name in names)[:end]


def start_pair(tmp_path: Path, started: list[BrokerProcess]) -> tuple[BrokerProcess, BrokerProcess]:
    master = start_broker(
        tmp_path / "master",
        "--role",
        "MASTER",
        "--commit-log-file-size",
        SEGMENT,
        "--max-message-size",
        MAX_MESSAGE,
        *HEARTBEATS,
    )
    started.append(master)
    (tmp_path / "replica").mkdir()
    replica = start_broker(
        tmp_path / "replica",
        "--role",
        "REPLICA",
        "--master-address",
        master.ha_endpoint,
        "--commit-log-file-size",
        SEGMENT,
        "--max-message-size",
        MAX_MESSAGE,
        *HEARTBEATS,
    )
    started.append(replica)
    return master, replica


def test_a_backlog_is_copied_byte_for_byte_across_cut_runs_and_blank_records(
    tmp_path: Path,
) -> None:
    fill(data_dir_of(tmp_path / "master"), 3 * SEGMENT_BYTES)
    with killed_afterwards() as started:
        master, replica = start_pair(tmp_path, started)
        end = log_end(master)
        wait_for(lambda: log_end(replica) == end, f"the replica to reach {end}")
        assert log_bytes(replica, end) == log_bytes(master, end)
        assert "fails its check" not in replica.log()


def test_a_record_that_fails_its_check_is_not_written_and_the_master_is_named(
    tmp_path: Path,
) -> None:
    written = fill(data_dir_of(tmp_path / "master"), SEGMENT_BYTES // 2)
    # Damage one record's last property byte on the master's disk: its closing \x02.
    bad_offset, bad_size = written[len(written) // 2]
    segment = data_dir_of(tmp_path / "master") / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(bad_offset + bad_size - 1)
        assert f.read(1) == b"\x02"
        f.seek(bad_offset + bad_size - 1)
        f.write(b"X")
    with killed_afterwards() as started:
        master, replica = start_pair(tmp_path, started)
        wait_for(lambda: "fails its check" in replica.log(), "the replica to refuse the record")
        errors = [line for line in replica.log_lines() if "fails its check" in line.get("msg", "")]
        assert errors and errors[0].get("level", "ERROR") in ("ERROR", "error")
        assert master.ha_endpoint in errors[0]["msg"]
        assert f"record at {bad_offset}" in errors[0]["msg"]
        assert log_end(replica) <= bad_offset, "nothing at or after the bad record is written"
        assert log_end(master) > bad_offset
