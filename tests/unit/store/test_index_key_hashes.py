"""Index-key hashes of a dispatcher run, computed together: the very values of one by one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.store import hashing
from skiff_broker.store.config import StoreConfig
from skiff_broker.store.hashing import index_key_hash, index_key_hashes
from skiff_broker.store.index_file import IndexFile
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore

# Every ASCII code unit, NUL and DEL included: the sums are largest for DEL.
_ASCII = st.characters(min_codepoint=0, max_codepoint=127)


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(min_value=1, max_value=512),
    count=st.integers(min_value=hashing.ARRAY_MIN_KEYS, max_value=300),
    seed=st.text(_ASCII, min_size=1, max_size=8),
)
def test_keys_of_one_length_hash_as_one_by_one(length: int, count: int, seed: str) -> None:
    keys = [(seed + str(i) * length)[:length].rjust(length, "\x7f") for i in range(count)]
    assert index_key_hashes(keys).tolist() == [index_key_hash(k) for k in keys]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=60), min_size=0, max_size=200))
def test_any_keys_hash_as_one_by_one(keys: list[str]) -> None:
    # Mixed lengths, non-ASCII, surrogates, empty keys: whatever path they take.
    assert index_key_hashes(keys).tolist() == [index_key_hash(k) for k in keys]


def test_keys_of_several_lengths_are_hashed_in_groups_as_one_by_one() -> None:
    ids = [f"T#{i:032X}" for i in range(100)]
    orders = [f"T#o-{i:03d}" for i in range(70)]
    # A group with one non-ASCII key is hashed one by one, in its places all the same.
    names = [f"T#name-{i:02d}" for i in range(70)]
    keys = [k for trio in zip(ids, orders, names, strict=False) for k in trio] + ids[70:]
    keys.append("T#name-üü")
    assert len({len(k) for k in [*names, "T#name-üü"]}) == 1
    assert index_key_hashes(keys).tolist() == [index_key_hash(k) for k in keys]


def test_the_largest_units_and_lengths_wrap_as_java_does() -> None:
    # DEL in every place of the longest key hashed as an array: the largest sums.
    keys = ["\x7f" * 512] * 63 + ["\x00" * 511 + "\x7f"]
    assert index_key_hashes(keys).tolist() == [index_key_hash(k) for k in keys]
    # One longer, and the keys are hashed one by one.
    longer = ["\x7f" * 513] * 64
    assert index_key_hashes(longer).tolist() == [index_key_hash(k) for k in longer]


def test_integer_min_value_maps_to_slot_hash_zero_in_arrays_too() -> None:
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE, whose abs() RocketMQ takes as 0.
    keys = ["polygenelubricants"] * 64 + ["polygenelubricantz"] * 64
    hashes = index_key_hashes(keys).tolist()
    assert hashes[:64] == [0] * 64
    assert hashes[64:] == [index_key_hash("polygenelubricantz")] * 64


def test_a_long_run_is_indexed_at_once_and_every_key_finds_its_message(
    store_config: Callable[..., StoreConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[int] = []
    put_keys = IndexFile.put_keys

    def counting(self: IndexFile, hashes: np.ndarray, *rest: np.ndarray) -> int:
        written.append(len(hashes))
        return put_keys(self, hashes, *rest)

    monkeypatch.setattr(IndexFile, "put_keys", counting)
    # Message IDs of one length, and KEYS of other lengths and alphabets in the same run.
    ids = [f"AC11000100002A9F0000{i:012X}" for i in range(200)]
    keys = [f"order-{i}" if i % 3 else f"Bestellung-{i}-Köln" for i in range(200)]
    batch = [
        Message("T", b"body %d" % i, 0, properties={"KEYS": keys[i], "UNIQ_KEY": ids[i]})
        for i in range(200)
    ]
    store = MessageStore(store_config())
    store.start()
    try:
        result = store.put_messages(batch)
        assert result.ok and result.append is not None
        assert store.wait_dispatched(timeout=30)
        # The run's 400 keys went into the file together.
        assert 400 in written
        offsets = result.append.physical_offsets
        for found_by in (ids, keys):
            for key, offset in zip(found_by, offsets, strict=True):
                assert [m.physical_offset for m in store.query_by_key("T", key)] == [offset]
    finally:
        store.shutdown()
