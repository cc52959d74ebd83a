"""Index space reserved before appends covers every key the dispatcher later indexes.

The appender calls ``reserve`` before a batch and ``promise`` after it; the
dispatcher indexes records in log order, as far behind as it likes. However the
two interleave, building the index must never need a file nobody reserved.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.store import index_file
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


def test_spare_files_left_by_a_crash_are_deleted_on_load(tmp_path: Path) -> None:
    index_dir = tmp_path / "index"
    service = IndexService(str(index_dir), hash_slot_num=3, index_num=4)
    service.load(True, 0)
    service.reserve(10)
    spares = sorted(p.name for p in index_dir.iterdir())
    assert spares and all(name.endswith(".reserved") for name in spares)
    # No close(): a crash. The next start gives the space back.
    reopened = IndexService(str(index_dir), hash_slot_num=3, index_num=4)
    reopened.load(False, 0)
    assert list(index_dir.iterdir()) == []
    reopened.close()
    service.close()
