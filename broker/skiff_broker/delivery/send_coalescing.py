"""One store append for the SendMessage calls that arrive in the same event-loop turn.

A client with many sends in flight (the official clients' sendAsync, many producer
threads) has many SendMessage calls ready at once. Appending each alone costs one lock
hold, one dispatcher wake-up, one arrival notice and, under SYNC_FLUSH, one group-commit
wait per call; appending them together costs each once per turn.

Invariants:
- A call's messages stay together and in order, and calls keep their arrival order: the
  log holds exactly what separate appends would have written, in the same order.
- Only calls for the same topic share an append (the store's metrics are per topic).
- A shared append is observed like separate ones: each call gets its own append span in
  its own trace and its own latency sample: the store's observer makes each call's
  ``AppendShare`` when the call joins the batch, in the call's context.
- A shared append is acknowledged like a lone one: each call is answered from the one
  ``PutResult`` (SYNC_FLUSH waits for fsync, SYNC replication for the replicas), with its
  own messages' queue offsets.
- A shared append stays far below a commit-log segment (``batch_bytes_limit``): merging
  never makes a batch too large where the separate ones would have fitted. A call larger
  than the limit on its own is appended alone, as before.
- A coalescer serves one running event loop at a time (the broker's): it looks the loop
  up again only once the one it knew stopped running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

from .. import send_timeline
from ..store.message import Message
from ..store.message_store import MessageStore
from ..store.observer import AppendShare
from ..store.results import PutResult

# Room a record takes beyond its body (header, topic, properties), for the size estimate.
RECORD_OVERHEAD_ESTIMATE = 512
MAX_BATCH_BYTES = 1024 * 1024
SEGMENT_FRACTION = 8


def batch_bytes_limit(segment_bytes: int) -> int:
    return min(MAX_BATCH_BYTES, segment_bytes // SEGMENT_FRACTION)


def _estimate(messages: Sequence[Message]) -> int:
    return sum(len(m.body) + RECORD_OVERHEAD_ESTIMATE for m in messages)


class _Batch:
    __slots__ = ("followers", "messages", "shares", "size", "timed")

    def __init__(self, messages: Sequence[Message], size: int, leader: AppendShare) -> None:
        self.messages: list[Message] = list(messages)
        self.shares = [leader]
        # Calls after the first: (their first message's position in the batch, their future).
        self.followers: list[tuple[int, asyncio.Future[tuple[PutResult, int]]]] = []
        self.size = size
        # With send_timeline on: the stamps of the calls in the batch.
        self.timed: list[send_timeline.Stamps] = []


class SendCoalescer:
    """Collects the calls of one loop turn per topic and appends each topic's once.

    The turn's first call is appended at once (a lone producer waits for nothing). A
    second call in the same turn leads a batch: it yields one turn (every call already
    woken runs meanwhile and joins it), then appends the batch and answers the others.
    """

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._limit = batch_bytes_limit(store.config.commit_log_file_size)
        self._open: dict[str, _Batch] = {}
        # A call was appended alone in this loop turn: the next one leads a batch.
        self._turn_busy = False
        self._appending: set[asyncio.Task[PutResult]] = set()  # held so they are not collected
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        # Kept: each asyncio.get_running_loop() costs a getpid() system call, twice a send.
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    async def put(self, topic: str, messages: Sequence[Message]) -> tuple[PutResult, int]:
        """Store ``messages``; the result and where this call's first message is in it."""
        if send_timeline.ON:
            send_timeline.stamp(send_timeline.CHECKED)
        size = _estimate(messages)
        if size > self._limit:
            return await self._put(messages), 0
        batch = self._open.get(topic)
        if batch is not None and batch.size + size <= self._limit:
            done = self._running_loop().create_future()
            if send_timeline.ON:
                _join_timed(batch)
            batch.followers.append((len(batch.messages), done))
            batch.shares.append(self._store.share(len(batch.messages), len(messages)))
            batch.messages.extend(messages)
            batch.size += size
            return await done
        if not self._turn_busy:
            self._turn_busy = True
            self._running_loop().call_soon(self._end_turn)
            return await self._put(messages), 0
        batch = self._open[topic] = _Batch(messages, size, self._store.share(0, len(messages)))
        if send_timeline.ON:
            _join_timed(batch)
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            # Appended all the same, as a lone call's messages always were once received.
            self._start_append(topic, batch)
            raise
        if not batch.followers:
            self._seal(topic, batch)
            return await self._put(batch.messages), 0
        # In a task of its own: if this call is cancelled, the others' answers still come.
        return await asyncio.shield(self._start_append(topic, batch)), 0

    def _put(self, messages: Sequence[Message]) -> Awaitable[PutResult]:
        # Off, the store's coroutine itself: no frame more on the hot path.
        if send_timeline.ON:
            return self._put_timed(messages)
        return self._store.put_messages_async(messages)

    async def _put_timed(self, messages: Sequence[Message]) -> PutResult:
        stamps = send_timeline.current()
        timed = [] if stamps is None else [stamps]
        send_timeline.stamp_append(timed, send_timeline.APPENDING)
        result = await self._store.put_messages_async(messages)
        send_timeline.stamp_append(timed, send_timeline.STORED)
        return result

    def _end_turn(self) -> None:
        self._turn_busy = False

    def _seal(self, topic: str, batch: _Batch) -> None:
        if self._open.get(topic) is batch:
            del self._open[topic]

    def _start_append(self, topic: str, batch: _Batch) -> asyncio.Task[PutResult]:
        self._seal(topic, batch)
        task = self._running_loop().create_task(self._append(batch))
        self._appending.add(task)
        task.add_done_callback(self._appending.discard)
        return task

    async def _append(self, batch: _Batch) -> PutResult:
        if send_timeline.ON:
            send_timeline.stamp_append(batch.timed, send_timeline.APPENDING)
        try:
            result = await self._store.put_messages_async(batch.messages, batch.shares)
        except BaseException as exc:
            for _, done in batch.followers:
                if done.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    done.cancel()
                else:
                    done.set_exception(exc)
            raise
        if send_timeline.ON:
            send_timeline.stamp_append(batch.timed, send_timeline.STORED)
        for first, done in batch.followers:
            if not done.done():  # its call was cancelled meanwhile
                done.set_result((result, first))
        return result


def _join_timed(batch: _Batch) -> None:
    stamps = send_timeline.current()
    if stamps is not None:
        batch.timed.append(stamps)
