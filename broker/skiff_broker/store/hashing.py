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


# Batches of ASCII keys of one length are hashed in lanes (see index_key_hashes): below
# this many keys a lane pass costs more than hashing each key; above this length a
# lane's sum could pass 2**32 (length * 127 * 0xFFFF must stay below it).
LANE_MIN_KEYS = 64
_LANE_MAX_LENGTH = 512
_POWERS_LOW = tuple(p & 0xFFFF for p in _POWERS)
_POWERS_HIGH = tuple(p >> 16 for p in _POWERS)


def index_key_hashes(keys: Sequence[str]) -> list[int]:
    """:func:`index_key_hash` of each of ``keys``, in order, computed together.

    The dispatcher indexes a key per message, mostly ``topic#message-id``: ASCII keys of
    one length. Such keys are hashed at once, each in a 32-bit lane of a big integer,
    one column of characters at a time, so Python's big-integer arithmetic does the
    multiply-adds for every key in C. Keys of other lengths (a message's KEYS) are
    grouped by length the same way; a group too small, too long or not ASCII is hashed
    one key at a time.
    """
    if len(keys) < LANE_MIN_KEYS:
        return [index_key_hash(k) for k in keys]
    length = len(keys[0])
    if all(len(k) == length for k in keys):
        return _hashes_of_one_length(keys, length)
    by_length: dict[int, list[int]] = {}
    for position, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(position)
    hashes = [0] * len(keys)
    for length, positions in by_length.items():
        group = [keys[p] for p in positions]
        for position, value in zip(positions, _hashes_of_one_length(group, length), strict=True):
            hashes[position] = value
    return hashes


def _hashes_of_one_length(keys: Sequence[str], length: int) -> list[int]:
    if len(keys) >= LANE_MIN_KEYS and length <= _LANE_MAX_LENGTH:
        joined = "".join(keys)
        if joined.isascii():
            return _lane_hashes(joined, len(keys), length)
    return [index_key_hash(k) for k in keys]


def _lane_hashes(joined: str, count: int, length: int) -> list[int]:
    """The index hashes of ``count`` ASCII keys of ``length`` characters, ``joined``.

    Java's hash is the sum of ``unit[i] * 31**(length-1-i)`` mod 2**32. Each power is
    split into its low and high 16 bits, so that a lane's two sums of
    ``unit * half-power`` stay below 2**32 and never carry into the next lane; the
    halves are put back together per key at the end.
    """
    # One 32-bit little-endian unit per character: key k's character i is unit
    # k * length + i, and slicing with step ``length`` takes column i of every key.
    units = memoryview(joined.encode("utf-32-le")).cast("I")
    first = _POWERS_LEN - length
    low = high = 0
    for i in range(length):
        column = int.from_bytes(units[i::length].tobytes(), "little")
        low += column * _POWERS_LOW[first + i]
        high += column * _POWERS_HIGH[first + i]
    lanes = f"<{count}I"
    lows = struct.unpack(lanes, low.to_bytes(4 * count, "little"))
    highs = struct.unpack(lanes, high.to_bytes(4 * count, "little"))
    # abs() of the signed value, with Integer.MIN_VALUE (0x80000000) mapped to 0.
    return [
        h if h < 0x80000000 else ((1 << 32) - h) & 0x7FFFFFFF
        for h in ((a + (b << 16)) & _MASK32 for a, b in zip(lows, highs, strict=True))
    ]
