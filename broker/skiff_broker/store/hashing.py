"""Java ``String.hashCode`` for tag codes and index keys.

RocketMQ stores ``tags.hashCode()`` in the ConsumeQueue and ``abs(key.hashCode())``
in the IndexFile; computing the same values keeps those files comparable with a
RocketMQ store's.
"""

from __future__ import annotations

import functools
import operator
import struct

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
