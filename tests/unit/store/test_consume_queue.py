"""ConsumeQueue files byte by byte, their recovery and retention, and get_messages statuses."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.store.commit_log import CommitLog
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.consume_queue import ConsumeQueue
from skiff_broker.store.consume_queue_table import ConsumeQueueTable
from skiff_broker.store.hashing import tag_hash
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.results import GetStatus

PER_FILE = 4
FILE_BYTES = PER_FILE * 20
BLANK = (0, 0x7FFFFFFF, 0)


def unit(n: int) -> tuple[int, int, int]:
    """A distinct unit for queue offset ``n``: record n is 100 bytes at 100 * n."""
    return (100 * n, 100, 1000 + n)


def queue_dir(root: Path) -> Path:
    return root / "TopicA" / "2"


def file_units(root: Path, start_byte: int) -> list[tuple[int, int, int]]:
    data = (queue_dir(root) / f"{start_byte:020d}").read_bytes()
    return [struct.unpack_from(">qiq", data, i) for i in range(0, len(data), 20)]


def files(root: Path) -> list[str]:
    return sorted(os.listdir(queue_dir(root)))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "consumequeue"


@pytest.fixture
def open_queue(root: Path) -> Iterator[Callable[[], ConsumeQueue]]:
    opened: list[ConsumeQueue] = []

    def make() -> ConsumeQueue:
        cq = ConsumeQueue("TopicA", 2, str(root), PER_FILE)
        opened.append(cq)
        return cq

    yield make
    for cq in opened:
        cq.close()


@pytest.fixture
def cq(open_queue: Callable[[], ConsumeQueue]) -> ConsumeQueue:
    return open_queue()


def put_range(cq: ConsumeQueue, offsets: range | list[int]) -> None:
    for n in offsets:
        assert cq.put(*unit(n), n)


# -- layout and reading -------------------------------------------------------


def test_units_are_20_bytes_at_20_times_offset_in_files_named_by_byte_offset(
    cq: ConsumeQueue, root: Path
) -> None:
    assert (cq.min_offset, cq.max_offset) == (0, 0)
    assert cq.get(0) is None

    put_range(cq, range(3))
    data = (queue_dir(root) / "00000000000000000000").read_bytes()
    assert len(data) == FILE_BYTES
    assert data[:60] == b"".join(struct.pack(">qiq", *unit(n)) for n in range(3))
    assert data[60:] == bytes(20)
    assert (cq.min_offset, cq.max_offset, cq.max_physical_offset) == (0, 3, 300)


def test_rolls_to_the_next_file_exactly_at_the_boundary(cq: ConsumeQueue, root: Path) -> None:
    put_range(cq, range(PER_FILE))
    assert files(root) == ["00000000000000000000"]
    assert file_units(root, 0) == [unit(n) for n in range(PER_FILE)]

    put_range(cq, [PER_FILE])
    assert files(root) == ["00000000000000000000", f"{FILE_BYTES:020d}"]
    assert file_units(root, FILE_BYTES) == [unit(PER_FILE), *[(0, 0, 0)] * (PER_FILE - 1)]
    assert cq.max_offset == PER_FILE + 1


def test_get_and_read_units(cq: ConsumeQueue) -> None:
    put_range(cq, range(10))
    assert [cq.get(n) for n in range(10)] == [unit(n) for n in range(10)]
    assert cq.get(10) is None
    assert cq.get(-1) is None
    assert cq.read_units(1, 2) == [unit(1), unit(2)]
    # A read stays within one file: offsets 2..3 here, then 4.. from the next call.
    assert cq.read_units(2, 10) == [unit(2), unit(3)]
    assert cq.read_units(4, 10) == [unit(n) for n in range(4, 8)]
    assert cq.read_units(8, 10) == [unit(8), unit(9)]
    assert cq.read_units(10, 10) == []
    assert (cq.min_offset, cq.max_offset) == (0, 10)


def test_put_of_a_replayed_offset_is_ignored(cq: ConsumeQueue, root: Path) -> None:
    put_range(cq, range(6))
    before = file_units(root, 0), file_units(root, FILE_BYTES)

    assert cq.put(9999, 1, 1, 3) is False
    assert cq.put(9999, 1, 1, 5) is False

    assert (file_units(root, 0), file_units(root, FILE_BYTES)) == before
    assert cq.get(3) == unit(3)
    assert cq.max_offset == 6
    assert cq.max_physical_offset == 600


def test_a_gap_is_filled_with_blank_units_that_readers_step_over(
    cq: ConsumeQueue, root: Path
) -> None:
    put_range(cq, [0, 1, 3, 9])

    assert file_units(root, 0) == [unit(0), unit(1), BLANK, unit(3)]
    assert file_units(root, FILE_BYTES) == [BLANK] * 4
    assert file_units(root, 2 * FILE_BYTES) == [BLANK, unit(9), (0, 0, 0), (0, 0, 0)]
    assert cq.max_offset == 10
    assert [cq.get(n) for n in range(10)] == [
        unit(0),
        unit(1),
        None,
        unit(3),
        *[None] * 5,
        unit(9),
    ]
    # The i-th unit returned is the one at offset + i: a reader counts its position
    # from what it got, so a read never runs across a blank.
    assert cq.read_units(0, 10) == [unit(0), unit(1)]
    assert cq.read_units(2, 10) == []
    assert cq.read_units(3, 10) == [unit(3)]
    assert cq.read_units(4, 10) == []
    assert cq.read_units(9, 10) == [unit(9)]


def test_first_unit_of_a_queue_may_start_past_zero(cq: ConsumeQueue, root: Path) -> None:
    # A queue rebuilt after its old records were deleted starts at a later offset.
    assert cq.put(*unit(6), 6)
    assert files(root) == [f"{FILE_BYTES:020d}"]
    assert file_units(root, FILE_BYTES) == [BLANK, BLANK, unit(6), (0, 0, 0)]
    assert (cq.min_offset, cq.max_offset) == (6, 7)
    assert cq.get(6) == unit(6)
    assert cq.get(5) is None


# -- loading ------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 3, PER_FILE, PER_FILE + 1, 3 * PER_FILE, 3 * PER_FILE - 1])
def test_load_finds_the_same_end_after_close(
    open_queue: Callable[[], ConsumeQueue], count: int
) -> None:
    first = open_queue()
    put_range(first, range(count))
    first.close()

    again = open_queue()
    again.load()

    assert (again.min_offset, again.max_offset) == (0, count)
    assert again.max_physical_offset == 100 * count
    assert [again.get(n) for n in range(count)] == [unit(n) for n in range(count)]
    # It appends where it left off, without a gap or an overwrite.
    assert again.put(*unit(count), count)
    assert again.put(*unit(count - 1), count - 1) is False
    assert again.max_offset == count + 1
    assert again.get(count) == unit(count)


def test_load_counts_blank_units_as_written(open_queue: Callable[[], ConsumeQueue]) -> None:
    first = open_queue()
    put_range(first, [0, 6])
    first.close()

    again = open_queue()
    again.load()
    assert again.max_offset == 7
    assert again.get(6) == unit(6)
    assert again.max_physical_offset == 700


def test_load_of_an_empty_directory(open_queue: Callable[[], ConsumeQueue]) -> None:
    cq = open_queue()
    cq.load()
    assert (cq.min_offset, cq.max_offset, cq.max_physical_offset) == (0, 0, 0)
    assert cq.put(*unit(0), 0)


# -- truncation ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("physical_end", "kept"),
    [
        (1050, 10),  # unit 10 spans 1000..1100: it ends beyond 1050
        (1000, 10),  # unit 9 ends exactly at 1000 and stays
        (800, 8),  # the cut falls on a file boundary
        (999, 9),
        (100, 1),
        (99, 0),
        (0, 0),
        (1400, 14),
        (10**9, 14),
    ],
)
def test_truncate_dirty_removes_exactly_the_units_ending_beyond(
    open_queue: Callable[[], ConsumeQueue], root: Path, physical_end: int, kept: int
) -> None:
    cq = open_queue()
    put_range(cq, range(14))

    cq.truncate_dirty(physical_end)

    assert cq.max_offset == kept
    assert cq.max_physical_offset == 100 * kept
    assert [cq.get(n) for n in range(14)] == [unit(n) for n in range(kept)] + [None] * (14 - kept)
    # On disk: whole files past the cut are gone, the cut file is zeroed after it.
    last_file = kept // PER_FILE
    assert files(root) == [f"{i * FILE_BYTES:020d}" for i in range(last_file + 1)]
    tail = file_units(root, last_file * FILE_BYTES)
    in_file = kept - last_file * PER_FILE
    assert tail[in_file:] == [(0, 0, 0)] * (PER_FILE - in_file)

    # Re-dispatching the cut records writes them back at the same offsets.
    put_range(cq, range(kept, 14))
    cq.close()
    again = open_queue()
    again.load()
    assert [again.get(n) for n in range(14)] == [unit(n) for n in range(14)]


@pytest.mark.parametrize(
    ("physical_end", "kept"),
    [(150, 1), (200, 6), (100, 1), (99, 0), (300, 7)],
)
def test_truncate_dirty_judges_blank_units_by_the_unit_before_them(
    cq: ConsumeQueue, physical_end: int, kept: int
) -> None:
    cq.put(0, 100, 0, 0)
    cq.put(100, 100, 0, 1)
    cq.put(200, 100, 0, 6)  # blanks at 2..5

    cq.truncate_dirty(physical_end)

    assert cq.max_offset == kept
    assert [cq.get(n) for n in range(kept)] == [
        (0, 100, 0),
        (100, 100, 0),
        None,
        None,
        None,
        None,
        (200, 100, 0),
    ][:kept]


# -- time ----------------------------------------------------------------------


@pytest.mark.parametrize("gap", [0, 7], ids=["contiguous", "blank-units-after-group-0"])
def test_offset_by_time_finds_the_first_message_stored_at_or_after(
    store_config: Callable[..., StoreConfig], cq: ConsumeQueue, gap: int
) -> None:
    log = CommitLog(store_config(), allocator=None, pool=None)
    try:
        stamps: list[int] = []
        first_offsets: list[int] = []
        offset = 0
        for group in range(5):
            if group == 1:
                offset += gap
            # Each group is one append, so all its records share one store timestamp.
            # Two clear milliseconds between groups, so stamp - 1 and stamp + 1 fall
            # strictly between neighbouring groups.
            while stamps and int(time.time() * 1000) <= stamps[-1] + 1:
                time.sleep(0.002)
            result = log.append([Message("TopicA", f"{group}-{i}".encode(), 2) for i in range(3)])
            stamps.append(result.store_timestamp)
            first_offsets.append(offset)
            for at, size in zip(result.physical_offsets, result.sizes, strict=True):
                assert log.store_timestamp_at(at) == result.store_timestamp
                cq.put(at, size, 0, offset)
                offset += 1
        assert stamps == sorted(set(stamps))

        def by_time(timestamp_ms: int) -> int:
            return cq.offset_by_time(timestamp_ms, log.store_timestamp_at)

        for group, stamp in enumerate(stamps):
            assert by_time(stamp) == first_offsets[group]
            assert by_time(stamp - 1) == first_offsets[group]
            # A millisecond later: past this group (and any blanks), at the next one.
            after = first_offsets[group + 1] if group + 1 < len(stamps) else cq.max_offset
            assert by_time(stamp + 1) == after
        assert by_time(0) == 0
        assert by_time(stamps[-1] + 1) == cq.max_offset == 15 + gap
    finally:
        log.close()


# -- retention -----------------------------------------------------------------


def test_delete_expired_removes_files_wholly_below_and_moves_min_offset(
    cq: ConsumeQueue, root: Path
) -> None:
    put_range(cq, range(12))  # three files: units 0-3, 4-7, 8-11

    # The commit log now starts at 300: records 0-2 are gone, record 3 is not.
    assert cq.delete_expired(300) == 0
    assert cq.min_offset == 3
    assert cq.get(2) is None
    assert cq.get(3) == unit(3)

    assert cq.delete_expired(400) == 1
    assert files(root) == [f"{FILE_BYTES:020d}", f"{2 * FILE_BYTES:020d}"]
    assert cq.min_offset == 4
    assert cq.get(3) is None
    assert cq.read_units(0, 10) == []
    assert cq.get(4) == unit(4)

    # Units 4 and 5 start below 600, so their records are gone; the file stays.
    assert cq.delete_expired(600) == 0
    assert cq.min_offset == 6

    # Everything is gone from the commit log, but the newest file always stays.
    assert cq.delete_expired(10**9) == 1
    assert files(root) == [f"{2 * FILE_BYTES:020d}"]
    assert (cq.min_offset, cq.max_offset) == (12, 12)
    assert cq.put(*unit(12), 12)
    assert (cq.min_offset, cq.max_offset) == (12, 13)


def test_delete_expired_keeps_a_file_that_ends_in_blank_units(cq: ConsumeQueue, root: Path) -> None:
    # Commit-log offsets past 2 GiB: a blank unit's size (2**31 - 1) must not read
    # as a record that ended long ago.
    base = 3 * 2**31
    cq.put(base, 100, 0, 0)
    cq.put(base + 100, 100, 0, 1)
    cq.put(base + 200, 100, 0, 6)  # units 2..5 blank: file 0 ends in blanks
    assert file_units(root, 0)[2:] == [BLANK, BLANK]

    assert cq.delete_expired(base + 100) == 0
    assert cq.min_offset == 1
    assert cq.get(1) == (base + 100, 100, 0)

    assert cq.delete_expired(base + 200) == 1
    assert cq.min_offset == 6


# -- the table of queues -------------------------------------------------------------


def test_table_reloads_every_queue_and_its_next_offset(tmp_path: Path) -> None:
    root = str(tmp_path / "consumequeue")
    table = ConsumeQueueTable(root, PER_FILE)
    table.load()
    for (topic, queue_id), count in {("A", 0): 3, ("A", 1): 6, ("B", 0): 1}.items():
        cq = table.find_or_create(topic, queue_id)
        assert table.find_or_create(topic, queue_id) is cq
        put_range(cq, range(count))
    table.close()
    os.makedirs(os.path.join(root, "A", "not-a-queue"))

    again = ConsumeQueueTable(root, PER_FILE)
    again.load()
    try:
        assert again.next_offsets() == {("A", 0): 3, ("A", 1): 6, ("B", 0): 1}
        assert sorted(cq.queue_id for cq in again.queues_of("A")) == [0, 1]
        assert again.get("A", 1).get(5) == unit(5)
        assert again.get("C", 0) is None
        again.delete_topic("A")
        assert again.next_offsets() == {("B", 0): 1}
        assert sorted(os.listdir(root)) == ["B"]
    finally:
        again.close()


# -- get_messages through the store ------------------------------------------------


@pytest.fixture
def store(store_config: Callable[..., StoreConfig]) -> Iterator[MessageStore]:
    config = store_config(
        flush_type=FlushType.SYNC_FLUSH,  # a put returns flushed: retention may delete it
        consume_queue_units_per_file=10,
        clean_resource_interval=3600,  # retention runs only when the test calls it
    )
    with MessageStore(config) as s:
        yield s


def _put(store: MessageStore, messages: list[Message]) -> list[tuple[int, int]]:
    result = store.put_messages(messages)
    assert result.ok, result.reason
    assert result.append is not None
    return list(zip(result.append.physical_offsets, result.append.sizes, strict=True))


def test_get_messages_statuses(store: MessageStore) -> None:
    tags = ["TagA", "TagB", "TagC"]
    bodies = [f"message {i:04d} ".encode() * 60 for i in range(150)]  # ~1 KiB each
    placed: list[tuple[int, int]] = []
    for start in range(0, 150, 10):
        placed += _put(
            store,
            [
                Message("T", bodies[i], 0, properties={"TAGS": tags[i % 3]})
                for i in range(start, start + 10)
            ],
        )
    assert store.wait_dispatched()
    size = placed[0][1]

    assert store.get_messages("Unknown", 0, 0, 10).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.get_messages("T", 1, 0, 10).status is GetStatus.NO_MATCHED_LOGIC_QUEUE

    got = store.get_messages("T", 0, 0, 7)
    assert got.status is GetStatus.FOUND
    assert [m.body for m in got.messages] == bodies[:7]
    assert [m.queue_offset for m in got.messages] == list(range(7))
    assert (got.next_offset, got.min_offset, got.max_offset) == (7, 0, 150)

    got = store.get_messages("T", 0, 20, 100, max_bytes=3 * size)
    assert [m.body for m in got.messages] == bodies[20:23]
    assert got.next_offset == 23

    got = store.get_messages("T", 0, 0, 5, tag_codes={tag_hash("TagB")})
    assert got.status is GetStatus.FOUND
    assert [m.queue_offset for m in got.messages] == [1, 4, 7, 10, 13]
    assert {m.tags for m in got.messages} == {"TagB"}
    assert got.next_offset == 14

    got = store.get_messages("T", 0, 0, 5, tag_codes={tag_hash("TagZ")})
    assert (got.status, got.messages) == (GetStatus.NO_MATCHED_MESSAGE, [])

    got = store.get_messages("T", 0, 150, 10)
    assert (got.status, got.messages, got.next_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, [], 150)
    got = store.get_messages("T", 0, 151, 10)
    assert (got.status, got.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 150)
    got = store.get_messages("T", 0, 10**6, 10)
    assert (got.status, got.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 150)

    # Retention deletes every segment but the newest; the queue's minimum follows.
    segments = len(store.commit_log.queue.files)
    assert segments >= 3
    assert store.delete_expired(regardless_of_age=True) == segments - 1
    cl_min = store.commit_log.min_offset
    first_left = sum(1 for at, _ in placed if at < cl_min)
    assert 0 < first_left < 150
    assert store.min_offset("T", 0) == first_left

    got = store.get_messages("T", 0, 0, 10)
    assert (got.status, got.messages, got.next_offset) == (
        GetStatus.OFFSET_TOO_SMALL,
        [],
        first_left,
    )
    got = store.get_messages("T", 0, first_left, 2)
    assert got.status is GetStatus.FOUND
    assert [m.body for m in got.messages] == bodies[first_left : first_left + 2]
    assert got.messages[0].physical_offset >= cl_min


def test_get_messages_over_a_gap_returns_each_message_once(store: MessageStore) -> None:
    _put(store, [Message("T", b"m0", 0), Message("T", b"m1", 0)])
    assert store.wait_dispatched()
    # The queue-offset table jumps ahead (as after a lost consume-queue tail):
    # the dispatcher fills offsets 2..4 with blank units. Records of another topic
    # stand where the missing ones would be (a queue offset cannot outrun the log).
    store.commit_log.queue_offsets[("T", 0)] = 5
    _put(store, [Message("U", b"x" * 100, 0) for _ in range(3)])
    _put(store, [Message("T", b"m5", 0), Message("T", b"m6", 0)])
    assert store.wait_dispatched()

    got = store.get_messages("T", 0, 0, 32)
    assert [(m.queue_offset, m.body) for m in got.messages] == [
        (0, b"m0"),
        (1, b"m1"),
        (5, b"m5"),
        (6, b"m6"),
    ]
    assert got.next_offset == 7
    assert store.get_messages("T", 0, 7, 32).status is GetStatus.OFFSET_OVERFLOW_ONE
    got = store.get_messages("T", 0, 2, 32)
    assert [m.queue_offset for m in got.messages] == [5, 6]
    assert got.next_offset == 7


def test_a_filter_that_matches_nothing_scans_a_bounded_stretch(store_config):
    from skiff_broker.store.hashing import tag_hash
    from skiff_broker.store.message import Message
    from skiff_broker.store.message_store import MessageStore
    from skiff_broker.store.results import GetStatus

    config = store_config(max_filter_message_count=50)
    with MessageStore(config) as store:
        store.put_messages([Message("t", b"x", properties={"TAGS": "a"}) for _ in range(120)])
        assert store.wait_dispatched()
        store.put_messages([Message("t", b"wanted", properties={"TAGS": "b"})])
        assert store.wait_dispatched()
        wanted = {tag_hash("b")}
        first = store.get_messages("t", 0, 0, 10, tag_codes=wanted)
        assert first.status is GetStatus.NO_MATCHED_MESSAGE
        assert first.next_offset == 50
        second = store.get_messages("t", 0, first.next_offset, 10, tag_codes=wanted)
        assert second.next_offset == 100 and not second.messages
        third = store.get_messages("t", 0, second.next_offset, 10, tag_codes=wanted)
        assert [m.body for m in third.messages] == [b"wanted"]
        assert third.next_offset == 121


@settings(max_examples=40, deadline=None)
@given(
    first=st.integers(min_value=0, max_value=9),
    runs=st.lists(st.integers(min_value=1, max_value=11), min_size=1, max_size=5),
)
def test_a_run_written_at_once_leaves_the_files_of_one_unit_at_a_time(
    tmp_path_factory: pytest.TempPathFactory, first: int, runs: list[int]
) -> None:
    # Four units a file, so runs cross file boundaries; the queue may start past zero.
    roots = [tmp_path_factory.mktemp(name) for name in ("one", "together")]
    one, together = (ConsumeQueue("TopicA", 2, str(r), PER_FILE) for r in roots)
    try:
        assert one.put(*unit(first), first) and together.put(*unit(first), first)
        offset = first + 1
        for length in runs:
            offsets = range(offset, offset + length)
            put_range(one, offsets)
            physical, sizes, codes = (list(c) for c in zip(*map(unit, offsets), strict=True))
            together.put_run(offset, physical, sizes, codes)
            offset += length
            assert together.max_offset == one.max_offset == offset
            assert together.max_physical_offset == one.max_physical_offset
            assert together.read_units(first, 100) == one.read_units(first, 100)
        with pytest.raises(ValueError, match="does not follow"):
            together.put_run(offset + 1, *([value] for value in unit(offset + 1)))
    finally:
        one.close()
        together.close()
    assert files(roots[1]) == files(roots[0])
    for name in files(roots[0]):
        assert (queue_dir(roots[1]) / name).read_bytes() == (
            queue_dir(roots[0]) / name
        ).read_bytes()
