"""Space reserved before appends covers every unit and key the dispatcher later writes.

The appender calls ``reserve`` before a batch and ``promise`` after it; the
dispatcher indexes records in log order, as far behind as it likes. However the
two interleave, building the index must never need a file nobody reserved, and
neither must recovery after a crash. A disk with no room but what was reserved
stands in for a full one: its ``allocate_file`` fails (on real files otherwise).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.store import index_file, mapped_file
from skiff_broker.store.consume_queue_table import ConsumeQueueTable
from skiff_broker.store.errors import DiskFullError
from skiff_broker.store.index_service import IndexService

TOPIC = "reserved"


def no_unreserved_space(path: str, file_size: int, what: str) -> int:
    raise DiskFullError(f"no space to allocate a {file_size}-byte {what}: nothing was reserved")


# Per appended batch: the key count of each record, and how many pending records
# the dispatcher indexes after it.
batches = st.lists(
    st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=4), st.integers(0, 8)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(index_num=st.integers(2, 6), plan=batches)
def test_the_dispatcher_never_needs_space_that_was_not_reserved(
    tmp_path_factory: pytest.TempPathFactory,
    index_num: int,
    plan: list[tuple[list[int], int]],
) -> None:
    directory = tmp_path_factory.mktemp("index")
    service = IndexService(str(directory / "index"), hash_slot_num=3, index_num=index_num)
    service.load(True, 0)
    # Only the reserved spares have room: a file allocated any other way fails.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(index_file, "allocate_file", no_unreserved_space)
        pending: list[tuple[int, list[str]]] = []
        written: list[tuple[int, list[str]]] = []
        offset = 0
        for key_counts, dispatch in plan:
            records = []
            for count in key_counts:
                offset += 100
                records.append((offset, [f"k{offset}-{i}" for i in range(count)]))
            keys = sum(len(record_keys) for _, record_keys in records)
            service.reserve(keys)
            keyed = [physical for physical, record_keys in records if record_keys]
            service.promise(keyed[-1] if keyed else 0, keys)
            pending += records
            for physical, record_keys in pending[:dispatch]:
                service.build_index(TOPIC, physical, physical, record_keys)
            written += pending[:dispatch]
            del pending[:dispatch]
        for physical, record_keys in pending:
            service.build_index(TOPIC, physical, physical, record_keys)
        written += pending
    # Every key is found again.
    for physical, record_keys in written:
        for key in record_keys:
            assert physical in service.query(TOPIC, key, 64, 0, 2**62)
    service.close()
    index_dir = directory / "index"
    if index_dir.exists():
        assert not [p for p in index_dir.iterdir() if p.name.endswith(".reserved")]


def test_after_a_crash_recovery_indexes_acknowledged_keys_in_the_space_reserved_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_dir = tmp_path / "index"
    service = IndexService(str(index_dir), hash_slot_num=3, index_num=4)
    service.load(True, 0)
    keys = [f"acknowledged-{i}" for i in range(6)]
    service.reserve(len(keys))
    service.promise(600, len(keys))
    # A crash before the dispatcher got to the batch: no close(), nothing indexed.
    monkeypatch.setattr(index_file, "allocate_file", no_unreserved_space)

    reopened = IndexService(str(index_dir), hash_slot_num=3, index_num=4)
    reopened.load(False, 0)
    for i, key in enumerate(keys):
        reopened.build_index(TOPIC, 100 * (i + 1), 0, [key])
    for i, key in enumerate(keys):
        assert reopened.query(TOPIC, key, 4, 0, 2**62) == [100 * (i + 1)]
    # New reservations do not reuse the names of spares adopted on load.
    monkeypatch.undo()
    reopened.reserve(20)
    names = [p.name for p in index_dir.iterdir() if p.name.endswith(".reserved")]
    assert len(names) == len(set(names)) > 0
    reopened.close()
    service.close()
    assert not [p for p in index_dir.iterdir() if p.name.endswith(".reserved")]


def test_a_consume_queue_file_reserved_before_a_crash_takes_the_units_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "consumequeue"
    table = ConsumeQueueTable(str(root), units_per_file=10)
    table.load()
    # Units 0..9 go into the first file, 10..14 into the second: both reserved.
    table.reserve_through(TOPIC, 3, 0, 14)
    # A crash before the dispatcher wrote any unit; the disk has no other room.
    monkeypatch.setattr(mapped_file, "allocate_file", no_unreserved_space)
    reopened = ConsumeQueueTable(str(root), units_per_file=10)
    reopened.load()
    cq = reopened.find_or_create(TOPIC, 3)
    for offset in range(15):
        assert cq.put(1000 + 10 * offset, 10, 0, offset)
    assert cq.read_units(0, 10) == [(1000 + 10 * i, 10, 0) for i in range(10)]
    assert cq.read_units(10, 10) == [(1000 + 10 * i, 10, 0) for i in range(10, 15)]
    with pytest.raises(DiskFullError):
        reopened.reserve_through(TOPIC, 3, 15, 20)
    reopened.close()
    table.close()


@settings(max_examples=60, deadline=None)
@given(
    units_per_file=st.integers(1, 5),
    plan=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 7), st.integers(0, 12)), min_size=1, max_size=25
    ),
)
def test_consume_queue_units_always_land_in_reserved_files(
    tmp_path_factory: pytest.TempPathFactory,
    units_per_file: int,
    plan: list[tuple[int, int, int]],
) -> None:
    # Per appended batch: its queue, its unit count, and how many pending units
    # the dispatcher writes after it (in log order, as far behind as it likes).
    root = tmp_path_factory.mktemp("cq")
    table = ConsumeQueueTable(str(root), units_per_file=units_per_file)
    table.load()
    next_offsets = [0, 0, 0]
    pending: list[tuple[int, int]] = []
    physical = 0
    allocate = mapped_file.allocate_file

    def reservations_only(path: str, file_size: int, what: str) -> int:
        if path.endswith(mapped_file.RESERVED_SUFFIX + ".tmp"):
            return allocate(path, file_size, what)
        return no_unreserved_space(path, file_size, what)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mapped_file, "allocate_file", reservations_only)
        for queue_id, count, dispatch in plan:
            first = next_offsets[queue_id]
            table.reserve_through(TOPIC, queue_id, first, first + count - 1)
            next_offsets[queue_id] += count
            pending += [(queue_id, offset) for offset in range(first, first + count)]
            for queue_id_, offset in pending[:dispatch]:
                physical += 10
                assert table.find_or_create(TOPIC, queue_id_).put(physical, 10, 0, offset)
            del pending[:dispatch]
        for queue_id_, offset in pending:
            physical += 10
            assert table.find_or_create(TOPIC, queue_id_).put(physical, 10, 0, offset)
    for queue_id, count in enumerate(next_offsets):
        cq = table.get(TOPIC, queue_id)
        assert (cq.max_offset if cq is not None else 0) == count
    table.close()
