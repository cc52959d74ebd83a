"""Index-key hashes of a dispatcher run, computed together: the very values of one by one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.store.hashing import index_key_hash, index_key_hashes

# Every ASCII code unit, NUL and DEL included: a lane's sums are largest for DEL.
_ASCII = st.characters(min_codepoint=0, max_codepoint=127)


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(min_value=1, max_value=512),
    count=st.integers(min_value=64, max_value=300),
    seed=st.text(_ASCII, min_size=1, max_size=8),
)
def test_keys_of_one_length_hash_as_one_by_one(length: int, count: int, seed: str) -> None:
    keys = [(seed + str(i) * length)[:length].rjust(length, "\x7f") for i in range(count)]
    assert index_key_hashes(keys) == [index_key_hash(k) for k in keys]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=60), min_size=0, max_size=200))
def test_any_keys_hash_as_one_by_one(keys: list[str]) -> None:
    # Mixed lengths, non-ASCII, surrogates, empty keys: whatever path they take.
    assert index_key_hashes(keys) == [index_key_hash(k) for k in keys]


def test_the_largest_units_and_lengths_stay_in_their_lanes() -> None:
    # DEL in every place of the longest lane key: the largest sums a lane can hold.
    keys = ["\x7f" * 512] * 63 + ["\x00" * 511 + "\x7f"]
    assert index_key_hashes(keys) == [index_key_hash(k) for k in keys]
    # One longer, and the keys are hashed one by one.
    longer = ["\x7f" * 513] * 64
    assert index_key_hashes(longer) == [index_key_hash(k) for k in longer]


def test_integer_min_value_maps_to_slot_hash_zero_in_lanes_too() -> None:
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE, whose abs() RocketMQ takes as 0.
    keys = ["polygenelubricants"] * 64 + ["polygenelubricantz"] * 64
    hashes = index_key_hashes(keys)
    assert hashes[:64] == [0] * 64
    assert hashes[64:] == [index_key_hash("polygenelubricantz")] * 64
