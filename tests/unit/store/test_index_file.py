"""IndexFile: on-disk layout, hash chains, filtering and reopening, on real mapped files."""

from __future__ import annotations

import itertools
import os
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.store.errors import StoreCorruptError
from skiff_broker.store.hashing import index_key_hash
from skiff_broker.store.index_file import (
    ENTRY_SIZE,
    HEADER_SIZE,
    INT32_MAX,
    SLOT_SIZE,
    IndexFile,
    index_file_size,
)

T0 = 1_700_000_000_000  # a realistic store timestamp, ms
ALL_TIME = (0, 2**62)


def entry_pos(hash_slot_num: int, n: int) -> int:
    return HEADER_SIZE + hash_slot_num * SLOT_SIZE + n * ENTRY_SIZE


def read_header(path: Path) -> tuple[int, ...]:
    return struct.unpack_from(">qqqqii", path.read_bytes(), 0)


def read_entry(path: Path, hash_slot_num: int, n: int) -> tuple[int, ...]:
    return struct.unpack_from(">iqii", path.read_bytes(), entry_pos(hash_slot_num, n))


def read_slot(path: Path, slot: int) -> int:
    return struct.unpack_from(">i", path.read_bytes(), HEADER_SIZE + slot * SLOT_SIZE)[0]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "20261121123456789"


def test_new_file_is_preallocated_not_sparse(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    f = IndexFile(str(path), 1000, 1000)
    try:
        st = os.stat(path)
        assert st.st_size == 40 + 1000 * 4 + 1000 * 20 == index_file_size(1000, 1000)
        assert st.st_blocks * 512 >= st.st_size
        assert f.index_count == 1
        assert f.hash_slot_count == 0
        assert not (tmp_path / "idx.tmp").exists()
    finally:
        f.close()
    assert read_header(path) == (0, 0, 0, 0, 0, 1)


def test_put_and_select_round_trip(path: Path) -> None:
    f = IndexFile(str(path), 16, 32)
    assert f.put_key("T#k1", 100, T0)
    assert f.put_key("T#k2", 200, T0 + 1000)
    assert f.put_key("T#k1", 300, T0 + 2000)
    assert f.select_phy_offsets("T#k1", 10, *ALL_TIME) == [300, 100]
    assert f.select_phy_offsets("T#k2", 10, *ALL_TIME) == [200]
    assert f.select_phy_offsets("T#missing", 10, *ALL_TIME) == []
    assert f.index_count == 4
    f.close()


def test_header_tracks_first_and_last_put(path: Path) -> None:
    f = IndexFile(str(path), 16, 32)
    f.put_key("a", 1000, T0)
    f.put_key("b", 2000, T0 + 1500)
    f.put_key("c", 3000, T0 + 4200)
    assert (f.begin_timestamp, f.end_timestamp) == (T0, T0 + 4200)
    assert (f.begin_phy_offset, f.end_phy_offset) == (1000, 3000)
    f.close()


def test_on_disk_bytes_match_rocketmq_layout(path: Path) -> None:
    slots = 7
    f = IndexFile(str(path), slots, 10)
    f.put_key("T#first", 4096, T0)
    f.put_key("T#first", 8192, T0 + 3999)
    f.flush()
    f.close()

    key_hash = index_key_hash("T#first")
    slot = key_hash % slots
    assert read_header(path) == (T0, T0 + 3999, 4096, 8192, 1, 3)
    assert read_slot(path, slot) == 2
    # Entry 2: the newer one, 3.999 s after the start counts as 3 whole seconds.
    assert read_entry(path, slots, 2) == (key_hash, 8192, 3, 1)
    assert read_entry(path, slots, 1) == (key_hash, 4096, 0, 0)
    # Entry 0 is the sentinel and stays zero; other slots stay empty.
    assert read_entry(path, slots, 0) == (0, 0, 0, 0)
    assert all(read_slot(path, s) == 0 for s in range(slots) if s != slot)


def test_keys_sharing_one_slot_chain_and_stay_apart(path: Path) -> None:
    # One slot: every key collides on the slot but their hashes differ.
    f = IndexFile(str(path), 1, 32)
    keys = ["T#alpha", "T#beta", "T#gamma"]
    assert len({index_key_hash(k) for k in keys}) == 3
    expected: dict[str, list[int]] = {k: [] for k in keys}
    offset = 0
    for _ in range(4):
        for k in keys:
            offset += 100
            assert f.put_key(k, offset, T0)
            expected[k].insert(0, offset)
    for k in keys:
        assert f.select_phy_offsets(k, 100, *ALL_TIME) == expected[k]
    assert f.hash_slot_count == 1
    f.close()

    # Each entry links to the one before it, whatever its key.
    assert read_slot(path, 0) == 12
    for n in range(1, 13):
        assert read_entry(path, 1, n)[3] == n - 1


def test_keys_in_different_slots_of_a_small_table(path: Path) -> None:
    f = IndexFile(str(path), 3, 64)
    keys = [f"T#key-{i}" for i in range(12)]
    for i, k in enumerate(keys):
        f.put_key(k, i * 10, T0)
        f.put_key(k, 1000 + i * 10, T0)
    for i, k in enumerate(keys):
        assert f.select_phy_offsets(k, 10, *ALL_TIME) == [1000 + i * 10, i * 10]
    assert f.hash_slot_count == len({index_key_hash(k) % 3 for k in keys})
    f.close()


def test_equal_hash_keys_both_come_back(path: Path) -> None:
    # "Aa" and "BB" have the same Java hashCode, so do any two keys ending in them.
    assert index_key_hash("T#Aa") == index_key_hash("T#BB")
    f = IndexFile(str(path), 8, 16)
    f.put_key("T#Aa", 10, T0)
    f.put_key("T#BB", 20, T0)
    f.put_key("T#other", 30, T0)
    # The file cannot tell them apart; the caller checks keys in the messages.
    assert f.select_phy_offsets("T#Aa", 10, *ALL_TIME) == [20, 10]
    assert f.select_phy_offsets("T#BB", 10, *ALL_TIME) == [20, 10]
    f.close()


def test_time_range_filter(path: Path) -> None:
    f = IndexFile(str(path), 4, 16)
    for i in range(5):
        f.put_key("T#k", i, T0 + i * 10_000)
    assert f.select_phy_offsets("T#k", 10, T0 + 10_000, T0 + 30_000) == [3, 2, 1]
    # An entry stands for its whole second: 10.000 s matches a range from 10.001 s.
    assert f.select_phy_offsets("T#k", 10, T0 + 10_001, T0 + 29_999) == [2, 1]
    assert f.select_phy_offsets("T#k", 10, T0 + 11_000, T0 + 29_999) == [2]
    assert f.select_phy_offsets("T#k", 10, T0 + 40_000, T0 + 99_000) == [4]
    assert f.select_phy_offsets("T#k", 10, 0, T0 - 1) == []
    f.close()


def test_times_are_whole_seconds_after_begin(path: Path) -> None:
    f = IndexFile(str(path), 4, 16)
    f.put_key("T#k", 1, T0)
    f.put_key("T#k", 2, T0 + 2999)
    # Stored as begin + 2 s, standing for the second [2.000, 2.999].
    assert f.select_phy_offsets("T#k", 10, T0 + 2000, T0 + 2000) == [2]
    # A query that starts at the exact store time still finds it.
    assert f.select_phy_offsets("T#k", 10, T0 + 2999, T0 + 5000) == [2]
    assert f.select_phy_offsets("T#k", 10, T0 + 3000, T0 + 5000) == []
    f.close()


def test_time_before_begin_clamps_to_zero(path: Path) -> None:
    f = IndexFile(str(path), 4, 16)
    f.put_key("T#k", 1, T0)
    f.put_key("T#late", 2, T0 - 60_000)
    f.close()
    assert read_entry(path, 4, 2)[2] == 0


def test_time_diff_clamps_to_int32(path: Path) -> None:
    f = IndexFile(str(path), 4, 16)
    f.put_key("T#k", 1, T0)
    f.put_key("T#k", 2, T0 + (INT32_MAX + 10) * 1000)
    f.close()
    assert read_entry(path, 4, 2)[2] == INT32_MAX


def test_max_num_keeps_the_newest(path: Path) -> None:
    f = IndexFile(str(path), 4, 64)
    for i in range(20):
        f.put_key("T#k", i, T0 + i)
    assert f.select_phy_offsets("T#k", 3, *ALL_TIME) == [19, 18, 17]
    assert f.select_phy_offsets("T#k", 1, *ALL_TIME) == [19]
    assert f.select_phy_offsets("T#k", 0, *ALL_TIME) == []
    f.close()


def test_full_file_refuses_puts(path: Path) -> None:
    f = IndexFile(str(path), 4, 4)  # entry 0 is the sentinel: room for 3
    for i in range(3):
        assert not f.is_write_full()
        assert f.put_key(f"T#k{i}", i, T0)
    assert f.is_write_full()
    assert f.put_key("T#k3", 3, T0) is False
    assert f.index_count == 4
    assert f.end_phy_offset == 2
    assert f.select_phy_offsets("T#k3", 10, *ALL_TIME) == []
    f.close()


def test_reopen_reads_header_and_keeps_chains(path: Path) -> None:
    f = IndexFile(str(path), 3, 16)
    f.put_key("T#a", 10, T0)
    f.put_key("T#b", 20, T0 + 1000)
    f.put_key("T#a", 30, T0 + 2000)
    f.close()

    g = IndexFile(str(path), 3, 16)
    assert g.begin_timestamp == T0
    assert g.end_timestamp == T0 + 2000
    assert g.begin_phy_offset == 10
    assert g.end_phy_offset == 30
    assert g.index_count == 4
    assert g.hash_slot_count == f.hash_slot_count
    assert g.select_phy_offsets("T#a", 10, *ALL_TIME) == [30, 10]
    # Appending continues the existing chain.
    g.put_key("T#a", 40, T0 + 3000)
    assert g.select_phy_offsets("T#a", 10, *ALL_TIME) == [40, 30, 10]
    assert g.begin_timestamp == T0
    g.close()


def test_reopen_with_other_sizes_is_refused(path: Path) -> None:
    IndexFile(str(path), 4, 16).close()
    with pytest.raises(StoreCorruptError):
        IndexFile(str(path), 8, 16)


def test_inherited_begin_is_kept_by_first_put(path: Path) -> None:
    f = IndexFile(str(path), 4, 16, begin_timestamp=T0, begin_phy_offset=5000)
    assert (f.begin_timestamp, f.end_timestamp) == (T0, T0)
    assert (f.begin_phy_offset, f.end_phy_offset) == (5000, 5000)
    f.put_key("T#k", 6000, T0 + 7000)
    assert (f.begin_timestamp, f.begin_phy_offset) == (T0, 5000)
    assert (f.end_timestamp, f.end_phy_offset) == (T0 + 7000, 6000)
    f.close()
    assert read_entry(path, 4, 1)[2] == 7


def test_is_time_matched(path: Path) -> None:
    f = IndexFile(str(path), 4, 16)
    assert not f.is_time_matched(*ALL_TIME)  # nothing indexed yet
    f.put_key("T#k", 1, T0)
    f.put_key("T#k", 2, T0 + 10_000)
    assert f.is_time_matched(T0 - 5, T0)
    assert f.is_time_matched(T0 + 10_000, T0 + 20_000)
    assert f.is_time_matched(T0 + 1, T0 + 2)
    assert f.is_time_matched(T0 - 1, T0 + 99_999)
    assert not f.is_time_matched(T0 - 10, T0 - 1)
    assert not f.is_time_matched(T0 + 10_001, T0 + 20_000)
    f.close()


def test_chain_loop_on_disk_terminates(path: Path) -> None:
    f = IndexFile(str(path), 1, 16)
    f.put_key("T#k", 1, T0)
    f.put_key("T#k", 2, T0)
    f.close()
    with open(path, "r+b") as raw:
        # Entry 1 now claims entry 2 came before it: a loop 2 -> 1 -> 2.
        raw.seek(entry_pos(1, 1) + 16)
        raw.write(struct.pack(">i", 2))
    g = IndexFile(str(path), 1, 16)
    assert g.select_phy_offsets("T#k", 100, *ALL_TIME) == [2, 1]
    g.close()


def test_invalid_slot_value_is_treated_as_empty(path: Path) -> None:
    f = IndexFile(str(path), 1, 16)
    f.put_key("T#k", 1, T0)
    f.close()
    with open(path, "r+b") as raw:
        raw.seek(HEADER_SIZE)
        raw.write(struct.pack(">i", 9))  # beyond indexCount (2)
    g = IndexFile(str(path), 1, 16)
    assert g.select_phy_offsets("T#k", 10, *ALL_TIME) == []
    g.put_key("T#k", 5, T0)
    assert g.select_phy_offsets("T#k", 10, *ALL_TIME) == [5]
    g.close()
    assert read_entry(path, 1, 2)[3] == 0


def test_contains_finds_exact_offset(path: Path) -> None:
    f = IndexFile(str(path), 2, 16)
    f.put_key("T#a", 10, T0)
    f.put_key("T#b", 20, T0)
    f.put_key("T#a", 30, T0)
    assert f.contains("T#a", 30)
    assert f.contains("T#a", 10)
    assert not f.contains("T#a", 20)
    assert not f.contains("T#c", 30)
    f.close()


def test_close_and_destroy(path: Path) -> None:
    f = IndexFile(str(path), 4, 16)
    f.put_key("T#k", 1, T0)
    f.close()
    f.close()  # twice is fine
    assert f.closed
    assert f.select_phy_offsets("T#k", 10, *ALL_TIME) == []
    assert f.end_phy_offset == 1  # header values outlive the mapping
    with pytest.raises(ValueError):
        f.put_key("T#k", 2, T0)
    assert path.exists()

    g = IndexFile(str(path), 4, 16)
    g.destroy()
    assert not path.exists()
    g.destroy()  # already gone


def test_queries_run_while_writing_and_closing(path: Path) -> None:
    f = IndexFile(str(path), 8, 5000)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen_lengths: list[int] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                got = f.select_phy_offsets("T#hot", 10_000, *ALL_TIME)
                # Always a consistent, strictly decreasing prefix of the writes.
                assert got == sorted(got, reverse=True)
                assert len(set(got)) == len(got)
                seen_lengths.append(len(got))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(3000):
        f.put_key("T#hot" if i % 2 == 0 else f"T#cold{i}", i, T0 + i)
    f.close()
    stop.set()
    for t in threads:
        t.join(timeout=10)
    assert not errors
    assert seen_lengths


def test_close_during_a_read_unmaps_when_the_read_ends(path: Path) -> None:
    f = IndexFile(str(path), 4, 16)
    f.put_key("T#k", 1, T0)
    with f.reading() as mm:  # what a query holds while it walks a chain
        assert mm is not None
        f.close()
        # The running read can still use the mapping; new reads see a closed file.
        assert mm[HEADER_SIZE - 4 : HEADER_SIZE] == (2).to_bytes(4, "big")
        assert f.select_phy_offsets("T#k", 10, *ALL_TIME) == []
        assert not mm.closed
    assert mm.closed


@settings(max_examples=80, deadline=None)
@given(
    slots=st.integers(min_value=1, max_value=8),
    capacity=st.integers(min_value=2, max_value=40),
    before=st.integers(min_value=0, max_value=10),
    keys=st.lists(st.text(max_size=6), min_size=1, max_size=50),
    gaps=st.lists(st.integers(min_value=0, max_value=3), min_size=60, max_size=60),
    seconds=st.lists(st.integers(min_value=-2, max_value=5), min_size=60, max_size=60),
)
def test_keys_put_together_make_the_bytes_of_keys_put_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    slots: int,
    capacity: int,
    before: int,
    keys: list[str],
    gaps: list[int],
    seconds: list[int],
) -> None:
    # Small slot tables, so keys share slots within the batch and with earlier entries.
    directory = tmp_path_factory.mktemp("put")
    offsets = list(itertools.accumulate(gaps[: before + len(keys)], initial=4096))[1:]
    stamps = [T0 + 1000 * s for s in seconds[: before + len(keys)]]
    earlier = [f"e{i % 3}" for i in range(before)]
    one_by_one = IndexFile(str(directory / "one"), slots, capacity)
    together = IndexFile(str(directory / "together"), slots, capacity)
    try:
        for f in (one_by_one, together):
            for key, offset, stamp in zip(earlier, offsets, stamps, strict=False):
                f.put_key(key, offset, stamp)
        put = sum(
            one_by_one.put_key(key, offset, stamp)
            for key, offset, stamp in zip(keys, offsets[before:], stamps[before:], strict=True)
        )
        assert (
            together.put_keys(
                np.array([index_key_hash(k) for k in keys], dtype=np.int64),
                np.array(offsets[before:], dtype=np.int64),
                np.array(stamps[before:], dtype=np.int64),
            )
            == put
        )
        assert together.index_count == one_by_one.index_count
        assert together.hash_slot_count == one_by_one.hash_slot_count
    finally:
        one_by_one.close()
        together.close()
    assert (directory / "together").read_bytes() == (directory / "one").read_bytes()


def test_keys_put_together_are_found_and_a_torn_slot_is_not_followed(path: Path) -> None:
    f = IndexFile(str(path), 4, 100)
    try:
        f.put_key("T#a", 100, T0)
        # A slot naming an entry never written (a torn write) reads as empty.
        slot = index_key_hash("T#b") % 4
        struct.pack_into(">i", f._mm, HEADER_SIZE + slot * SLOT_SIZE, 77)
        keys = ["T#b", "T#a", "T#b"]
        assert (
            f.put_keys(
                np.array([index_key_hash(k) for k in keys], dtype=np.int64),
                np.array([200, 300, 400], dtype=np.int64),
                np.array([T0 + 1000, T0 + 2000, T0 + 3000], dtype=np.int64),
            )
            == 3
        )
        assert f.select_phy_offsets("T#a", 10, *ALL_TIME) == [300, 100]
        assert f.select_phy_offsets("T#b", 10, *ALL_TIME) == [400, 200]
        assert f.end_phy_offset == 400
        assert f.end_timestamp == T0 + 3000
    finally:
        f.close()
