"""MappedFile and SegmentAllocator on real files, real mappings and a real small tmpfs."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.waiting import wait_for

from skiff_broker.store.errors import DiskFullError, SegmentWriteError, StoreCorruptError
from skiff_broker.store.mapped_file import PAGE_SIZE, MappedFile, segment_name
from skiff_broker.store.segment_allocator import SegmentAllocator
from skiff_broker.store.transient_store_pool import TransientStorePool

MiB = 1024 * 1024


def on_disk(path: str | Path, start: int = 0, size: int | None = None) -> bytes:
    """Bytes of the file read through a separate descriptor, not the store's mapping."""
    with open(path, "rb") as f:
        f.seek(start)
        return f.read() if size is None else f.read(size)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def check_positions(mf: MappedFile) -> None:
    assert 0 <= mf.flushed_position <= mf.committed_position <= mf.wrote_position <= mf.file_size


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: allocating past it fails with a real ENOSPC."""
    if os.geteuid() != 0:
        pytest.skip("a real ENOSPC needs a small tmpfs, and mounting one needs root")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        unmounted = subprocess.run(["umount", str(mount_point)], capture_output=True, text=True)
        if unmounted.returncode != 0:
            # Something still holds a file open; detach so the machine is left clean.
            subprocess.run(["umount", "-l", str(mount_point)], check=False)
            pytest.fail(f"tmpfs still busy at teardown: {unmounted.stderr.strip()}")


# -- creating and opening ------------------------------------------------------


def test_create_allocates_every_block_and_leaves_no_tmp(tmp_path: Path) -> None:
    size = 256 * 1024
    path = tmp_path / segment_name(0)
    mf = MappedFile.create(str(path), size)
    try:
        st_ = os.stat(path)
        assert st_.st_size == size
        # Not sparse: a write through the mapping can never hit ENOSPC (SIGBUS).
        assert st_.st_blocks * 512 >= size
        assert sorted(os.listdir(tmp_path)) == [segment_name(0)]
        assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (0, 0, 0)
        assert on_disk(path) == bytes(size)
    finally:
        mf.close()


def test_warm_segment_is_zero_and_allocated(tmp_path: Path) -> None:
    size = 3 * MiB + 4096  # not a multiple of the warming chunk
    path = tmp_path / segment_name(0)
    mf = MappedFile.create(str(path), size, warm=True)
    try:
        st_ = os.stat(path)
        assert st_.st_size == size
        assert st_.st_blocks * 512 >= size
        assert on_disk(path) == bytes(size)
        assert not (tmp_path / (segment_name(0) + ".tmp")).exists()
    finally:
        mf.close()


def test_name_is_the_20_digit_start_offset(tmp_path: Path) -> None:
    offset = 3 * 64 * 1024
    assert segment_name(offset) == "00000000000000196608"
    assert len(segment_name(2**63 - 1)) == 20
    mf = MappedFile.create(str(tmp_path / segment_name(offset)), 64 * 1024)
    try:
        assert mf.file_from_offset == offset
    finally:
        mf.close()
    reopened = MappedFile(str(tmp_path / "00000000000000196608"), 64 * 1024)
    try:
        assert reopened.file_from_offset == offset
    finally:
        reopened.close()


def test_wrong_size_segment_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0)
    path.write_bytes(b"\x01" * 1000)
    before = open_fds()
    with pytest.raises(StoreCorruptError) as info:
        MappedFile(str(path), 64 * 1024)
    assert str(path) in str(info.value)
    assert "1000" in str(info.value)
    assert open_fds() == before  # the descriptor is not leaked
    assert path.read_bytes() == b"\x01" * 1000  # and the file is left alone


def test_create_on_a_full_disk_raises_disk_full_and_leaves_nothing(small_tmpfs: Path) -> None:
    path = small_tmpfs / segment_name(0)
    with pytest.raises(DiskFullError) as info:
        MappedFile.create(str(path), 1024 * 1024)
    message = str(info.value)
    assert "no space" in message
    assert str(small_tmpfs) in message
    assert os.listdir(small_tmpfs) == []


# -- appending and reading -----------------------------------------------------


def test_append_returns_positions_and_read_returns_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0)
    mf = MappedFile.create(str(path), 64 * 1024)
    try:
        assert mf.append(b"hello") == 0
        assert mf.append(b" world") == 5
        assert mf.wrote_position == 11
        assert mf.remaining == 64 * 1024 - 11
        assert mf.read(0, 11) == b"hello world"
        assert mf.read(6, 5) == b"world"
        # Written through the shared mapping: the file has the bytes too.
        assert on_disk(path, 0, 11) == b"hello world"
    finally:
        mf.close()


# Record layouts (start of each record, and the batch's length), small enough to be copied
# through the mapping and large enough to be written with pwrite.
LAYOUTS = {
    "one": ((0,), 100),
    "two": ((0, 40), 100),
    "four": ((0, 12, 40, 95), 100),
    "short-last": ((0, 96), 100),
    "one-large": ((0,), 40_000),
    "two-large": ((0, 16_000), 40_000),
    "four-large": ((0, 120, 16_000, 39_000), 40_000),
    "short-last-large": ((0, 39_996), 40_000),
    # Enough records for the heads to be zeroed as an array.
    "many-large": (tuple(range(0, 40_000, 1_000)), 40_000),
    "many-short-last-large": ((*range(0, 39_000, 1_000), 39_995), 40_000),
}


def records_of(length: int) -> bytes:
    """Bytes that are never zero, so that a byte not written yet shows."""
    return bytes(1 + i % 255 for i in range(length))


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_an_append_of_records_lands_byte_for_byte_whatever_its_pieces(
    tmp_path: Path, layout: tuple[tuple[int, ...], int]
) -> None:
    """Heads written after the rest, in any layout (a last piece shorter than a head too),
    still leave exactly the appended bytes."""
    heads, length = layout
    path = tmp_path / segment_name(0)
    mf = MappedFile.create(str(path), 64 * 1024)
    data = records_of(length)
    try:
        assert mf.append(b"x" * 7) == 0
        assert mf.append(data, heads=heads) == 7
        assert mf.read(0, 7 + length) == b"x" * 7 + data
        assert on_disk(path, 0, 7 + length) == b"x" * 7 + data
    finally:
        mf.close()


class ProcessDied(BaseException):
    """The broker process was killed at this point of a write."""


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_an_append_cut_short_anywhere_leaves_a_whole_prefix_of_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: tuple[tuple[int, ...], int]
) -> None:
    """A kill in the middle of an append leaves, of its records, a prefix whose heads are
    there and whose bytes are whole, and no later record with its whole head.

    A SIGKILL cannot be timed to land inside one write, so this stops the appender's
    writes after a given number of bytes, front to back as the kernel copies them: at
    every byte near a head and at a stride through the rest. Small batches are copied
    through the mapping in Python, where no write can be cut, so they are checked
    whole only (the test above).
    """
    heads, length = layout
    mf = MappedFile.create(str(tmp_path / segment_name(0)), 64 * 1024)
    data = records_of(length)
    ends = [*heads[1:], length]
    real_pwrite = os.pwrite
    calls: list[int] = []

    def counting(fd: int, chunk: bytes | memoryview, pos: int) -> int:
        calls.append(len(chunk))
        return real_pwrite(fd, chunk, pos)

    monkeypatch.setattr(os, "pwrite", counting)
    try:
        mf.append(data, heads=heads)
        written = sum(calls)
        if not calls:
            assert length < PAGE_SIZE, "a large append was not written with pwrite"
            return
        # Each head's place in the first pass (everything after the first head) and the second.
        passes = (h + d for h in heads for d in (-8, length - 8))
        near_heads = {at + d for at in passes for d in range(-1, 10)}
        cuts = sorted({c for c in (*range(0, written, 251), *near_heads) if 0 <= c < written})
        left = [0]

        def dying(fd: int, chunk: bytes | memoryview, pos: int) -> int:
            n = min(len(chunk), left[0])
            real_pwrite(fd, memoryview(chunk)[:n], pos)
            left[0] -= n
            if n < len(chunk):
                raise ProcessDied
            return n

        monkeypatch.setattr(os, "pwrite", dying)
        for cut in cuts:
            mf.wrote_position = 0
            real_pwrite(mf._fd, bytes(length), 0)
            left[0] = cut
            with pytest.raises(ProcessDied):
                mf.append(data, heads=heads)
            assert mf.wrote_position == 0
            landed = on_disk(mf.path, 0, length)
            # A reader finds a record by its whole head (size, then magic).
            there = [landed[h : h + 8] == data[h : h + 8] for h in heads]
            # A prefix of heads, each of a whole record.
            assert there == sorted(there, reverse=True), f"cut after {cut} bytes"
            for h, end, present in zip(heads, ends, there, strict=True):
                if present:
                    assert landed[h:end] == data[h:end], f"cut after {cut} bytes"
    finally:
        mf.close()


def test_a_write_the_disk_fails_raises_and_leaves_the_end_where_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mf = MappedFile.create(str(tmp_path / segment_name(0)), 64 * 1024)
    try:
        mf.append(b"x" * 7)

        def failing(fd: int, chunk: bytes | memoryview, pos: int) -> int:
            # A real EIO needs a failing disk; the write raises the error one would.
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        monkeypatch.setattr(os, "pwrite", failing)
        with pytest.raises(SegmentWriteError, match=f"{segment_name(0)}.*{os.strerror(errno.EIO)}"):
            mf.append(records_of(40_000), heads=(0, 16_000))
        assert mf.wrote_position == 7
        monkeypatch.undo()
        assert mf.append(b"y") == 7
    finally:
        mf.close()


def test_read_never_returns_bytes_past_the_written_end(tmp_path: Path) -> None:
    mf = MappedFile.create(str(tmp_path / segment_name(0)), 64 * 1024)
    try:
        mf.append(b"abc")
        # Stale bytes beyond the end (as left by a torn write) must stay invisible.
        mf.mapping[3:100] = b"\xff" * 97
        assert mf.read(0, 1000) == b"abc"
        assert mf.read(2, 50) == b"c"
        assert mf.read(3, 10) == b""
        assert mf.read(5000, 10) == b""
    finally:
        mf.close()


def test_append_that_does_not_fit_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    mf = MappedFile.create(str(tmp_path / segment_name(0)), 64 * 1024)
    try:
        mf.append(b"x" * (64 * 1024 - 10))
        with pytest.raises(ValueError, match="do not fit"):
            mf.append(b"y" * 11)
        assert mf.wrote_position == 64 * 1024 - 10
        assert mf.append(b"z" * 10) == 64 * 1024 - 10
        assert mf.is_full
        assert mf.remaining == 0
    finally:
        mf.close()


# -- flushing ------------------------------------------------------------------


def test_flush_waits_for_least_pages_unless_the_file_is_full(tmp_path: Path) -> None:
    size = 8 * PAGE_SIZE
    mf = MappedFile.create(str(tmp_path / segment_name(0)), size)
    try:
        mf.append(b"a" * (PAGE_SIZE + 10))  # crosses one page boundary
        assert mf.flush(2) == 0
        assert mf.flushed_position == 0
        assert mf.flush(1) == PAGE_SIZE + 10
        mf.append(b"b" * 100)
        assert mf.flush(1) == PAGE_SIZE + 10  # still in the same page: not enough
        assert mf.flush(0) == PAGE_SIZE + 110  # 0 means "whatever is dirty"
        assert mf.flush(0) == PAGE_SIZE + 110  # nothing new: nothing to do
        # Fill the file with less than least_pages of new data: full files always flush.
        mf.append(b"c" * mf.remaining)
        assert mf.flush(100) == size
        assert mf.flushed_position == mf.committed_position == mf.wrote_position == size
    finally:
        mf.close()


# -- write buffer (transient store pool) ---------------------------------------


def test_write_buffer_data_is_invisible_until_committed(tmp_path: Path) -> None:
    size = 4 * PAGE_SIZE
    path = tmp_path / segment_name(0)
    pool = TransientStorePool(1, size)
    mf = MappedFile.create(str(path), size)
    try:
        mf.attach_write_buffer(pool)
        assert pool.available == 0
        mf.append(b"m" * 100)
        assert mf.wrote_position == 100
        assert mf.committed_position == 0
        assert mf.read(0, 100) == b""
        assert on_disk(path, 0, 100) == bytes(100)
        # Nothing committed means nothing to flush.
        assert mf.flush(0) == 0
        # Fewer dirty pages than asked for: the commit waits.
        assert mf.commit(1) == 0
        assert mf.read(0, 100) == b""
        assert mf.commit(0) == 100
        assert mf.read(0, 100) == b"m" * 100
        assert on_disk(path, 0, 100) == b"m" * 100
        assert mf.flush(0) == 100
        check_positions(mf)
    finally:
        mf.close()
    assert pool.available == 1  # closing gives the buffer back


def test_write_buffer_goes_back_to_the_pool_once_full_and_committed(tmp_path: Path) -> None:
    size = 4 * PAGE_SIZE
    path = tmp_path / segment_name(0)
    pool = TransientStorePool(1, size)
    mf = MappedFile.create(str(path), size)
    try:
        mf.attach_write_buffer(pool)
        payload = bytes(range(256)) * (size // 256)
        mf.append(payload[: size - 1])
        mf.commit(0)
        assert pool.available == 0  # not full yet: the buffer is still in use
        mf.append(payload[size - 1 :])
        assert mf.is_full
        assert pool.available == 0  # full but not committed
        assert mf.commit(1000) == size  # a full file commits whatever least_pages says
        assert pool.available == 1
        assert mf.write_target is mf.mapping
        assert mf.read(0, size) == payload
        assert on_disk(path) == payload
        assert mf.flush(1000) == size
        check_positions(mf)
    finally:
        mf.close()
    assert pool.available == 1  # not given back twice


def test_without_a_free_buffer_appends_go_straight_to_the_file(tmp_path: Path) -> None:
    pool = TransientStorePool(0, 64 * 1024)
    mf = MappedFile.create(str(tmp_path / segment_name(0)), 64 * 1024)
    try:
        mf.attach_write_buffer(pool)
        mf.append(b"direct")
        assert mf.read(0, 6) == b"direct"
    finally:
        mf.close()


# -- zero_from -----------------------------------------------------------------


def test_zero_from_clears_stale_bytes_and_keeps_earlier_ones(tmp_path: Path) -> None:
    size = 3 * MiB
    path = tmp_path / segment_name(0)
    mf = MappedFile.create(str(path), size)
    try:
        good = b"G" * 5000
        mf.append(good)
        # A torn tail: stale bytes in the first, second and third chunk of the file.
        mf.mapping[5000:9000] = b"S" * 4000
        mf.mapping[MiB + 10 : MiB + 20] = b"S" * 10
        mf.mapping[size - 5 : size] = b"S" * 5
        mf.zero_from(5000, quiet_bytes=size)
        mf.set_positions(5000)
        data = on_disk(path)
        assert data[:5000] == good
        assert data[5000:] == bytes(size - 5000)
    finally:
        mf.close()


def test_zero_from_stops_after_a_quiet_run(tmp_path: Path) -> None:
    """Data is contiguous, so nothing written lies past a zero run longer than any record."""
    size = 4 * MiB
    path = tmp_path / segment_name(0)
    mf = MappedFile.create(str(path), size)
    try:
        mf.mapping[100:200] = b"S" * 100
        mf.mapping[3 * MiB : 3 * MiB + 10] = b"F" * 10  # beyond a 2 MiB run of zeros
        mf.zero_from(50, quiet_bytes=MiB)
        data = on_disk(path)
        assert data[: 3 * MiB] == bytes(3 * MiB)
        assert data[3 * MiB : 3 * MiB + 10] == b"F" * 10
    finally:
        mf.close()


def test_zero_from_with_a_write_buffer_cuts_the_segment(tmp_path: Path) -> None:
    size = 4 * PAGE_SIZE
    path = tmp_path / segment_name(0)
    pool = TransientStorePool(1, size)
    mf = MappedFile.create(str(path), size)
    try:
        mf.attach_write_buffer(pool)
        mf.append(b"A" * 1000)
        mf.commit(0)
        mf.zero_from(10, quiet_bytes=size)
        mf.set_positions(10)
        mf.append(b"B" * 5)
        assert mf.read(0, 1000) == b"A" * 10  # the new bytes wait for their commit
        mf.commit(0)
        assert on_disk(path, 0, 1000) == b"A" * 10 + b"B" * 5 + bytes(985)
        assert mf.read(0, 1000) == b"A" * 10 + b"B" * 5
    finally:
        mf.close()


def test_destroy_removes_the_file(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0)
    mf = MappedFile.create(str(path), 64 * 1024)
    mf.destroy()
    assert not path.exists()
    mf.destroy()  # twice is harmless


# -- property: positions never cross -------------------------------------------

SEGMENT = 4 * PAGE_SIZE

op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 2 * PAGE_SIZE)),
    st.tuples(st.just("fill"), st.just(0)),
    st.tuples(st.just("commit"), st.integers(-1, 3)),
    st.tuples(st.just("flush"), st.integers(-1, 3)),
)


def enough_pages(start: int, end: int, least_pages: int, full: bool) -> bool:
    """The documented rule: something is dirty, and the file is full, least_pages <= 0,
    or at least least_pages page boundaries lie between the two positions."""
    if end <= start:
        return False
    return full or least_pages <= 0 or end // PAGE_SIZE - start // PAGE_SIZE >= least_pages


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=st.lists(op, max_size=25), buffered=st.booleans())
def test_positions_keep_their_order_under_any_operations(
    ops: list[tuple[str, int]], buffered: bool
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, segment_name(0))
        pool = TransientStorePool(1, SEGMENT)
        mf = MappedFile.create(path, SEGMENT)
        try:
            if buffered:
                mf.attach_write_buffer(pool)
            model = bytearray()  # what was appended
            committed = flushed = 0
            for step, (name, arg) in enumerate(ops):
                if name in ("append", "fill"):
                    size = mf.remaining if name == "fill" else min(arg, mf.remaining)
                    if size == 0:
                        continue
                    data = bytes([step % 255 + 1]) * size
                    assert mf.append(data) == len(model)
                    model += data
                    if not buffered:
                        committed = len(model)
                elif name == "commit":
                    if buffered and enough_pages(committed, len(model), arg, len(model) == SEGMENT):
                        committed = len(model)
                    assert mf.commit(arg) == committed
                else:
                    if enough_pages(flushed, committed, arg, committed == SEGMENT):
                        flushed = committed
                    assert mf.flush(arg) == flushed
                check_positions(mf)
                assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (
                    len(model),
                    committed,
                    flushed,
                )
                # Readers see exactly what reached the file, never more.
                assert mf.read(0, SEGMENT) == bytes(model[:committed])
                assert on_disk(path) == bytes(model[:committed]).ljust(SEGMENT, b"\0")
                if buffered:
                    returned = committed == SEGMENT
                    assert pool.available == (1 if returned else 0)
        finally:
            mf.close()
            pool.close()


# -- SegmentAllocator ------------------------------------------------------------


def test_allocator_hands_out_the_file_and_prepares_the_next(tmp_path: Path) -> None:
    size = 256 * 1024
    first = str(tmp_path / segment_name(0))
    second = str(tmp_path / segment_name(size))
    third = str(tmp_path / segment_name(2 * size))
    allocator = SegmentAllocator(warm=True)
    allocator.start()
    handed: list[MappedFile] = []
    try:
        mf = allocator.get(first, second, size)
        handed.append(mf)
        assert mf.path == first
        assert mf.file_from_offset == 0
        assert mf.wrote_position == 0
        assert os.stat(first).st_size == size
        # The next segment appears without anybody asking for it again.
        wait_for(lambda: os.path.exists(second), "the next segment prepared ahead")
        prepared_inode = os.stat(second).st_ino
        nxt = allocator.get(second, third, size)
        handed.append(nxt)
        assert nxt.path == second
        assert nxt.file_from_offset == size
        # It is the prepared file, not a second allocation.
        assert os.stat(second).st_ino == prepared_inode
        assert os.stat(second).st_blocks * 512 >= size
        assert on_disk(second) == bytes(size)
        wait_for(lambda: os.path.exists(third), "the next segment prepared ahead")
    finally:
        allocator.stop()
        for f in handed:
            f.close()
    # Prepared but never handed out: left on disk, empty, for recovery to drop.
    assert os.path.getsize(third) == size
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))


def test_allocator_without_a_next_path_allocates_only_the_requested_file(
    tmp_path: Path,
) -> None:
    allocator = SegmentAllocator(warm=False)
    allocator.start()
    try:
        mf = allocator.get(str(tmp_path / segment_name(0)), None, 64 * 1024)
        mf.close()
    finally:
        allocator.stop()
    assert os.listdir(tmp_path) == [segment_name(0)]


def test_allocator_after_shutdown_still_serves_requests(tmp_path: Path) -> None:
    allocator = SegmentAllocator(warm=False)
    allocator.start()
    allocator.stop()
    mf = allocator.get(str(tmp_path / segment_name(0)), str(tmp_path / segment_name(1)), 65536)
    mf.close()
    # Stopped: nothing is prepared ahead any more.
    assert os.listdir(tmp_path) == [segment_name(0)]


def test_allocator_reports_disk_full_and_retries_later(
    small_tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    size = 96 * 1024  # two fit in the 256 KiB tmpfs, a third does not
    paths = [str(small_tmpfs / segment_name(n * size)) for n in range(3)]
    allocator = SegmentAllocator(warm=True)
    allocator.start()
    handed: list[MappedFile] = []
    try:
        handed.append(allocator.get(paths[0], paths[1], size))
        wait_for(lambda: os.path.exists(paths[1]), "the next segment prepared ahead")
        caplog.set_level(logging.WARNING, logger="skiff_broker.store.segment_allocator")
        handed.append(allocator.get(paths[1], paths[2], size))
        # Preparing the third segment in the background hits a real ENOSPC.
        wait_for(lambda: "could not prepare segment" in caplog.text, "the failure logged")
        # The appender that needs it gets a readable DiskFullError.
        with pytest.raises(DiskFullError) as info:
            allocator.get(paths[2], None, size)
        assert "no space" in str(info.value)
        assert str(small_tmpfs) in str(info.value)
        assert sorted(os.listdir(small_tmpfs)) == [segment_name(0), segment_name(size)]
        # Free space: a later request tries again instead of replaying the failure.
        handed.pop(0).destroy()
        retried = allocator.get(paths[2], None, size)
        handed.append(retried)
        assert retried.file_from_offset == 2 * size
        assert os.stat(paths[2]).st_blocks * 512 >= size
        retried.append(b"after retry")
        assert retried.read(0, 11) == b"after retry"
    finally:
        allocator.stop()
        for mf in handed:
            mf.close()
    assert sorted(os.listdir(small_tmpfs)) == [segment_name(size), segment_name(2 * size)]


def test_shutdown_releases_a_request_the_allocator_never_started(tmp_path: Path) -> None:
    """An appender waiting on a segment still queued at shutdown gets it anyway."""
    big, small = 32 * MiB, 64 * 1024
    busy = str(tmp_path / segment_name(big))
    queued = str(tmp_path / segment_name(3 * big))
    allocator = SegmentAllocator(warm=True)
    allocator.start()
    handed: list[MappedFile] = []
    got: list[MappedFile] = []
    taker = threading.Thread(target=lambda: got.append(allocator.get(queued, None, small)))
    try:
        # The requested file cannot be made, but the large next one is already
        # scheduled: the thread is busy warming it...
        with pytest.raises(FileNotFoundError):
            allocator.get(str(tmp_path / "missing" / segment_name(0)), busy, big)
        # ...while this request's next segment waits in the queue behind it,
        handed.append(allocator.get(str(tmp_path / segment_name(2 * big)), queued, small))
        # and an appender already wants it when the store shuts down.
        taker.start()
    finally:
        allocator.stop()
    taker.join(30)
    try:
        assert not taker.is_alive(), "get() blocked on a request the stopped allocator dropped"
        assert got[0].path == queued
        assert os.path.getsize(queued) == small
        # Prepared but never handed out: closed by shutdown, left on disk.
        assert os.path.getsize(busy) == big
    finally:
        for mf in handed + got:
            mf.close()
