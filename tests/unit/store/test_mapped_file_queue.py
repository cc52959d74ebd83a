"""MappedFileQueue: loading, lookup, rolling, flush/commit across segments, truncation, deletion."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skiff_broker.store.errors import StoreCorruptError
from skiff_broker.store.mapped_file import PAGE_SIZE, MappedFile, segment_name
from skiff_broker.store.mapped_file_queue import MappedFileQueue
from skiff_broker.store.segment_allocator import SegmentAllocator
from skiff_broker.store.transient_store_pool import TransientStorePool

SIZE = 4 * PAGE_SIZE  # small segments: rolls happen after a few appends


def on_disk(path: str | Path, start: int = 0, size: int = -1) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(size)


def pattern(tag: int, size: int) -> bytes:
    return bytes((tag + i) % 251 + 1 for i in range(size))


def make_segments(directory: Path, offsets: list[int], size: int = SIZE) -> None:
    """Real segment files, each filled with a pattern naming its offset."""
    directory.mkdir(parents=True, exist_ok=True)
    for offset in offsets:
        mf = MappedFile.create(str(directory / segment_name(offset)), size)
        mf.append(pattern(offset // size, size))
        mf.close()


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def positions(mf: MappedFile) -> tuple[int, int, int]:
    return mf.wrote_position, mf.committed_position, mf.flushed_position


@pytest.fixture
def make_queue(tmp_path: Path) -> Iterator[Callable[..., MappedFileQueue]]:
    queues: list[MappedFileQueue] = []

    def make(**kwargs: Any) -> MappedFileQueue:
        q = MappedFileQueue(str(tmp_path / "log"), SIZE, **kwargs)
        queues.append(q)
        return q

    yield make
    for q in queues:
        q.close()


def fill(q: MappedFileQueue, total: int, tag: int = 0) -> bytes:
    """Append ``total`` bytes, rolling segments as they fill; returns what was written."""
    written = b""
    while len(written) < total:
        mf = q.last_file_for_append()
        chunk = pattern(tag + len(written), min(total - len(written), mf.remaining))
        mf.append(chunk)
        written += chunk
    return written


# -- loading -------------------------------------------------------------------


def test_load_opens_segments_in_order_and_removes_tmp_leftovers(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    directory = tmp_path / "log"
    make_segments(directory, [2 * SIZE, 0, SIZE])
    (directory / (segment_name(3 * SIZE) + ".tmp")).write_bytes(b"half allocated")
    (directory / "notes.txt").write_bytes(b"not a segment")
    q = make_queue()
    q.load()
    assert [mf.file_from_offset for mf in q.files] == [0, SIZE, 2 * SIZE]
    assert not (directory / (segment_name(3 * SIZE) + ".tmp")).exists()
    assert (directory / "notes.txt").read_bytes() == b"not a segment"
    # Until recovery says otherwise every loaded segment counts as full.
    assert all(positions(mf) == (SIZE, SIZE, SIZE) for mf in q.files)
    assert (q.min_offset, q.max_offset) == (0, 3 * SIZE)
    for mf in q.files:
        assert mf.read(0, SIZE) == pattern(mf.file_from_offset // SIZE, SIZE)


def test_load_of_an_empty_or_missing_directory(make_queue: Callable[..., MappedFileQueue]) -> None:
    q = make_queue()
    q.load()
    assert q.files == ()
    assert (q.min_offset, q.max_offset, q.max_wrote_offset) == (0, 0, 0)
    assert q.find(0) is None
    assert q.flush(0) is False
    assert q.commit(0) is False


def test_load_refuses_a_segment_of_the_wrong_size(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    directory = tmp_path / "log"
    make_segments(directory, [0])
    make_segments(directory, [SIZE], size=2 * SIZE)
    q = make_queue()
    with pytest.raises(StoreCorruptError, match=segment_name(SIZE)):
        q.load()


# -- finding and rolling -----------------------------------------------------------


def test_find_maps_offsets_to_segments(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    make_segments(tmp_path / "log", [0, SIZE, 2 * SIZE])
    q = make_queue()
    q.load()
    expected = {0: 0, SIZE - 1: 0, SIZE: SIZE, 2 * SIZE + 5: 2 * SIZE, 3 * SIZE - 1: 2 * SIZE}
    for offset, start in expected.items():
        mf = q.find(offset)
        assert mf is not None
        assert mf.file_from_offset == start
    assert q.find(3 * SIZE) is None
    assert q.find(-1) is None


def test_find_across_a_gap_and_after_old_segments_are_gone(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    make_segments(tmp_path / "log", [2 * SIZE, 3 * SIZE, 5 * SIZE])
    q = make_queue()
    q.load()
    assert q.min_offset == 2 * SIZE
    assert q.find(0) is None
    found = [q.find(o) for o in (2 * SIZE, 3 * SIZE + 1, 5 * SIZE + 7)]
    assert [mf.file_from_offset if mf else None for mf in found] == [2 * SIZE, 3 * SIZE, 5 * SIZE]
    assert q.find(4 * SIZE + 1) is None  # in the gap


def test_last_file_for_append_rolls_to_the_next_20_digit_name(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    q = make_queue()
    data = fill(q, 2 * SIZE + 100)
    assert names(tmp_path / "log") == [segment_name(0), segment_name(SIZE), segment_name(2 * SIZE)]
    assert [mf.file_from_offset for mf in q.files] == [0, SIZE, 2 * SIZE]
    assert q.max_offset == q.max_wrote_offset == 2 * SIZE + 100
    # The last segment is not full: it is still the one to append to.
    assert q.last_file_for_append() is q.files[-1]
    for mf in q.files:
        start = mf.file_from_offset
        assert on_disk(mf.path, 0, mf.wrote_position) == data[start : start + mf.wrote_position]


def test_first_segment_starts_at_the_segment_holding_start_offset(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    q = make_queue()
    mf = q.last_file_for_append(start_offset=2 * SIZE + 40)
    assert mf.file_from_offset == 2 * SIZE
    assert names(tmp_path / "log") == [segment_name(2 * SIZE)]


def test_rolling_with_an_allocator_prepares_the_following_segment(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    allocator = SegmentAllocator(warm=False)
    allocator.start()
    try:
        q = make_queue(allocator=allocator)
        fill(q, SIZE + 1)
        deadline = time.monotonic() + 10
        while segment_name(2 * SIZE) not in names(tmp_path / "log") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert names(tmp_path / "log") == [segment_name(n * SIZE) for n in range(3)]
        assert [mf.file_from_offset for mf in q.files] == [0, SIZE]
    finally:
        allocator.stop()


# -- flush and commit ----------------------------------------------------------------


def test_flush_crosses_a_segment_boundary_without_skipping_bytes(
    make_queue: Callable[..., MappedFileQueue],
) -> None:
    q = make_queue()
    fill(q, 1000)
    assert q.flush(0) is True
    assert q.flushed_where == 1000
    fill(q, SIZE - 1000 + 100, tag=7)  # fills segment 0, 100 bytes into segment 1
    first, second = q.files
    # The full segment is flushed whole before the next one is touched.
    assert q.flush(0) is True
    assert q.flushed_where == SIZE
    assert positions(first) == (SIZE, SIZE, SIZE)
    assert second.flushed_position == 0
    assert q.flush(0) is True
    assert q.flushed_where == SIZE + 100
    assert q.flush(0) is False
    assert q.flush_count == 3


def test_a_full_segment_is_flushed_whatever_least_pages_says(
    make_queue: Callable[..., MappedFileQueue],
) -> None:
    q = make_queue()
    fill(q, SIZE - 10)
    assert q.flush(0)
    fill(q, 10 + 5)
    assert q.flush(50) is True  # only 10 bytes dirty, but the segment is full
    assert q.flushed_where == SIZE
    assert q.flush(50) is False  # 5 bytes in the next segment: not enough pages
    assert q.flush_all() == SIZE + 5


def test_flush_and_commit_stop_at_the_end_and_never_go_back(
    make_queue: Callable[..., MappedFileQueue],
) -> None:
    """Two full segments and no third: the end of data is a segment boundary.

    A ``while flush(...)`` loop (the flush services and consume queues use one)
    must end there rather than bounce between the last segment and the first.
    """
    q = make_queue()
    fill(q, 2 * SIZE)
    for advance, where in ((q.flush, "flushed_where"), (q.commit, "committed_where")):
        seen = []
        for _ in range(10):
            if not advance(0):
                break
            seen.append(getattr(q, where))
        else:
            pytest.fail(f"{advance.__name__} kept reporting progress: {seen}")
        assert seen == sorted(seen)
        assert getattr(q, where) == 2 * SIZE
    assert q.flush_count == 2


def test_commit_moves_buffered_data_across_a_segment_boundary(
    make_queue: Callable[..., MappedFileQueue],
) -> None:
    pool = TransientStorePool(2, SIZE)
    q = make_queue(pool=pool)
    data = fill(q, SIZE + 100)
    first, second = q.files
    # Rolled before the first segment's tail was committed: nothing is readable yet.
    assert q.max_wrote_offset == SIZE + 100
    assert q.max_offset == 0
    assert first.read(0, SIZE) == b""
    assert on_disk(first.path) == bytes(SIZE)
    assert q.commit(0) is True
    assert q.committed_where == SIZE
    assert q.max_offset == SIZE
    assert on_disk(first.path) == data[:SIZE]
    assert pool.available == 1  # the full segment's buffer is free again
    assert second.read(0, 100) == b""
    assert q.commit(0) is True
    assert q.committed_where == SIZE + 100
    assert q.max_offset == SIZE + 100
    assert second.read(0, 100) == data[SIZE:]
    assert q.commit(0) is False
    # Flushing follows the committed data, never ahead of it.
    assert q.flush_all() == SIZE + 100
    for mf in q.files:
        assert mf.flushed_position <= mf.committed_position <= mf.wrote_position


def test_max_offset_trails_every_uncommitted_segment(
    make_queue: Callable[..., MappedFileQueue],
) -> None:
    pool = TransientStorePool(3, SIZE)
    q = make_queue(pool=pool)
    fill(q, 2 * SIZE + 10)
    assert len(q.files) == 3
    assert q.max_offset == 0
    q.commit(0)
    assert q.max_offset == SIZE
    q.commit(0)
    assert q.max_offset == 2 * SIZE
    q.commit(0)
    assert q.max_offset == 2 * SIZE + 10


def test_max_offset_waits_for_a_buffered_segment_before_direct_writes(
    make_queue: Callable[..., MappedFileQueue],
) -> None:
    """With the pool dry, a segment is written directly and is readable at once, but
    the log is readable only up to the first byte that has not reached a file."""
    pool = TransientStorePool(1, SIZE)
    q = make_queue(pool=pool)
    data = fill(q, SIZE + 100)
    first, second = q.files
    assert pool.available == 0
    assert second.read(0, 100) == data[SIZE:]  # written straight into its file
    assert q.max_offset == 0  # but segment 0 is still only in its buffer
    assert q.commit(0)
    assert q.max_offset == SIZE + 100
    assert first.read(0, SIZE) == data[:SIZE]
    assert pool.available == 1


# -- truncation ----------------------------------------------------------------------


def test_truncate_in_the_middle_of_a_segment(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    q = make_queue()
    data = fill(q, 3 * SIZE - 50)
    q.commit_all()
    q.flush_all()
    cut = SIZE + 300
    q.truncate(cut, quiet_bytes=SIZE)
    assert names(tmp_path / "log") == [segment_name(0), segment_name(SIZE)]
    first, second = q.files
    assert positions(first) == (SIZE, SIZE, SIZE)
    assert positions(second) == (300, 300, 300)
    assert (q.flushed_where, q.committed_where, q.max_offset) == (cut, cut, cut)
    # Bytes before the cut are kept; stale bytes after it are gone from the file.
    assert on_disk(first.path) == data[:SIZE]
    assert on_disk(second.path) == data[SIZE:cut] + bytes(SIZE - 300)
    assert second.read(0, SIZE) == data[SIZE:cut]
    # Appending resumes exactly at the cut.
    mf = q.last_file_for_append()
    assert mf is second
    assert mf.append(b"new") == 300
    assert on_disk(second.path, 300, 3) == b"new"


def test_truncate_at_a_segment_boundary_keeps_an_empty_segment(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    q = make_queue()
    data = fill(q, 2 * SIZE + 10)
    q.truncate(SIZE, quiet_bytes=SIZE)
    # Segment 0 is untouched (its data was never flushed, and truncation does not
    # pretend otherwise); segment 1 is emptied.
    assert [positions(mf) for mf in q.files] == [(SIZE, SIZE, 0), (0, 0, 0)]
    assert names(tmp_path / "log") == [segment_name(0), segment_name(SIZE)]
    assert on_disk(q.files[0].path) == data[:SIZE]
    assert on_disk(q.files[1].path) == bytes(SIZE)
    assert q.max_offset == SIZE


def test_drop_trailing_empty_forgets_a_prepared_segment(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    make_segments(tmp_path / "log", [0])
    # Prepared ahead of need by the allocator, never written.
    MappedFile.create(str(tmp_path / "log" / segment_name(SIZE)), SIZE).close()
    q = make_queue()
    q.load()
    q.truncate(SIZE, quiet_bytes=SIZE)  # recovery found the end at the boundary
    assert len(q.files) == 2
    q.drop_trailing_empty()
    assert names(tmp_path / "log") == [segment_name(0)]
    assert q.max_offset == SIZE
    assert on_disk(q.files[0].path) == pattern(0, SIZE)


# -- deletion ------------------------------------------------------------------------


def age(q: MappedFileQueue, index: int, seconds: float) -> None:
    path = q.files[index].path
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_delete_expired_by_time_deletes_old_files_but_never_the_newest(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    make_segments(tmp_path / "log", [0, SIZE, 2 * SIZE, 3 * SIZE])
    q = make_queue()
    q.load()
    for i in range(4):
        age(q, i, 7200)
    deleted = q.delete_expired_by_time(
        3600, interval=0, clean_immediately=False, batch_max=10, deletable_below=10 * SIZE
    )
    assert deleted == 3
    assert names(tmp_path / "log") == [segment_name(3 * SIZE)]
    assert q.min_offset == 3 * SIZE
    assert q.find(0) is None
    assert q.files[0].read(0, SIZE) == pattern(3, SIZE)


def test_delete_expired_by_time_keeps_young_files_and_what_follows_them(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    make_segments(tmp_path / "log", [0, SIZE, 2 * SIZE, 3 * SIZE])
    q = make_queue()
    q.load()
    age(q, 0, 7200)
    age(q, 2, 7200)  # old, but after a young one: the log is deleted from its start only
    deleted = q.delete_expired_by_time(
        3600, interval=0, clean_immediately=False, batch_max=10, deletable_below=10 * SIZE
    )
    assert deleted == 1
    assert names(tmp_path / "log") == [segment_name(n * SIZE) for n in (1, 2, 3)]
    # Nothing is old enough: nothing goes.
    assert (
        q.delete_expired_by_time(
            3600, interval=0, clean_immediately=False, batch_max=10, deletable_below=10 * SIZE
        )
        == 0
    )
    assert len(names(tmp_path / "log")) == 3


def test_delete_expired_by_time_respects_batch_max_and_deletable_below(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    make_segments(tmp_path / "log", [0, SIZE, 2 * SIZE, 3 * SIZE])
    q = make_queue()
    q.load()
    for i in range(4):
        age(q, i, 7200)
    kwargs = {"interval": 0, "clean_immediately": False}
    assert q.delete_expired_by_time(3600, batch_max=1, deletable_below=10 * SIZE, **kwargs) == 1
    assert names(tmp_path / "log")[0] == segment_name(SIZE)
    # Segment 1 ends at 2*SIZE: anything not wholly below 2*SIZE - 1 (not yet flushed
    # or dispatched) must stay.
    assert q.delete_expired_by_time(3600, batch_max=10, deletable_below=2 * SIZE - 1, **kwargs) == 0
    assert q.delete_expired_by_time(3600, batch_max=10, deletable_below=2 * SIZE, **kwargs) == 1
    assert names(tmp_path / "log") == [segment_name(2 * SIZE), segment_name(3 * SIZE)]


def test_clean_immediately_ignores_age(
    tmp_path: Path, make_queue: Callable[..., MappedFileQueue]
) -> None:
    make_segments(tmp_path / "log", [0, SIZE, 2 * SIZE])
    q = make_queue()
    q.load()  # every file was just written: none is old
    kwargs = {"interval": 0, "batch_max": 10, "deletable_below": 10 * SIZE}
    assert q.delete_expired_by_time(3600, clean_immediately=False, **kwargs) == 0
    assert q.delete_expired_by_time(3600, clean_immediately=True, **kwargs) == 2
    assert names(tmp_path / "log") == [segment_name(2 * SIZE)]
    # The newest survives even a forced clean.
    assert q.delete_expired_by_time(0, clean_immediately=True, **kwargs) == 0
    assert names(tmp_path / "log") == [segment_name(2 * SIZE)]
