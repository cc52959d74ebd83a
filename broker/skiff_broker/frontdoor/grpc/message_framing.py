"""gRPC's length-prefixed messages (a flag octet, a 4-octet length, the message), cut from
a stream's DATA as it arrives.

Invariants:
- A message is handed out whole, once, in order; its octets are joined once, however many
  frames carried them (no copying of what came before on every frame).
- A length over the limit is refused as soon as its prefix is read, before the message's
  octets are held.
"""

from __future__ import annotations

import collections
import struct

PREFIX = struct.Struct(">BI")


class MessageTooLarge(Exception):
    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length


class MessageReader:
    """Cuts messages from chunks of a stream's data."""

    __slots__ = ("_chunks", "_flags", "_length", "_limit", "buffered")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: collections.deque[bytes] = collections.deque()
        # Octets held: of the message being read (past its prefix), or of a partial prefix.
        self.buffered = 0
        self._flags = 0
        # The length the current prefix announced; -1 while the prefix is incomplete.
        self._length = -1

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The (flags, message) pairs ``data`` completes; MessageTooLarge past the limit."""
        if data:
            self._chunks.append(data)
            self.buffered += len(data)
        done: list[tuple[int, bytes]] = []
        while True:
            if self._length < 0:
                if self.buffered < PREFIX.size:
                    return done
                flags, length = PREFIX.unpack(self._take(PREFIX.size))
                if length > self._limit:
                    raise MessageTooLarge(length)
                self._flags, self._length = flags, length
            if self.buffered < self._length:
                return done
            done.append((self._flags, self._take(self._length)))
            self._length = -1

    @property
    def length(self) -> int:
        """The length the current message's prefix announced (-1: no prefix read yet)."""
        return self._length

    @property
    def awaited(self) -> int:
        """Octets still to come of the message being read (0 when between messages)."""
        return self._length - self.buffered if self._length >= 0 else 0

    @property
    def between_messages(self) -> bool:
        return self._length < 0 and not self.buffered

    def _take(self, size: int) -> bytes:
        if not size:
            return b""
        chunks = self._chunks
        first = chunks[0]
        self.buffered -= size
        if len(first) == size:
            chunks.popleft()
            return first
        if len(first) > size:
            chunks[0] = first[size:]
            return first[:size]
        joined = b"".join(chunks)
        chunks.clear()
        if len(joined) == size:
            return joined
        chunks.append(joined[size:])
        return joined[:size]
