"""Bodies flagged compressed: zlib (what RocketMQ's producers write) or gzip.

Invariant: a body this module accepts inflates completely to at most ``limit``
bytes. Inflation stops one byte past the limit, so a small hostile body (a
"zlib bomb") costs at most ``limit`` bytes of memory, never what it claims.
"""

from __future__ import annotations

import zlib

# wbits 32 + 15: zlib or gzip framing, recognised from the header.
_AUTO_HEADER = 47


class CompressedBodyError(ValueError):
    """A body flagged compressed that does not inflate, or inflates past the limit."""


def inflate(body: bytes | memoryview, limit: int) -> bytes:
    """The inflated ``body``; raises CompressedBodyError saying what is wrong with it.

    Concatenated gzip members are inflated one after another, as gzip does.
    """
    out: list[bytes] = []
    total = 0
    rest = bytes(body)
    if not rest:
        raise CompressedBodyError("the body is flagged compressed but is empty")
    while rest:
        inflater = zlib.decompressobj(_AUTO_HEADER)
        try:
            chunk = inflater.decompress(rest, limit - total + 1)
        except zlib.error as exc:
            raise CompressedBodyError(
                f"the body is flagged compressed but is not zlib or gzip data ({exc})"
            ) from None
        total += len(chunk)
        if total > limit:
            raise CompressedBodyError(
                f"the body inflates to more than {limit} bytes, the maximum message size"
            )
        out.append(chunk)
        if not inflater.eof:
            raise CompressedBodyError("the body is flagged compressed but its data is cut short")
        rest = inflater.unused_data
    return b"".join(out)


def compressed_body_problem(body: bytes | memoryview, limit: int) -> str | None:
    """Why a body flagged compressed cannot be stored; None if it inflates within ``limit``."""
    try:
        inflate(body, limit)
    except CompressedBodyError as exc:
        return str(exc)
    return None
