"""A single flipped byte anywhere in an old record, then a crash: at most that record is lost.

One multi-segment log is written and left as a crash leaves it (the ``abort``
file, a checkpoint that makes recovery check every record). Each case copies
it, flips one byte in one field of one record (or of a segment's BLANK
record), recovers, and checks what a reader sees: every other record, through
its consume queue and by key, and the damage named in ``damage-report.json``
whenever the damaged record is no longer readable.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.store_settings import small_store
from tests.unit.store.test_recovery import (
    HEADER_SIZE,
    QUEUES,
    TOPIC,
    Written,
    assert_same,
    fill_leaving,
    flip,
    leave_as_crashed,
    make_message,
    put,
    put_seqs,
    raw,
    start,
)

from skiff_broker.store.config import StoreConfig
from skiff_broker.store.damage_report import REPORT_NAME
from skiff_broker.store.message import StoredMessage, encode_properties
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.recovery import record_problem_at
from skiff_broker.store.results import GetStatus

# Byte ranges of a record with IPv4 hosts, by field (RocketMQ's layout).
HEADER_FIELDS = {
    "totalsize": (0, 4),
    "magic": (4, 8),
    "bodycrc": (8, 12),
    "queueid": (12, 16),
    "flag": (16, 20),
    "queueoffset": (20, 28),
    "physicaloffset": (28, 36),
    "sysflag": (36, 40),
    "borntimestamp": (40, 48),
    "bornhost": (48, 56),
    "storetimestamp": (56, 64),
    "storehost": (64, 72),
    "reconsumetimes": (72, 76),
    "preparedoffset": (76, 84),
    "bodylength": (84, 88),
}
TAIL_FIELDS = ("body", "topiclength", "topic", "propertieslength", "properties")
MASKS = (0xFF, 0x01, 0x80)


def log_config(data_dir: Path) -> StoreConfig:
    """The settings every store of these cases is written and opened with."""
    config = StoreConfig(data_dir=str(data_dir), **small_store(commit_log_file_size=64 * 1024))
    config.validate()
    return config


class Log:
    """A crashed store's data directory, written once, copied per case."""

    def __init__(self, root: Path) -> None:
        self.pristine = root / "pristine"
        self.config = log_config(self.pristine)
        store = start(self.config)
        written = put_seqs(store, range(0, 40))
        seqs = iter(range(40, 10_000))
        # The first segment ends in a BLANK record of 100 bytes.
        fill_leaving(store, written, seqs, 100)
        written += [put(store, make_message(next(seqs))) for _ in range(150)]
        self.written: list[Written] = written
        seg = self.config.commit_log_file_size
        assert written[-1].end > 2 * seg, "the log should span at least three segments"
        self.blank_at = written[0].physical + seg - 100
        # Victims: one record in the middle of the second segment, the last of the first.
        self.middle = next(i for i, w in enumerate(written) if w.physical >= seg + seg // 2)
        self.last_of_first = max(i for i, w in enumerate(written) if w.end <= seg)
        leave_as_crashed(store, written[0])

    def copy(self, target: Path) -> StoreConfig:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(self.pristine, target)
        return log_config(target)


@pytest.fixture(scope="module")
def crashed_log(tmp_path_factory: pytest.TempPathFactory) -> Log:
    return Log(tmp_path_factory.mktemp("damage"))


def field_offsets(w: Written, field: str) -> Iterator[int]:
    """Global offsets of every byte of ``field`` of record ``w`` (a few, for long fields)."""
    if field in HEADER_FIELDS:
        lo, hi = HEADER_FIELDS[field]
        yield from (w.physical + i for i in range(lo, hi))
        return
    body = len(w.message.body)
    topic_at = w.physical + HEADER_SIZE + body
    props = len(encode_properties(w.message.properties))
    spans = {
        "body": (w.physical + HEADER_SIZE, body),
        "topiclength": (topic_at, 1),
        "topic": (topic_at + 1, len(TOPIC)),
        "propertieslength": (topic_at + 1 + len(TOPIC), 2),
        "properties": (topic_at + 3 + len(TOPIC), props),
    }
    start, length = spans[field]
    yield from sorted({start, start + length // 2, start + length - 1})


def read_queue(store: MessageStore, queue_id: int) -> list[StoredMessage]:
    """Every message of one queue, min to max offset; holes are stepped over, never stall."""
    offset = store.min_offset(TOPIC, queue_id)
    end = store.max_offset(TOPIC, queue_id)
    got: list[StoredMessage] = []
    while offset < end:
        result = store.get_messages(TOPIC, queue_id, offset, 32)
        assert result.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE), result.status
        assert result.next_offset > offset, f"the reader stalls at {queue_id}/{offset}"
        got.extend(result.messages)
        offset = result.next_offset
    return got


def report_of(config: StoreConfig) -> list[dict]:
    path = os.path.join(config.data_dir, REPORT_NAME)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def assert_only_victim_lost(store: MessageStore, written: list[Written], victim: int) -> None:
    """Every record but ``written[victim]`` reads back; the victim is either intact or reported."""
    assert store.wait_dispatched(timeout=30)
    hit = written[victim]
    kept = [w for i, w in enumerate(written) if i != victim]
    assert store.commit_log.max_offset == written[-1].end, "the log was cut"
    for queue_id in range(QUEUES):
        mine = [w for w in kept if w.message.queue_id == queue_id]
        got = [m for m in read_queue(store, queue_id) if m.physical_offset != hit.physical]
        assert [m.physical_offset for m in got] == [w.physical for w in mine], queue_id
        for m, w in zip(got, mine, strict=True):
            assert_same(m, w)
    for w in kept:
        found = store.query_by_key(TOPIC, f"k{w.seq}")
        assert w.physical in [m.physical_offset for m in found]
    if store.get_message_at(hit.physical, hit.size) is None and not passes_record_check(
        store.config, hit
    ):
        report = report_of(store.config)
        assert any(
            e["kind"] == "skipped" and e["offset"] <= hit.physical < e["offset"] + e["length"]
            for e in report
        ), f"record at {hit.physical} is unreadable and not in the report {report}"
        for e in report:
            if e["kind"] == "skipped":
                copy = os.path.join(store.config.data_dir, e["copy"])
                assert os.path.getsize(copy) == e["length"]


def passes_record_check(config: StoreConfig, w: Written) -> bool:
    """True if the one per-record check accepts the record (readers may still refuse it:
    a property that is not UTF-8 is found only when the properties are decoded)."""
    data = raw(config, w.physical, w.size)
    with memoryview(data) as view:
        return record_problem_at(data, view, 0, len(data), w.physical, True) is None


def recover_with_flip(
    crashed_log: Log, tmp_path: Path, offset: int, mask: int, *, rebuild: bool = False
) -> MessageStore:
    config = crashed_log.copy(tmp_path / "case")
    flip(config, offset, mask)
    if rebuild:
        # Consume queues and index are rebuilt from the damaged log alone.
        shutil.rmtree(config.consume_queue_dir)
        shutil.rmtree(config.index_dir)
    store = start(config)
    assert not store.clean_start
    return store


@pytest.mark.parametrize("field", [*HEADER_FIELDS, *TAIL_FIELDS])
def test_one_flipped_byte_loses_at_most_its_record(
    crashed_log: Log, tmp_path: Path, field: str
) -> None:
    for victim in (crashed_log.middle, crashed_log.last_of_first):
        w = crashed_log.written[victim]
        for offset in field_offsets(w, field):
            for mask in MASKS:
                store = recover_with_flip(crashed_log, tmp_path, offset, mask)
                try:
                    assert_only_victim_lost(store, crashed_log.written, victim)
                finally:
                    store.shutdown()


# A record's queue offset is outside its CRC: when the queues must be rebuilt from
# a log where it is damaged, the queue cannot tell which of two records is right.
REBUILT_FIELDS = [f for f in [*HEADER_FIELDS, *TAIL_FIELDS] if f != "queueoffset"]


@pytest.mark.parametrize("field", REBUILT_FIELDS)
def test_queues_rebuilt_from_a_damaged_log_hold_every_other_record(
    crashed_log: Log, tmp_path: Path, field: str
) -> None:
    w = crashed_log.written[crashed_log.middle]
    for offset in field_offsets(w, field):
        store = recover_with_flip(crashed_log, tmp_path, offset, 0xFF, rebuild=True)
        try:
            assert_only_victim_lost(store, crashed_log.written, crashed_log.middle)
        finally:
            store.shutdown()


@pytest.mark.parametrize("byte", range(8))
def test_a_damaged_blank_record_loses_nothing(crashed_log: Log, tmp_path: Path, byte: int) -> None:
    for mask in MASKS:
        store = recover_with_flip(crashed_log, tmp_path, crashed_log.blank_at + byte, mask)
        try:
            written = crashed_log.written
            assert store.commit_log.max_offset == written[-1].end
            assert store.wait_dispatched(timeout=30)
            for queue_id in range(QUEUES):
                mine = [x for x in written if x.message.queue_id == queue_id]
                got = read_queue(store, queue_id)
                assert [m.physical_offset for m in got] == [x.physical for x in mine]
        finally:
            store.shutdown()


def test_the_report_names_the_damage_once(
    crashed_log: Log, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    w = crashed_log.written[crashed_log.middle]
    config = crashed_log.copy(tmp_path / "case")
    flip(config, w.physical + HEADER_SIZE)  # the body: fails its CRC
    caplog.set_level("WARNING", logger="skiff_broker.store")
    store = start(config)
    assert f"skipped 1 damaged record(s), {w.size} bytes" in caplog.text
    assert str(w.physical) in caplog.text
    copy = os.path.join(config.data_dir, "damaged", f"{w.physical:020d}.bin")
    with open(copy, "rb") as f:
        assert f.read() == raw(config, w.physical, w.size)
    assert store.damage_history()[0]["offset"] == w.physical

    # Found again by the next crash's recovery: named in the log, not added twice.
    more = put(store, make_message(9_999))
    leave_as_crashed(store, crashed_log.written[0])
    store = start(config)
    skipped = [e for e in report_of(config) if e["kind"] == "skipped"]
    assert [(e["offset"], e["length"]) for e in skipped] == [(w.physical, w.size)]
    assert_same(store.get_message_at(more.physical, more.size), more)
    store.shutdown()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_flipped_byte_of_any_record(
    crashed_log: Log, tmp_path: Path, data: st.DataObject
) -> None:
    written = crashed_log.written
    victim = data.draw(st.integers(0, len(written) - 2), label="record")
    w = written[victim]
    offset = w.physical + data.draw(st.integers(0, w.size - 1), label="byte")
    mask = data.draw(st.integers(1, 255), label="mask")
    store = recover_with_flip(crashed_log, tmp_path, offset, mask)
    try:
        assert_only_victim_lost(store, written, victim)
    finally:
        store.shutdown()


def test_a_cut_tail_is_zeroed_so_no_resync_can_bring_it_back(
    crashed_log: Log, tmp_path: Path
) -> None:
    written = crashed_log.written
    config = crashed_log.copy(tmp_path / "case")
    last = written[-1]
    flip(config, last.physical + HEADER_SIZE)  # nothing valid after it: a torn tail
    store = start(config)
    assert store.commit_log.max_offset == last.physical
    assert raw(config, last.physical, last.size) == bytes(last.size)
    # A short message lands at the cut; the old record's bytes after it stay zero,
    # so damage to the new one could never resynchronise on the old record.
    resent = put(store, make_message(5_000, 10))
    assert resent.physical == last.physical
    leave_as_crashed(store, written[0])
    flip(config, resent.physical + HEADER_SIZE)
    store = start(config)
    assert store.commit_log.max_offset == resent.physical
    assert store.get_message_at(last.physical, last.size) is None
    store.shutdown()


@pytest.mark.parametrize("shift", [0, 13], ids=["another-record", "inside-a-record"])
def test_an_index_entry_pointing_at_no_matching_record_is_dropped_on_query(
    crashed_log: Log, tmp_path: Path, shift: int
) -> None:
    # Every entry's commit-log offset is overwritten: with the first record's
    # (a real record, of other keys) or with one pointing inside a record.
    config = crashed_log.copy(tmp_path / "case")
    written = crashed_log.written
    store = start(config)
    store.shutdown()
    entries_at = 40 + config.max_hash_slot_num * 4
    for name in os.listdir(config.index_dir):
        path = os.path.join(config.index_dir, name)
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            for at in range(entries_at + 20, len(data) - 19, 20):
                key_hash, physical = struct.unpack_from(">iq", data, at)
                if key_hash or physical:
                    struct.pack_into(">q", data, at + 4, written[0].physical + shift)
            f.seek(0)
            f.write(data)
    store = start(config)
    try:
        assert store.clean_start
        for w in written[1:20]:
            assert store.query_by_key(TOPIC, f"k{w.seq}") == []
        if shift == 0:
            assert [m.physical_offset for m in store.query_by_key(TOPIC, "k0")] == [0]
    finally:
        store.shutdown()


@pytest.mark.parametrize("field", ["body", "totalsize", "magic", "topic"])
def test_a_replica_dispatches_past_a_damaged_record_it_receives(
    crashed_log: Log, tmp_path: Path, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The master's log holds a damaged record; a replica copies the bytes as they
    # are, and its dispatcher (not recovery) meets the damage: it must step over
    # it once and make every record after it readable, never stall behind it.
    source = crashed_log.copy(tmp_path / "source")
    written = crashed_log.written
    victim = crashed_log.middle
    w = written[victim]
    flip(source, next(field_offsets(w, field)) + (1 if field == "topic" else 0))
    replica = start(log_config(tmp_path / "replica"))
    caplog.set_level("WARNING", logger="skiff_broker.store")
    try:
        seg = source.commit_log_file_size
        end = written[-1].end
        offset = 0
        while offset < end:
            # A segment at a time, in pieces, as replication sends it.
            stop = min(end, offset - offset % seg + seg, offset + 5000)
            replica.append_replicated(offset, raw(source, offset, stop - offset))
            offset = stop
        assert_only_victim_lost(replica, written, victim)
        assert caplog.text.count(f"at commit-log offset {w.physical}") == 1
        assert any(e["offset"] == w.physical for e in replica.damage_history())
    finally:
        replica.shutdown()


UNIT_DAMAGE = {
    "points-at-no-record": lambda unit: struct.pack(">qiq", unit[0] + 7, unit[1], unit[2]),
    "wrong-size": lambda unit: struct.pack(">qiq", unit[0], unit[1] + 1, unit[2]),
    "wrong-tag-hash": lambda unit: struct.pack(">qiq", unit[0], unit[1], unit[2] ^ 0x5A5A),
    "zeroed": lambda unit: bytes(20),
    "garbage": lambda unit: bytes(range(20)),
}


@pytest.mark.parametrize("damage", list(UNIT_DAMAGE))
def test_a_bad_consume_queue_unit_is_rebuilt_after_a_crash(
    crashed_log: Log, tmp_path: Path, damage: str
) -> None:
    config = crashed_log.copy(tmp_path / "case")
    written = crashed_log.written
    w = written[crashed_log.middle]
    per_file = config.consume_queue_units_per_file
    first = w.queue_offset - w.queue_offset % per_file
    path = os.path.join(
        config.consume_queue_dir, TOPIC, str(w.message.queue_id), f"{first * 20:020d}"
    )
    at = (w.queue_offset - first) * 20
    with open(path, "r+b") as f:
        f.seek(at)
        unit = struct.unpack(">qiq", f.read(20))
        assert unit[:2] == (w.physical, w.size)
        f.seek(at)
        f.write(UNIT_DAMAGE[damage](unit))
    store = start(config)
    try:
        assert store.wait_dispatched(timeout=30)
        for queue_id in range(QUEUES):
            mine = [x for x in written if x.message.queue_id == queue_id]
            got = read_queue(store, queue_id)
            assert [m.physical_offset for m in got] == [x.physical for x in mine]
            for m, x in zip(got, mine, strict=True):
                assert_same(m, x)
        cq = store.consume_queues.get(TOPIC, w.message.queue_id)
        assert cq is not None
        assert cq.get(w.queue_offset) == unit
    finally:
        store.shutdown()


def test_a_resync_never_reaches_past_where_writing_stopped(tmp_path: Path) -> None:
    # A valid-looking record lies past a run of zeros longer than any record: no
    # write can have put it there, so damage before it is a torn tail, not a skip.
    config = StoreConfig(
        data_dir=str(tmp_path / "store"),
        **small_store(commit_log_file_size=4 * 1024 * 1024, max_message_size=16 * 1024),
    )
    config.validate()
    store = start(config)
    written = put_seqs(store, range(60))
    leave_as_crashed(store, written[0])
    last = written[-1]
    stale_at = last.end + config.max_message_size + 1024 * 1024 + 4096
    stale = bytearray(raw(config, last.physical, last.size))
    struct.pack_into(">q", stale, 28, stale_at)  # its PHYSICALOFFSET matches where it lies
    with open(os.path.join(config.commit_log_dir, f"{0:020d}"), "r+b") as f:
        f.seek(stale_at)
        f.write(stale)
        f.seek(last.physical + 4)
        f.write(b"\x00\x01\x02\x03")  # the last real record's magic: garbage
    store = start(config)
    try:
        assert store.commit_log.max_offset == last.physical
        assert store.get_message_at(stale_at, last.size) is None
        assert store.damage_history() == []
    finally:
        store.shutdown()


def test_a_record_whose_queue_offset_cannot_be_true_is_neither_queued_nor_indexed(
    crashed_log: Log, tmp_path: Path
) -> None:
    # The queue offset is outside the CRC: a flipped high byte claims an offset its queue
    # cannot have reached, so rebuilt queues and index leave the record out.
    w = crashed_log.written[crashed_log.middle]
    store = recover_with_flip(
        crashed_log, tmp_path, w.physical + HEADER_FIELDS["queueoffset"][0], 0x40, rebuild=True
    )
    try:
        assert store.wait_dispatched(timeout=30)
        assert w.physical not in [m.physical_offset for m in read_queue(store, w.message.queue_id)]
        assert store.query_by_key(TOPIC, f"k{w.seq}") == []
        others = [x for x in crashed_log.written if x is not w]
        for x in others[:: max(1, len(others) // 20)]:
            assert x.physical in [m.physical_offset for m in store.query_by_key(TOPIC, f"k{x.seq}")]
    finally:
        store.shutdown()
