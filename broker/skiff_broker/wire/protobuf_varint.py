"""Protobuf's base-128 varint, for the requests Skiff writes in wire form itself.

Invariant: ``varint(n)`` is the bytes protobuf writes for ``n`` as a length, a field key,
or an ``int64``/``uint64`` value: seven bits a byte, least significant first, the high
bit set on every byte but the last; a negative ``int64`` is its 64-bit two's complement
(ten bytes).
"""

from __future__ import annotations

# Lengths and field keys are mostly below 128: one byte, made once.
_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
