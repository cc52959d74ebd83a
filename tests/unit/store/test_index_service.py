"""IndexService: rolling, querying across files, recovery and expiry, on real files."""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.store import index_file
from skiff_broker.store.dispatch_request import DispatchRequest
from skiff_broker.store.index_service import IndexService

T0 = 1_700_000_000_000
ALL_TIME = (0, 2**62)


def make_service(tmp_path: Path, index_num: int = 4, hash_slot_num: int = 3) -> IndexService:
    svc = IndexService(str(tmp_path / "index"), hash_slot_num=hash_slot_num, index_num=index_num)
    svc.load(True, 0)
    return svc


def names_on_disk(tmp_path: Path) -> list[str]:
    return sorted(os.listdir(tmp_path / "index"))


def test_build_and_query(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=100)
    svc.build_index("orders", 100, T0, ["id-1", "customer-9"])
    svc.build_index("orders", 200, T0 + 1000, ["id-2", "customer-9"])
    svc.build_index("refunds", 300, T0 + 2000, ["id-1"])
    assert svc.query("orders", "id-1", 10, *ALL_TIME) == [100]
    assert svc.query("orders", "customer-9", 10, *ALL_TIME) == [200, 100]
    assert svc.query("refunds", "id-1", 10, *ALL_TIME) == [300]
    assert svc.query("orders", "nope", 10, *ALL_TIME) == []
    assert svc.last_timestamp == T0 + 2000
    svc.close()


def test_empty_keys_are_skipped(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=100)
    svc.build_index("T", 100, T0, [])
    svc.build_index("T", 200, T0, ["", ""])
    assert svc.files == []
    assert svc.last_timestamp == 0
    svc.build_index("T", 300, T0, ["", "k"])
    assert len(svc.files) == 1
    assert svc.files[0].index_count == 2
    assert svc.query("T", "", 10, *ALL_TIME) == []
    svc.close()


def test_a_single_string_of_keys_is_refused(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=100)
    with pytest.raises(TypeError):
        svc.build_index("T", 1, T0, "k1 k2")
    svc.close()


def test_repeated_key_in_one_record_is_indexed_once(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=100)
    svc.build_index("T", 100, T0, ["k", "k"])
    assert svc.files[0].index_count == 2
    assert svc.query("T", "k", 10, *ALL_TIME) == [100]
    svc.close()


def test_rolls_when_full_and_queries_span_files(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=4)  # 3 entries per file
    for i in range(8):
        svc.build_index("T", 1000 * (i + 1), T0 + i * 1000, ["k"])
    files = svc.files
    assert [f.index_count for f in files] == [4, 4, 3]
    assert svc.query("T", "k", 100, *ALL_TIME) == [8000, 7000, 6000, 5000, 4000, 3000, 2000, 1000]
    assert svc.query("T", "k", 5, *ALL_TIME) == [8000, 7000, 6000, 5000, 4000]
    # Only files overlapping the range are read; the range spans two of them.
    assert svc.query("T", "k", 100, T0 + 2000, T0 + 4000) == [5000, 4000, 3000]
    # Each new file starts where the one before it ended.
    for older, newer in itertools.pairwise(files):
        assert newer.begin_timestamp == older.end_timestamp
        assert newer.begin_phy_offset == older.end_phy_offset
    assert files[0].begin_timestamp == T0
    assert files[0].begin_phy_offset == 1000
    svc.close()


def test_record_split_over_two_files(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=4)
    svc.build_index("T", 100, T0, ["a", "b"])
    svc.build_index("T", 200, T0 + 1000, ["c", "d", "e"])  # c fills the first file
    assert len(svc.files) == 2
    for key in ("c", "d", "e"):
        assert svc.query("T", key, 10, *ALL_TIME) == [200]
    svc.close()


def test_file_names_are_times_in_creation_order(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=2)  # one entry per file: a roll per record
    for i in range(6):
        svc.build_index("T", i, T0, ["k"])
    names = [os.path.basename(f.path) for f in svc.files]
    assert all(re.fullmatch(r"\d{17}", n) for n in names)
    # Created within a few ms of each other, yet distinct and ordered by name.
    assert names == sorted(names)
    assert len(set(names)) == 6
    assert names_on_disk(tmp_path) == names
    svc.close()


def test_build_index_is_idempotent_for_replayed_records(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=4)
    records = [(100 * (i + 1), T0 + i, [f"k{i}", "shared"]) for i in range(5)]
    for offset, ts, keys in records:
        svc.build_index("T", offset, ts, keys)
    counts = [f.index_count for f in svc.files]
    before = {k: svc.query("T", k, 100, *ALL_TIME) for k in ["shared", "k0", "k4"]}

    for offset, ts, keys in records:  # the store replays after recovery
        svc.build_index("T", offset, ts, keys)
    assert [f.index_count for f in svc.files] == counts
    after = {k: svc.query("T", k, 100, *ALL_TIME) for k in ["shared", "k0", "k4"]}
    assert after == before
    assert after["shared"] == [500, 400, 300, 200, 100]

    # The next new record is still indexed.
    svc.build_index("T", 600, T0 + 9, ["k5"])
    assert svc.query("T", "k5", 10, *ALL_TIME) == [600]
    svc.close()


def test_replay_completes_a_partly_indexed_record(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=100)
    svc.build_index("T", 100, T0, ["a"])  # as if a crash cut the record's keys short
    svc.build_index("T", 100, T0, ["a", "b"])
    assert svc.files[0].index_count == 3
    assert svc.query("T", "a", 10, *ALL_TIME) == [100]
    assert svc.query("T", "b", 10, *ALL_TIME) == [100]
    svc.close()


def test_reload_after_clean_exit_keeps_everything(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=4)
    for i in range(7):
        svc.build_index("T", i + 1, T0 + i * 1000, ["k"])
    svc.close()

    again = IndexService(str(tmp_path / "index"), hash_slot_num=3, index_num=4)
    again.load(True, 0)
    assert len(again.files) == 3
    assert again.query("T", "k", 100, *ALL_TIME) == [7, 6, 5, 4, 3, 2, 1]
    assert again.last_timestamp == T0 + 6000
    again.build_index("T", 8, T0 + 7000, ["k"])
    assert again.query("T", "k", 1, *ALL_TIME) == [8]
    again.close()


def test_load_after_crash_drops_files_newer_than_checkpoint(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=4)
    for i in range(9):  # files end at T0+2000, T0+5000, T0+8000
        svc.build_index("T", i + 1, T0 + i * 1000, ["k"])
    names = [os.path.basename(f.path) for f in svc.files]
    svc.close()

    crashed = IndexService(str(tmp_path / "index"), hash_slot_num=3, index_num=4)
    crashed.load(False, T0 + 5000)
    assert [os.path.basename(f.path) for f in crashed.files] == names[:2]
    assert names_on_disk(tmp_path) == names[:2]
    assert crashed.query("T", "k", 100, *ALL_TIME) == [6, 5, 4, 3, 2, 1]
    # Re-dispatch of the lost records rebuilds the index.
    for i in range(6, 9):
        crashed.build_index("T", i + 1, T0 + i * 1000, ["k"])
    assert crashed.query("T", "k", 100, *ALL_TIME) == [9, 8, 7, 6, 5, 4, 3, 2, 1]
    crashed.close()


def test_load_after_crash_with_old_checkpoint_drops_all(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=4)
    for i in range(5):
        svc.build_index("T", i + 1, T0 + i * 1000, ["k"])
    svc.close()
    crashed = IndexService(str(tmp_path / "index"), hash_slot_num=3, index_num=4)
    crashed.load(False, T0 - 1)
    assert crashed.files == []
    assert names_on_disk(tmp_path) == []
    assert crashed.last_timestamp == 0
    crashed.close()


def test_load_removes_interrupted_creations(tmp_path: Path) -> None:
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    (index_dir / "20260101000000000.tmp").write_bytes(b"\0" * 10)
    (index_dir / "unrelated.txt").write_text("left alone")
    svc = IndexService(str(index_dir), hash_slot_num=3, index_num=4)
    svc.load(True, 0)
    assert svc.files == []
    assert names_on_disk(tmp_path) == ["unrelated.txt"]
    svc.close()


def test_load_without_directory(tmp_path: Path) -> None:
    svc = IndexService(str(tmp_path / "absent"), hash_slot_num=3, index_num=4)
    svc.load(False, 0)
    assert svc.files == []
    assert svc.query("T", "k", 10, *ALL_TIME) == []
    svc.close()


def test_delete_expired_keeps_the_newest_file(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=4)
    for i in range(9):  # files end at offsets 300, 600, 900
        svc.build_index("T", 100 * (i + 1), T0 + i, ["k"])
    files = svc.files
    assert svc.delete_expired(300) == 0
    assert svc.delete_expired(301) == 1
    assert not os.path.exists(files[0].path)
    assert svc.files == files[1:]
    assert svc.delete_expired(10**12) == 1
    assert svc.files == files[2:]
    assert names_on_disk(tmp_path) == [os.path.basename(files[2].path)]
    assert svc.query("T", "k", 100, *ALL_TIME) == [900, 800, 700]
    svc.close()


def test_truncate_drops_files_past_the_offset(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=4)
    for i in range(9):  # files end at offsets 300, 600, 900
        svc.build_index("T", 100 * (i + 1), T0 + i, ["k"])
    files = svc.files
    svc.truncate(901)
    assert svc.files == files
    # A record that starts exactly at the cut is gone from the log: its file goes.
    svc.truncate(900)
    assert svc.files == files[:2]
    svc.truncate(650)
    assert svc.files == files[:2]
    assert not os.path.exists(files[2].path)
    # The store re-dispatches from the remaining file's end on.
    for i in range(6, 8):
        svc.build_index("T", 100 * (i + 1), T0 + i, ["k"])
    assert svc.query("T", "k", 100, *ALL_TIME) == [800, 700, 600, 500, 400, 300, 200, 100]
    svc.truncate(0)
    assert svc.files == []
    svc.close()


def test_files_is_a_copy(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=100)
    svc.build_index("T", 1, T0, ["k"])
    svc.files.clear()
    assert len(svc.files) == 1
    svc.close()


def test_flush_and_close(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=100)
    svc.flush()  # nothing to flush yet
    svc.build_index("T", 1, T0, ["k"])
    svc.flush()
    svc.close()
    assert svc.files == []

    loaded = make_service(tmp_path, index_num=100)
    assert loaded.query("T", "k", 10, *ALL_TIME) == [1]
    with pytest.raises(RuntimeError):
        loaded.load(True, 0)  # a second load would open the files twice
    loaded.close()


def test_queries_while_the_dispatcher_writes_and_rolls(tmp_path: Path) -> None:
    svc = make_service(tmp_path, index_num=50, hash_slot_num=7)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                got = svc.query("T", "hot", 1000, *ALL_TIME)
                assert got == sorted(got, reverse=True)
                # Yield the GIL so the writer is not starved (keeps the test fast).
                time.sleep(0.0002)
        except BaseException as exc:
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(1, 501):
        svc.build_index("T", i, T0 + i, ["hot", f"cold-{i}"])
        if i % 100 == 0:
            svc.delete_expired(i - 150)
    stop.set()
    for t in readers:
        t.join(timeout=10)
    assert not errors
    got = svc.query("T", "hot", 1000, *ALL_TIME)
    oldest = svc.files[0].begin_phy_offset
    # Every hot record still covered by a file, newest first, without gaps.
    assert got == list(range(500, got[-1] - 1, -1))
    assert got[-1] in (oldest, oldest + 1)
    svc.close()


_RECORD_KEYS = st.lists(st.sampled_from(["", "a", "b", "id-1", "id-2", "Köln"]), max_size=3)
# Runs whose every record has one key, its message ID, as a producer's records do.
_ID_ONLY_RUNS = st.lists(
    st.sampled_from(["a", "b", "id-1", "id-2", "Köln"]).map(lambda key: [key]),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(
    index_num=st.integers(min_value=2, max_value=12),
    records=st.one_of(st.lists(_RECORD_KEYS, min_size=1, max_size=40), _ID_ONLY_RUNS),
    cut=st.integers(min_value=0, max_value=60),
    replayed=st.integers(min_value=0, max_value=60),
)
def test_a_run_indexed_together_leaves_the_files_of_one_record_at_a_time(
    tmp_path_factory: pytest.TempPathFactory,
    index_num: int,
    records: list[list[str]],
    cut: int,
    replayed: int,
) -> None:
    # Small files, so runs roll over into new ones; a replayed stretch before the run, as
    # after recovery, whose records are indexed already.
    requests = [
        DispatchRequest("T", i % 2, i, 100 * (i + 1), 90, 0, T0 + 700 * i, "", keys)
        for i, keys in enumerate(records)
    ]
    cut = min(cut, len(requests))
    replayed = min(replayed, cut)
    services = []
    for name in ("one", "together"):
        svc = make_service(tmp_path_factory.mktemp(name), index_num=index_num)
        for r in requests[:cut]:
            svc.build_index(r.topic, r.physical_offset, r.store_timestamp, r.keys)
        services.append(svc)
    one, together = services
    for r in requests[cut - replayed :]:
        one.build_index(r.topic, r.physical_offset, r.store_timestamp, r.keys)
    together.build_run(requests[cut - replayed :])
    try:
        assert [f.index_count for f in together.files] == [f.index_count for f in one.files]
        for key in ("a", "b", "id-1", "id-2", "Köln"):
            assert together.query("T", key, 100, *ALL_TIME) == one.query("T", key, 100, *ALL_TIME)
    finally:
        one.close()
        together.close()
    contents = [[Path(f.path).read_bytes() for f in svc.files] for svc in (one, together)]
    assert contents[1] == contents[0]


@pytest.mark.parametrize("tail", [None, 50], ids=["default-tail", "tail-of-the-run"])
def test_a_run_a_crash_left_out_of_its_hash_chains_is_found_after_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: int | None
) -> None:
    if tail is not None:
        # A load looks at the newest TAIL_ENTRIES entries only: the run's 50 must do.
        monkeypatch.setattr(index_file, "TAIL_ENTRIES", tail)
    # A run's keys are written as arrays: entries, then the header that counts them, then
    # the slots that name them. A writer killed before the slots leaves the run counted
    # but out of every chain; its records stamped in the same millisecond as the
    # checkpoint, the file survives recovery, which skips records the file says it holds.
    slots = 97
    svc = make_service(tmp_path, index_num=1000, hash_slot_num=slots)
    records = [
        DispatchRequest("T", 0, i, 100 * (i + 1), 90, 0, T0, "", [f"id-{i}"]) for i in range(90)
    ]
    first, second = records[:40], records[40:]
    svc.build_run(first)
    svc.flush()
    path = Path(svc.files[-1].path)
    slot_bytes = (index_file.HEADER_SIZE, index_file.HEADER_SIZE + index_file.SLOT_SIZE * slots)
    before = path.read_bytes()[slice(*slot_bytes)]
    svc.build_run(second)
    svc.close()
    # The kill: the second run's entries and header are in the file, its slots are not.
    with path.open("r+b") as f:
        f.seek(slot_bytes[0])
        f.write(before)

    recovered = IndexService(str(tmp_path / "index"), hash_slot_num=slots, index_num=1000)
    recovered.load(False, T0)
    recovered.build_run(records)  # recovery dispatches the records again
    try:
        for r in records:
            assert recovered.query("T", r.keys[0], 10, *ALL_TIME) == [r.physical_offset], r.keys
        # Nothing was indexed twice.
        assert recovered.files[-1].index_count == 1 + len(records)
    finally:
        recovered.close()
