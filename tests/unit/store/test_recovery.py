"""Recovery at start-up: torn and corrupt tails, clean starts, queue offsets, the data-dir lock.

A crash is left on disk as SIGKILL leaves it, as far as the next start can tell:
every write is in the files (the page cache outlives the process), the ``abort``
file is still there and the checkpoint names no clean end. Damage is then placed
byte by byte, so each case is exact. tests/integration/test_crash_recovery.py
kills real writer processes at random points.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import shutil
import struct
from collections.abc import Callable, Iterator

import pytest

from skiff_broker.store.checkpoint import Checkpoint
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.errors import StoreError
from skiff_broker.store.message import (
    BLANK_MAGIC,
    SIZE_MAGIC,
    Message,
    StoredMessage,
    encode_properties,
    header_struct,
    record_length,
)
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.results import GetStatus

TOPIC = "orders"
QUEUES = 3
HEADER_SIZE = header_struct(0).size
MakeConfig = Callable[..., StoreConfig]


@dataclasses.dataclass(frozen=True)
class Written:
    """A message the store acknowledged, and where it said the message went."""

    message: Message
    physical: int
    size: int
    queue_offset: int

    @property
    def seq(self) -> int:
        return int(self.message.properties.get("SEQ", "-1"))

    @property
    def end(self) -> int:
        return self.physical + self.size


def make_message(seq: int, body_len: int | None = None, *, properties: bool = True) -> Message:
    rnd = random.Random(seq)
    body = rnd.randbytes(body_len if body_len is not None else rnd.randint(1, 1500))
    props = {"KEYS": f"k{seq}", "UNIQ_KEY": f"U{seq:08d}", "SEQ": str(seq)} if properties else {}
    return Message(TOPIC, body, queue_id=seq % QUEUES, properties=props)


def put(store: MessageStore, message: Message) -> Written:
    result = store.put_message(message)
    assert result.ok, result.reason
    append = result.append
    assert append is not None
    return Written(message, append.physical_offsets[0], append.sizes[0], append.queue_offsets[0])


def put_seqs(store: MessageStore, seqs: range) -> list[Written]:
    return [put(store, make_message(seq)) for seq in seqs]


def start(config: StoreConfig) -> MessageStore:
    store = MessageStore(config)
    store.start()
    return store


def leave_as_crashed(store: MessageStore, flushed_through: Written) -> None:
    """Stop ``store`` and leave its directory as a crash would have left it.

    The checkpoint says the commit log, consume queues and index were last known
    flushed through ``flushed_through``: everything after it is what the crash
    may have torn, and what recovery has to check.
    """
    config = store.config
    last_flushed = store.get_message_at(flushed_through.physical, flushed_through.size)
    assert last_flushed is not None
    store.shutdown()
    with open(config.abort_path, "wb"):
        pass
    checkpoint = Checkpoint.load(config.checkpoint_path)
    checkpoint.clean_shutdown_offset = -1
    checkpoint.physic_msg_timestamp = last_flushed.store_timestamp
    checkpoint.logics_msg_timestamp = last_flushed.store_timestamp
    checkpoint.index_msg_timestamp = last_flushed.store_timestamp
    checkpoint.scan_start = flushed_through.physical
    checkpoint.flush()


# -- bytes on disk -------------------------------------------------------------


def _locate(config: StoreConfig, offset: int) -> tuple[str, int]:
    size = config.commit_log_file_size
    base = offset - offset % size
    return os.path.join(config.commit_log_dir, f"{base:020d}"), offset - base


def patch(config: StoreConfig, offset: int, data: bytes) -> None:
    path, position = _locate(config, offset)
    assert position + len(data) <= config.commit_log_file_size
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def raw(config: StoreConfig, offset: int, n: int) -> bytes:
    path, position = _locate(config, offset)
    with open(path, "rb") as f:
        f.seek(position)
        return f.read(n)


def flip(config: StoreConfig, offset: int, mask: int = 0xFF) -> None:
    patch(config, offset, bytes([raw(config, offset, 1)[0] ^ mask]))


def segments_on_disk(config: StoreConfig) -> list[int]:
    return sorted(int(name) for name in os.listdir(config.commit_log_dir) if name.isdigit())


def segments_up_to(config: StoreConfig, offset: int) -> list[int]:
    size = config.commit_log_file_size
    return list(range(0, offset - offset % size + 1, size))


def data_segments_on_disk(config: StoreConfig) -> list[int]:
    """Segments on disk, less the one a running store prepares ahead of need.

    That one follows the last segment and must hold nothing yet.
    """
    on_disk = segments_on_disk(config)
    if len(on_disk) >= 2 and on_disk[-1] == on_disk[-2] + config.commit_log_file_size:
        path = os.path.join(config.commit_log_dir, f"{on_disk[-1]:020d}")
        with open(path, "rb") as f:
            if f.read(4096) == bytes(4096):
                return on_disk[:-1]
    return on_disk


# -- what the store returns ------------------------------------------------------


def read_queue(store: MessageStore, queue_id: int) -> list[StoredMessage]:
    """Every message of one queue, min to max offset; no offset may be skipped."""
    offset = store.min_offset(TOPIC, queue_id)
    end = store.max_offset(TOPIC, queue_id)
    got: list[StoredMessage] = []
    while offset < end:
        result = store.get_messages(TOPIC, queue_id, offset, 32)
        assert result.status is GetStatus.FOUND, (queue_id, offset, result.status)
        got.extend(result.messages)
        offset = result.next_offset
    return got


def assert_same(got: StoredMessage | None, w: Written) -> None:
    assert got is not None, f"message {w.seq} at {w.physical} is missing"
    assert got.physical_offset == w.physical
    assert got.queue_offset == w.queue_offset
    assert got.queue_id == w.message.queue_id
    assert got.topic == w.message.topic
    assert got.body == w.message.body
    assert got.properties == w.message.properties


def assert_holds_exactly(store: MessageStore, written: list[Written]) -> None:
    """The store returns ``written`` byte for byte, and nothing else."""
    assert store.wait_dispatched(timeout=30)
    for queue_id in range(QUEUES):
        mine = [w for w in written if w.message.queue_id == queue_id]
        got = read_queue(store, queue_id)
        assert store.min_offset(TOPIC, queue_id) == 0
        assert store.max_offset(TOPIC, queue_id) == len(mine)
        assert [m.queue_offset for m in got] == list(range(len(mine)))
        assert len(got) == len(mine)
        for m, w in zip(got, mine, strict=True):
            assert_same(m, w)
    for w in written:
        assert_same(store.get_message_at(w.physical, w.size), w)
        if w.message.properties:
            found = store.query_by_key(TOPIC, f"k{w.seq}")
            assert w.physical in [m.physical_offset for m in found]
    end = max((w.end for w in written), default=0)
    assert store.commit_log.max_offset >= end


def assert_holds_all_but(store: MessageStore, written: list[Written], lost: set[int]) -> None:
    """The store returns every message of ``written`` but those at indexes ``lost``.

    Each kept message keeps its queue offset; a reader steps over the hole a
    lost one leaves.
    """
    assert store.wait_dispatched(timeout=30)
    kept = [w for i, w in enumerate(written) if i not in lost]
    for queue_id in range(QUEUES):
        mine = [w for w in kept if w.message.queue_id == queue_id]
        got = [m for m in read_queue(store, queue_id) if m.topic == TOPIC]
        assert [m.physical_offset for m in got] == [w.physical for w in mine]
        for m, w in zip(got, mine, strict=True):
            assert_same(m, w)
    for w in kept:
        assert_same(store.get_message_at(w.physical, w.size), w)
        if w.message.properties:
            found = store.query_by_key(TOPIC, f"k{w.seq}")
            assert w.physical in [m.physical_offset for m in found]


# -- crash recovery of damaged tails ---------------------------------------------


def _damage_body(config: StoreConfig, w: Written) -> None:
    flip(config, w.physical + HEADER_SIZE)


def _damage_size_high(config: StoreConfig, w: Written) -> None:
    flip(config, w.physical, 0x40)


def _damage_size_low(config: StoreConfig, w: Written) -> None:
    flip(config, w.physical + 3, 0x01)


def _tear(config: StoreConfig, w: Written) -> None:
    # The writer died halfway through the record: the rest is still zero.
    half = w.size // 2
    patch(config, w.physical + half, bytes(w.size - half))


def _props_unwritten(config: StoreConfig, w: Written) -> None:
    # Died after PROPERTIESLENGTH was written but before the properties were.
    n = len(encode_properties(w.message.properties))
    patch(config, w.end - n, bytes(n))


def _topic_unwritten(config: StoreConfig, w: Written) -> None:
    # A message without properties, cut while its topic was being copied.
    assert not w.message.properties
    topic_at = w.physical + HEADER_SIZE + len(w.message.body) + 1
    patch(config, topic_at, bytes(len(TOPIC)))


def _garbage_after(config: StoreConfig, w: Written) -> None:
    room = config.commit_log_file_size - w.end % config.commit_log_file_size
    patch(config, w.end, random.Random(7).randbytes(min(300, room)))


# name -> (damage, which record is hit, is that record lost). Damage with valid
# records after it is skipped, not cut: tests/unit/store/test_damage_recovery.py.
DAMAGES = {
    "body-crc": (_damage_body, "last", True),
    "totalsize-high-byte": (_damage_size_high, "last", True),
    "totalsize-low-byte": (_damage_size_low, "last", True),
    "torn-last-record": (_tear, "last", True),
    "properties-not-written": (_props_unwritten, "last", True),
    "topic-not-written": (_topic_unwritten, "last", True),
    "garbage-after-last-record": (_garbage_after, "last", False),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_tail_is_cut_and_stays_cut(store_config: MakeConfig, damage: str) -> None:
    inflict, which, lost = DAMAGES[damage]
    config = store_config(flush_type=FlushType.SYNC_FLUSH)
    store = start(config)
    written = put_seqs(store, range(200))
    if damage == "topic-not-written":
        written.append(put(store, make_message(200, properties=False)))
    seg = config.commit_log_file_size
    assert written[-1].end > 2 * seg, "the log should span at least three segments"
    assert which == "last"
    k = len(written) - 1
    leave_as_crashed(store, written[0])

    inflict(config, written[k])
    keep = k if lost else len(written)
    cut = written[k].physical if lost else written[k].end

    store = start(config)
    assert not store.clean_start
    assert store.commit_log.max_offset == cut
    assert data_segments_on_disk(config) == segments_up_to(config, cut)
    assert_holds_exactly(store, written[:keep])
    for cq in store.consume_queues:
        units = [cq.get(i) for i in range(cq.min_offset, cq.max_offset)]
        assert all(u is not None and u[0] + u[1] <= cut for u in units)
    for w in written[keep:]:
        assert store.query_by_key(TOPIC, f"k{w.seq}") == []

    # The producer sends the lost messages again: they land right at the cut. Each
    # takes the same bytes as before, so stale records after them would line up
    # and pass every check if recovery had left them on disk.
    resent = [put(store, w.message) for w in written[keep : keep + 2]]
    if not resent:
        resent = put_seqs(store, range(500, 502))
    assert resent[0].physical == cut
    expected = written[:keep] + resent
    assert_holds_exactly(store, expected)

    leave_as_crashed(store, written[0])
    store = start(config)
    assert not store.clean_start
    assert store.commit_log.max_offset == resent[-1].end
    assert_holds_exactly(store, expected)
    store.shutdown()


def fill_leaving(
    store: MessageStore, written: list[Written], seqs: Iterator[int], remaining: int
) -> None:
    """Append until the current segment has exactly ``remaining`` bytes left."""
    seg = store.config.commit_log_file_size
    topic_len = len(TOPIC.encode())
    while True:
        last = written[-1]
        left = seg - (last.end - last.physical // seg * seg)
        seq = next(seqs)
        overhead = record_length(0, topic_len, len(encode_properties(make_message(seq).properties)))
        body_len = left - remaining - overhead
        if 1 <= body_len <= 8000:
            written.append(put(store, make_message(seq, body_len)))
            assert written[-1].end % seg == seg - remaining
            return
        # Too much room: shrink it; too little: roll to a fresh segment.
        written.append(put(store, make_message(seq, 4000)))


@pytest.mark.parametrize("remaining", [8, 9, 11, 12, 100])
def test_blank_record_of_any_size_ends_a_segment(store_config: MakeConfig, remaining: int) -> None:
    # A record is written if it leaves at least 8 bytes; the BLANK that pads the
    # segment may then be just its size and magic.
    config = store_config()
    store = start(config)
    seqs = iter(range(10_000))
    written = [put(store, make_message(next(seqs)))]
    fill_leaving(store, written, seqs, remaining)
    boundary = written[-1].end + remaining
    written += [put(store, make_message(next(seqs))) for _ in range(5)]
    assert written[-5].physical == boundary
    size, magic = SIZE_MAGIC.unpack(raw(config, written[-6].end, 8))
    assert (size, magic) == (remaining, BLANK_MAGIC)
    leave_as_crashed(store, written[0])

    store = start(config)
    assert store.commit_log.max_offset == written[-1].end
    assert_holds_exactly(store, written)
    store.shutdown()


def test_bad_length_in_the_last_record_of_a_segment_is_cut(store_config: MakeConfig) -> None:
    # BODYLENGTH is outside the CRC. Here it points the topic length at a byte
    # whose value reaches past the segment's end: the record must be cut, not
    # make recovery read out of bounds.
    config = store_config()
    store = start(config)
    seqs = iter(range(10_000))
    written = [put(store, make_message(next(seqs)))]
    fill_leaving(store, written, seqs, 8)
    victim = len(written) - 1
    written += [put(store, make_message(next(seqs))) for _ in range(3)]
    leave_as_crashed(store, written[0])

    w = written[victim]
    patch(config, w.physical + HEADER_SIZE - 4, struct.pack(">i", w.size - HEADER_SIZE - 3))
    store = start(config)
    # The records of the next segment are valid: only the damaged one is lost.
    assert store.commit_log.max_offset == written[-1].end
    assert_holds_all_but(store, written, {victim})
    store.shutdown()

    # With nothing valid after it, the same damage is a torn tail, cut.
    store = start(config)
    leave_as_crashed(store, written[0])
    for later in written[victim + 1 :]:
        patch(config, later.physical, bytes(later.size))
    store = start(config)
    assert store.commit_log.max_offset == w.physical
    # Its queue offset stays the hole the first recovery made of it.
    assert_holds_all_but(store, written[: victim + 1], {victim})
    store.shutdown()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flush_type", list(FlushType))
def test_recovery_that_ends_on_a_segment_boundary(
    store_config: MakeConfig, flush_type: FlushType
) -> None:
    config = store_config(flush_type=flush_type)
    store = start(config)
    written = put_seqs(store, range(200))
    seg = config.commit_log_file_size
    k = next(i for i, w in enumerate(written) if w.physical >= 2 * seg)
    assert written[k].physical == 2 * seg
    leave_as_crashed(store, written[0])

    # The first record of the third segment is damaged and nothing after it was
    # written: a torn tail, cut right at the boundary.
    _damage_body(config, written[k])
    for w in written[k + 1 :]:
        patch(config, w.physical, bytes(w.size))
    store = start(config)
    assert store.commit_log.max_offset == 2 * seg
    assert_holds_exactly(store, written[:k])
    # Shutting down flushes everything; it must finish with nothing after the boundary.
    store.shutdown()

    store = start(config)
    assert store.clean_start
    more = [put(store, w.message) for w in written[k : k + 3]]
    assert more[0].physical == 2 * seg
    assert_holds_exactly(store, written[:k] + more)
    store.shutdown()


def test_scan_starts_early_enough_when_checkpoint_stamps_tie(store_config: MakeConfig) -> None:
    """The checkpoint is a store timestamp in milliseconds; equal stamps must not hide a tail.

    The checkpoint says records stored up to T are flushed. The last record of
    one segment was appended in that same millisecond T but after the flush had
    sampled it, and the next segment begins with a record stamped T as well. The
    unflushed record is damaged (lost with the page cache); recovery must still
    check it rather than start at the segment that begins at T.
    """
    config = store_config()
    store = start(config)
    written = put_seqs(store, range(200))
    seg = config.commit_log_file_size
    k = next(i for i, w in enumerate(written) if w.physical >= 2 * seg)
    first_of_third = store.get_message_at(written[k].physical, written[k].size)
    assert first_of_third is not None
    leave_as_crashed(store, written[0])

    checkpoint = Checkpoint.load(config.checkpoint_path)
    stamp = first_of_third.store_timestamp
    checkpoint.physic_msg_timestamp = stamp
    checkpoint.logics_msg_timestamp = stamp
    checkpoint.index_msg_timestamp = stamp
    checkpoint.flush()
    _damage_body(config, written[k - 1])
    for w in written[k:]:
        patch(config, w.physical, bytes(w.size))

    store = start(config)
    assert store.commit_log.max_offset == written[k - 1].physical
    assert_holds_exactly(store, written[: k - 1])
    store.shutdown()


# -- clean and unclean restarts ---------------------------------------------------


def test_clean_restart_uses_the_checkpoint(
    store_config: MakeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    config = store_config()
    store = start(config)
    written = put_seqs(store, range(150))
    end = written[-1].end
    store.shutdown()
    assert not os.path.exists(config.abort_path)
    assert Checkpoint.load(config.checkpoint_path).clean_shutdown_offset == end

    caplog.set_level(logging.INFO, logger="skiff_broker.store")
    store = start(config)
    assert store.clean_start
    assert f"clean start: commit log ends at {end}" in caplog.text
    assert "recovered after a crash" not in caplog.text
    # While the store runs, the checkpoint names no clean end.
    assert os.path.exists(config.abort_path)
    assert Checkpoint.load(config.checkpoint_path).clean_shutdown_offset == -1
    assert_holds_exactly(store, written)

    # Queue offsets continue where each queue ended.
    more = put_seqs(store, range(150, 156))
    for w in more:
        assert w.queue_offset == sum(1 for x in written if x.message.queue_id == w.message.queue_id)
        written.append(w)
    assert more[0].physical == end
    assert_holds_exactly(store, written)
    store.shutdown()


def test_clean_start_does_not_scan_but_reads_still_check_crc(
    store_config: MakeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    # Damage after a clean stop is not looked for at start (that is what makes the
    # start fast), yet a read never returns a record that fails its CRC.
    config = store_config()
    store = start(config)
    written = put_seqs(store, range(150))
    store.shutdown()
    victim = written[70]
    _damage_body(config, victim)

    caplog.set_level(logging.INFO, logger="skiff_broker.store")
    store = start(config)
    assert store.clean_start
    assert store.commit_log.max_offset == written[-1].end
    assert store.get_message_at(victim.physical, victim.size) is None
    got = read_queue(store, victim.message.queue_id)
    assert victim.physical not in [m.physical_offset for m in got]
    mine = [w for w in written if w.message.queue_id == victim.message.queue_id and w != victim]
    for m, w in zip(got, mine, strict=True):
        assert_same(m, w)
    assert "skipping corrupt record" in caplog.text
    assert "fails its body CRC" in caplog.text
    store.shutdown()


@pytest.mark.parametrize("stale_end", ["segment-start", "mid-segment"])
def test_clean_end_that_does_not_match_the_log_is_not_trusted(
    store_config: MakeConfig, caplog: pytest.LogCaptureFixture, stale_end: str
) -> None:
    # A checkpoint older than the commit log (restored from a backup, say) names
    # an end with records after it: trusting it would delete them.
    config = store_config()
    store = start(config)
    written = put_seqs(store, range(200))
    store.shutdown()
    seg = config.commit_log_file_size
    k = next(i for i, w in enumerate(written) if w.physical >= seg)
    assert written[k].physical == seg
    stale = written[k] if stale_end == "segment-start" else written[k + 3]
    checkpoint = Checkpoint.load(config.checkpoint_path)
    checkpoint.clean_shutdown_offset = stale.physical
    checkpoint.flush()

    caplog.set_level(logging.INFO, logger="skiff_broker.store")
    store = start(config)
    assert store.clean_start
    assert "checkpoint does not match the commit log" in caplog.text
    assert store.commit_log.max_offset == written[-1].end
    assert_holds_exactly(store, written)
    store.shutdown()


def test_crash_restart_rebuilds_queues_and_index(
    store_config: MakeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    config = store_config()
    store = start(config)
    written = put_seqs(store, range(150))
    leave_as_crashed(store, written[0])

    caplog.set_level(logging.INFO, logger="skiff_broker.store")
    store = start(config)
    assert not store.clean_start
    assert "recovered after a crash" in caplog.text
    assert_holds_exactly(store, written)
    written += put_seqs(store, range(150, 160))
    assert_holds_exactly(store, written)
    leave_as_crashed(store, written[0])

    # Consume queues and index are derived data: without them, recovery rebuilds
    # both from the commit log, and queue offsets continue as before.
    shutil.rmtree(config.consume_queue_dir)
    shutil.rmtree(config.index_dir)
    store = start(config)
    assert not store.clean_start
    assert_holds_exactly(store, written)
    more = put_seqs(store, range(160, 163))
    for w in more:
        assert w.queue_offset == sum(1 for x in written if x.message.queue_id == w.message.queue_id)
        written.append(w)
    assert_holds_exactly(store, written)
    store.shutdown()


def test_largest_message_is_dispatched_and_recovered(store_config: MakeConfig) -> None:
    # A message as large as max_message_size, beyond the dispatcher's usual read size.
    big = 4 * 1024 * 1024 + 64 * 1024
    config = store_config(
        commit_log_file_size=9 * 1024 * 1024, max_message_size=big, max_index_num=100
    )
    store = start(config)
    written = [put(store, make_message(1, big)), put(store, make_message(2))]
    assert store.wait_dispatched(timeout=30)
    assert_holds_exactly(store, written)
    leave_as_crashed(store, written[0])

    shutil.rmtree(config.consume_queue_dir)
    store = start(config)
    assert_holds_exactly(store, written)
    store.shutdown()


# -- the data directory lock ------------------------------------------------------


def test_second_store_on_the_same_directory_is_refused(store_config: MakeConfig) -> None:
    config = store_config()
    first = start(config)
    written = put_seqs(first, range(20))

    second = MessageStore(store_config())
    with pytest.raises(StoreError, match="in use by another process"):
        second.start()
    # The refused store touched nothing: the first keeps running undisturbed.
    assert os.path.exists(config.abort_path)
    assert Checkpoint.load(config.checkpoint_path).clean_shutdown_offset == -1
    written += put_seqs(first, range(20, 25))
    assert_holds_exactly(first, written)
    first.shutdown()

    third = start(store_config())
    assert third.clean_start
    assert_holds_exactly(third, written)
    third.shutdown()


def _put_batch(store: MessageStore, seqs: list[int]) -> list[Written]:
    messages = [make_message(seq) for seq in seqs]
    result = store.put_messages(messages)
    assert result.ok and result.append is not None
    a = result.append
    return [
        Written(m, a.physical_offsets[i], a.sizes[i], a.queue_offsets[i])
        for i, m in enumerate(messages)
    ]


@pytest.mark.parametrize("heads_landed", [0, 1, 3])
def test_an_append_a_crash_cut_short_leaves_a_prefix_of_its_batch_and_no_damage(
    store_config: MakeConfig, heads_landed: int
) -> None:
    """An append copies every record's size and magic after the rest of its batch, front to
    back. A crash in that copy leaves the records whose heads landed, then zeros where the
    next head belongs: the log ends there, and nothing is reported damaged."""
    config = store_config()
    store = start(config)
    written = put_seqs(store, range(40))
    # Seqs of one queue, so the batch is one queue's.
    batch = _put_batch(store, [40 + QUEUES * i for i in range(4)])
    leave_as_crashed(store, written[0])
    for w in batch[heads_landed:]:
        patch(config, w.physical, bytes(8))

    store = start(config)
    kept = written + batch[:heads_landed]
    assert store.commit_log.max_offset == batch[heads_landed].physical
    assert store.last_recovery is not None and store.last_recovery.damages == []
    assert store.damage_history() == []
    assert_holds_exactly(store, kept)
    # The next append takes the place of the first record that did not land.
    again = put(store, make_message(1000))
    assert again.physical == batch[heads_landed].physical
    store.shutdown()


def test_a_lost_head_before_a_later_append_is_still_damage_stepped_over(
    store_config: MakeConfig,
) -> None:
    """Zeros where a record's size and magic belong, followed by records of another append,
    are damage, not a torn tail: the records after it are kept."""
    config = store_config()
    store = start(config)
    written = put_seqs(store, range(40))
    first = _put_batch(store, [40 + QUEUES * i for i in range(3)])
    written += first
    written.append(put(store, make_message(100)))
    leave_as_crashed(store, written[0])
    patch(config, first[0].physical, bytes(8))

    store = start(config)
    assert store.commit_log.max_offset == written[-1].end
    assert store.last_recovery is not None
    assert [d.offset for d in store.last_recovery.damages] == [first[0].physical]
    assert_holds_all_but(store, written, {written.index(first[0])})
    store.shutdown()


def test_a_rebuild_keeps_two_topics_of_one_queue_id_apart(store_config: MakeConfig) -> None:
    # The log holds "other" 0..9, TOPIC 0..9, "other" 10..19, all in queue 0: read in one
    # pass, TOPIC's run is followed by records whose queue offsets go on from its own.
    config = store_config()
    store = start(config)
    sent: dict[str, list[bytes]] = {"other": [], TOPIC: []}
    for topic in ("other", TOPIC, "other"):
        bodies = [b"%s %d" % (topic.encode(), len(sent[topic]) + i) for i in range(10)]
        assert store.put_messages([Message(topic, body, queue_id=0) for body in bodies]).ok
        sent[topic] += bodies
    leave_as_crashed(store, put(store, make_message(0)))
    sent[TOPIC].append(make_message(0).body)
    shutil.rmtree(config.consume_queue_dir)
    shutil.rmtree(config.index_dir)
    store = start(config)
    try:
        assert store.wait_dispatched(timeout=30)
        for topic, bodies in sent.items():
            got = store.get_messages(topic, 0, 0, 64)
            assert got.status is GetStatus.FOUND
            assert [m.body for m in got.messages] == bodies, topic
    finally:
        store.shutdown()
