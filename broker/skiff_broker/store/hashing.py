"""Java ``String.hashCode`` for tag codes and index keys.

RocketMQ stores ``tags.hashCode()`` in the ConsumeQueue and ``abs(key.hashCode())``
in the IndexFile; computing the same values keeps those files comparable with a
RocketMQ store's.

Invariant: :func:`index_key_hashes` returns exactly what :func:`index_key_hash` returns
for each key; only the cost differs.
"""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Sequence

import numpy as np

_MASK32 = 0xFFFFFFFF
_POWERS_LEN = 512
# _POWERS[-n:] holds 31**(n-1) … 31**0 (mod 2**32): one multiply-add per character.
_POWERS = tuple(pow(31, k, 1 << 32) for k in range(_POWERS_LEN - 1, -1, -1))
# Those slices by length, made once: keys of one kind (message IDs) share a length, and
# the dispatcher hashes one per message.
_POWERS_BY_LEN: dict[int, tuple[int, ...]] = {}


def _code_units(s: str) -> bytes | tuple[int, ...]:
    if s.isascii():
        return s.encode("ascii")
    # Java hashes any UTF-16 sequence, lone surrogates included.
    raw = s.encode("utf-16-be", "surrogatepass")
    return struct.unpack(f">{len(raw) // 2}H", raw)


def java_string_hash(s: str) -> int:
    """``s.hashCode()`` as Java computes it: a signed 32-bit integer."""
    units = _code_units(s)
    n = len(units)
    if n <= _POWERS_LEN:
        powers = _POWERS_BY_LEN.get(n)
        if powers is None:
            powers = _POWERS_BY_LEN[n] = _POWERS[_POWERS_LEN - n :]
        h = sum(map(operator.mul, units, powers)) & _MASK32
    else:
        h = 0
        for unit in units:
            h = (31 * h + unit) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=4096)
def tag_hash(tag: str) -> int:
    """The ConsumeQueue tag code of a tag (0 when the message has none)."""
    return java_string_hash(tag) if tag else 0


def index_key_hash(key: str) -> int:
    """The IndexFile slot hash: ``abs(hashCode)``, with Integer.MIN_VALUE mapped to 0."""
    h = java_string_hash(key)
    return 0 if h == -(1 << 31) else abs(h)


# Keys hashed together (index_key_hashes) are hashed as arrays: below this many keys the
# arrays cost more than hashing each key; longer keys than the table of powers, one by one.
ARRAY_MIN_KEYS = 16
_POWERS_ARRAY = np.array(_POWERS, dtype=np.uint32)


def index_key_hashes(keys: Sequence[str]) -> np.ndarray:
    """:func:`index_key_hash` of each of ``keys``, in order, computed together (int64).

    The dispatcher indexes a key per message, mostly ``topic#message-id``: ASCII keys of
    one length. Such keys are hashed at once, as a matrix of their characters: each
    row times the powers of 31, summed with 32-bit unsigned arithmetic, which wraps
    exactly as Java's int does. Keys of other lengths (a message's KEYS) are grouped by
    length the same way; a group too small, too long or not ASCII is hashed one key at
    a time.
    """
    if len(keys) < ARRAY_MIN_KEYS:
        return np.array([index_key_hash(k) for k in keys], dtype=np.int64)
    length = len(keys[0])
    if all(len(k) == length for k in keys):
        return _hashes_of_one_length(keys, length)
    by_length: dict[int, list[int]] = {}
    for position, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(position)
    hashes = np.empty(len(keys), dtype=np.int64)
    for length, positions in by_length.items():
        hashes[positions] = _hashes_of_one_length([keys[p] for p in positions], length)
    return hashes


def _hashes_of_one_length(keys: Sequence[str], length: int) -> np.ndarray:
    if len(keys) >= ARRAY_MIN_KEYS and 0 < length <= _POWERS_LEN:
        joined = "".join(keys)
        if joined.isascii():
            units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(-1, length)
            sums = (units * _POWERS_ARRAY[_POWERS_LEN - length :]).sum(axis=1, dtype=np.uint32)
            # abs() of the signed value, with Integer.MIN_VALUE mapped to 0.
            hashes = np.abs(sums.view(np.int32).astype(np.int64))
            hashes[hashes == 1 << 31] = 0
            return hashes
    return np.array([index_key_hash(k) for k in keys], dtype=np.int64)
