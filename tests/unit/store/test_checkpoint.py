"""The checkpoint file: RocketMQ's fields where RocketMQ reads them, and a scan start that
is trusted only when this layout wrote it together with them."""

from __future__ import annotations

import struct
from pathlib import Path

from skiff_broker.store.checkpoint import FILE_SIZE, Checkpoint

ROCKETMQ_FIELDS = struct.Struct(">qqqqq")  # StoreCheckpoint: getLong(0), (8), ... (32)


def written(path: Path) -> Checkpoint:
    checkpoint = Checkpoint(str(path), 11, 22, 33, 44, 55, -1, scan_start=123_456)
    checkpoint.flush()
    return checkpoint


def test_rocketmq_reads_its_five_fields_where_it_always_did(tmp_path):
    path = tmp_path / "checkpoint"
    written(path)
    raw = path.read_bytes()
    assert len(raw) == FILE_SIZE
    assert ROCKETMQ_FIELDS.unpack_from(raw) == (11, 22, 33, 44, 55)
    assert Checkpoint.load(str(path)).scan_start == 123_456


def test_a_checkpoint_rewritten_by_an_older_writer_has_no_scan_start(tmp_path):
    path = tmp_path / "checkpoint"
    written(path)
    # RocketMQ, or a Skiff without the scan start, writes only its own fields.
    with open(path, "r+b") as f:
        f.write(ROCKETMQ_FIELDS.pack(99, 98, 97, 96, 95))
    loaded = Checkpoint.load(str(path))
    assert (loaded.physic_msg_timestamp, loaded.scan_start) == (99, -1)


def test_a_checkpoint_without_the_field_or_a_missing_one_has_no_scan_start(tmp_path):
    rocketmq = tmp_path / "rocketmq"
    rocketmq.write_bytes(ROCKETMQ_FIELDS.pack(1, 2, 3, 4, 5).ljust(FILE_SIZE, b"\0"))
    assert Checkpoint.load(str(rocketmq)).scan_start == -1
    assert Checkpoint.load(str(tmp_path / "absent")).scan_start == -1
