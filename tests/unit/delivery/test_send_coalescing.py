"""SendMessage calls of one event-loop turn share one append of a real store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from tests.support.store_settings import small_store

from skiff_broker.delivery.send_coalescing import SendCoalescer, batch_bytes_limit
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.observer import AppendScope, AppendShare, StoreObserver
from skiff_broker.store.results import PutStatus


class CountingObserver(StoreObserver):
    def __init__(self) -> None:
        self.appends: list[tuple[str, int]] = []

    def append(self, topic: str, queue_id: int | None, count: int, flush_type: str) -> AppendScope:
        self.appends.append((topic, count))
        return super().append(topic, queue_id, count, flush_type)

    def shared_append(
        self,
        topic: str,
        shares: Sequence[AppendShare],
        messages: Sequence[Message],
        flush_type: str,
    ) -> AppendScope:
        self.appends.extend((topic, share.count) for share in shares)
        return super().shared_append(topic, shares, messages, flush_type)


def _store(tmp_path: Path, observer: StoreObserver, **overrides: object) -> MessageStore:
    settings = {
        "data_dir": str(tmp_path / "store"),
        **small_store(commit_log_file_size=256 * 1024),
        **overrides,
    }
    config = StoreConfig(**settings)
    config.validate()
    return MessageStore(config, observer=observer)


def _call(topic: str, queue_id: int, *bodies: str) -> list[Message]:
    return [Message(topic=topic, body=b.encode(), queue_id=queue_id) for b in bodies]


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    got = store.get_messages(topic, queue_id, 0, 100)
    return [m.body for m in got.messages]


@pytest.mark.parametrize("flush_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_calls_of_one_turn_are_one_append_with_each_call_answered_for_its_own(
    tmp_path: Path, flush_type: str
) -> None:
    observer = CountingObserver()

    async def run() -> list:
        with _store(tmp_path, observer, flush_type=FlushType[flush_type]) as store:
            coalescer = SendCoalescer(store)
            answers = await asyncio.gather(
                coalescer.put("t", _call("t", 0, "a1", "a2")),
                coalescer.put("t", _call("t", 1, "b1")),
                coalescer.put("t", _call("t", 0, "c1", "c2", "c3")),
                coalescer.put("other", _call("other", 0, "d1")),
            )
            assert store.wait_dispatched()
            return [answers, _bodies(store, "t", 0), _bodies(store, "t", 1)]

    answers, queue0, queue1 = asyncio.run(run())
    # The turn's first call alone (nothing waits for a lone call), then one per topic:
    # the second and third calls were answered from one append.
    results = [result for result, _ in answers]
    assert results[1] is results[2]
    assert len({id(r) for r in results}) == 3
    # Observed per call all the same, each with its own message count.
    assert sorted(observer.appends) == [("other", 1), ("t", 1), ("t", 2), ("t", 3)]
    for result in results:
        assert result.status is PutStatus.PUT_OK
    offsets = [
        [result.append.queue_offsets[first + i] for i in range(n)]
        for (result, first), n in zip(answers, (2, 1, 3, 1), strict=True)
    ]
    # Each call gets its own messages' queue offsets, in the order the calls came.
    assert offsets == [[0, 1], [0], [2, 3, 4], [0]]
    assert queue0 == [b"a1", b"a2", b"c1", b"c2", b"c3"]
    assert queue1 == [b"b1"]


def test_calls_one_turn_apart_are_appended_alone(tmp_path: Path) -> None:
    observer = CountingObserver()

    async def run() -> None:
        with _store(tmp_path, observer) as store:
            coalescer = SendCoalescer(store)
            await coalescer.put("t", _call("t", 0, "first"))
            await coalescer.put("t", _call("t", 0, "second"))

    asyncio.run(run())
    assert observer.appends == [("t", 1), ("t", 1)]


def test_batches_stay_far_below_a_segment(tmp_path: Path) -> None:
    observer = CountingObserver()
    segment = 256 * 1024
    body = "x" * 10_000
    calls = 20  # 200 KB together: more than a batch may hold in a 256 KiB segment

    async def run() -> None:
        with _store(tmp_path, observer) as store:
            coalescer = SendCoalescer(store)
            answers = await asyncio.gather(
                *(coalescer.put("t", _call("t", 0, body)) for _ in range(calls))
            )
            assert all(result.status is PutStatus.PUT_OK for result, _ in answers)

    asyncio.run(run())
    counts = [count for _, count in observer.appends]
    assert sum(counts) == calls
    assert len(counts) > 1
    assert max(counts) * (len(body) + 512) <= batch_bytes_limit(segment)


def test_a_cancelled_first_call_still_leaves_the_others_answered_and_stored(
    tmp_path: Path,
) -> None:
    observer = CountingObserver()

    async def run() -> tuple[list[bytes], object]:
        with _store(tmp_path, observer) as store:
            coalescer = SendCoalescer(store)
            alone = asyncio.create_task(coalescer.put("t", _call("t", 0, "alone")))
            leader = asyncio.create_task(coalescer.put("t", _call("t", 0, "cancelled")))
            follower = asyncio.create_task(coalescer.put("t", _call("t", 0, "kept")))
            await asyncio.sleep(0)  # all three ran: the leader waits for the turn to end
            leader.cancel()
            await alone
            # Without the leader's append this would wait forever.
            result, position = await asyncio.wait_for(follower, 10)
            assert store.wait_dispatched()
            return _bodies(store, "t", 0), (result.status, result.append.queue_offsets[position])

    bodies, answer = asyncio.run(run())
    # A received message is stored even if its caller went away, as before batching.
    assert bodies == [b"alone", b"cancelled", b"kept"]
    assert answer == (PutStatus.PUT_OK, 2)
