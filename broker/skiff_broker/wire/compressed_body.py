"""Bodies flagged compressed: zlib (what RocketMQ's producers write) or gzip.

Invariant: a body this module accepts inflates completely to at most ``limit``
bytes. Inflation stops one byte past the limit, so a small hostile body (a
"zlib bomb") costs at most ``limit`` bytes of memory, never what it claims.
"""

from __future__ import annotations

import collections
import threading
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


class BodyVerdicts:
    """:func:`compressed_body_problem` of stored records, remembered for the next read.

    A record read by several consumer groups, or delivered again, is inflated
    once while its verdict is remembered. A record is known by its commit-log
    position, body CRC and length (a replica that truncates and rewrites its log
    may put another record at a position; it has another CRC). At most
    ``capacity`` verdicts are kept, the least recently read dropped first.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._verdicts: collections.OrderedDict[tuple[int, int, int, int], str | None] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many verdicts are remembered."""
        return len(self._verdicts)

    def problem(
        self, body: bytes | memoryview, limit: int, *, position: int, body_crc: int
    ) -> str | None:
        """Why the stored ``body`` does not inflate within ``limit``; None if it does."""
        key = (position, body_crc, len(body), limit)
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
        verdict = compressed_body_problem(body, limit)
        with self._lock:
            self._verdicts[key] = verdict
            if len(self._verdicts) > self._capacity:
                self._verdicts.popitem(last=False)
        return verdict
