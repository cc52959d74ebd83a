"""One store append for the SendMessage calls that arrive in the same event-loop turn.

A client with many sends in flight (the official clients' sendAsync, many producer
threads) has many SendMessage calls ready at once. Appending each alone costs one lock
hold, one dispatcher wake-up, one arrival notice and, under SYNC_FLUSH, one group-commit
wait per call; appending them together costs each once per turn.

Invariants:
- A call's messages stay together and in order, and calls keep their arrival order: the
  log holds exactly what separate appends would have written, in the same order.
- Only calls for the same topic share an append (the store's metrics are per topic).
- A shared append is acknowledged like a lone one: each call is answered from the one
  ``PutResult`` (SYNC_FLUSH waits for fsync, SYNC replication for the replicas), with its
  own messages' queue offsets.
- A shared append stays far below a commit-log segment (``batch_bytes_limit``): merging
  never makes a batch too large where the separate ones would have fitted. A call larger
  than the limit on its own is appended alone, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..store.message import Message
from ..store.message_store import MessageStore, PutResult

# Room a record takes beyond its body (header, topic, properties), for the size estimate.
RECORD_OVERHEAD_ESTIMATE = 512
MAX_BATCH_BYTES = 1024 * 1024
SEGMENT_FRACTION = 8


def batch_bytes_limit(segment_bytes: int) -> int:
    return min(MAX_BATCH_BYTES, segment_bytes // SEGMENT_FRACTION)


def _estimate(messages: Sequence[Message]) -> int:
    return sum(len(m.body) + RECORD_OVERHEAD_ESTIMATE for m in messages)


class _Batch:
    __slots__ = ("messages", "size", "waiters")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        # Per call: (its first message's position in the batch, its future).
        self.waiters: list[tuple[int, asyncio.Future[tuple[PutResult, int]]]] = []
        self.size = 0


class SendCoalescer:
    """Collects the calls of one loop turn per topic and appends each topic's once."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._limit = batch_bytes_limit(store.config.commit_log_file_size)
        self._open: dict[str, _Batch] = {}
        self._appending: set[asyncio.Task[None]] = set()  # held so they are not collected

    async def put(self, topic: str, messages: Sequence[Message]) -> tuple[PutResult, int]:
        """Store ``messages``; the result and where this call's first message is in it."""
        size = _estimate(messages)
        if size > self._limit:
            return await self._store.put_messages_async(messages), 0
        batch = self._open.get(topic)
        if batch is not None and batch.size + size > self._limit:
            self._close(topic)
            batch = None
        if batch is None:
            batch = self._open[topic] = _Batch()
            # Runs after every callback already ready in this turn, so the calls woken
            # together land in one batch; a lone call waits no longer than one turn.
            asyncio.get_running_loop().call_soon(self._close_if_open, topic, batch)
        done: asyncio.Future[tuple[PutResult, int]] = asyncio.get_running_loop().create_future()
        batch.waiters.append((len(batch.messages), done))
        batch.messages.extend(messages)
        batch.size += size
        return await done

    def _close_if_open(self, topic: str, batch: _Batch) -> None:
        if self._open.get(topic) is batch:
            self._close(topic)

    def _close(self, topic: str) -> None:
        batch = self._open.pop(topic)
        task = asyncio.get_running_loop().create_task(self._append(batch))
        self._appending.add(task)
        task.add_done_callback(self._appending.discard)

    async def _append(self, batch: _Batch) -> None:
        try:
            result = await self._store.put_messages_async(batch.messages)
        except asyncio.CancelledError:
            for _, done in batch.waiters:
                done.cancel()
            raise
        except Exception as exc:
            for _, done in batch.waiters:
                if not done.done():
                    done.set_exception(exc)
            return
        for first, done in batch.waiters:
            if not done.done():  # its call was cancelled meanwhile
                done.set_result((result, first))
