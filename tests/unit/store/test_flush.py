"""Flushing through the MessageStore: group commit (SYNC_FLUSH), interval flush
(ASYNC_FLUSH) and the transient store pool, with real threads, files and fdatasync."""

from __future__ import annotations

import asyncio
import collections
import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.store_settings import small_store
from tests.support.waiting import wait_for

from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.message import Message
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.results import GetStatus, PutResult, PutStatus, StoreStats

APPENDERS = 64
PUTS_EACH = 8
TOPIC = "flush-test"
GROUP_COMMIT_THREAD = "group-commit"
# About what one fdatasync takes on a disk; see the fdatasync_calls fixture.
DISK_FLUSH_S = 0.005


def make_config(tmp_path: Path, **overrides: Any) -> StoreConfig:
    # 64 KiB segments: the runs below roll several.
    settings = {
        "data_dir": str(tmp_path / "store"),
        **small_store(commit_log_file_size=64 * 1024, **overrides),
    }
    config = StoreConfig(**settings)
    config.validate()
    return config


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """``open_store(**overrides)`` -> a started store, shut down after the test."""
    stores: list[MessageStore] = []

    def start(**overrides: Any) -> MessageStore:
        store = MessageStore(make_config(tmp_path, **overrides))
        store.start()
        stores.append(store)
        return store

    yield start
    for store in stores:
        store.shutdown()


def body(appender: int, n: int, repeat: int = 4) -> bytes:
    return f"appender {appender} message {n} ".encode() * repeat


def message(appender: int, n: int, repeat: int = 4) -> Message:
    return Message(TOPIC, body(appender, n, repeat), queue_id=appender % 8)


def read_all(store: MessageStore, queue_ids: range = range(8)) -> dict[int, list[bytes]]:
    """Every body in each queue, in queue order."""
    assert store.wait_dispatched(10)
    found = {}
    for queue_id in queue_ids:
        got = store.get_messages(TOPIC, queue_id, 0, 100_000, max_bytes=2**30)
        found[queue_id] = [m.body for m in got.messages]
    return found


def expected_per_queue(appenders: int, puts_each: int) -> dict[int, set[bytes]]:
    expected: dict[int, set[bytes]] = collections.defaultdict(set)
    for a in range(appenders):
        for n in range(puts_each):
            expected[a % 8].add(body(a, n))
    return expected


def fully_flushed(store: MessageStore) -> bool:
    s = store.stats()
    return s.flushed_offset == s.committed_offset == s.wrote_offset > 0


@pytest.fixture
def fdatasync_calls(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Counts real fdatasync calls per thread name; every call still goes to the disk.

    Each call also takes as long as a disk's flush (DISK_FLUSH_S): on this machine's
    page cache fdatasync returns in microseconds, and then whether a second appender
    arrives during a flush, which is what group commit is about, depends on how the
    scheduler happened to run the threads (a loaded CI machine once saw 266 flushes for
    512 puts).
    """
    calls: collections.Counter[str] = collections.Counter()
    real = os.fdatasync

    def counting(fd: int) -> None:
        calls[threading.current_thread().name] += 1
        real(fd)
        time.sleep(DISK_FLUSH_S)

    monkeypatch.setattr(os, "fdatasync", counting)
    return calls


# -- SYNC_FLUSH: group commit ----------------------------------------------------------


def check_group_commit_run(
    store: MessageStore,
    results: list[tuple[PutResult, int]],
    calls: collections.Counter[str],
) -> None:
    total = APPENDERS * PUTS_EACH
    assert len(results) == total
    for result, flushed_on_return in results:
        assert result.status is PutStatus.PUT_OK, result.reason
        assert result.append is not None
        # A put returns only once its records are on disk.
        assert flushed_on_return >= result.append.next_offset
    stats = store.stats()
    assert stats.flushed_offset == stats.commit_log_max_offset == stats.wrote_offset
    assert stats.wrote_offset == max(r.append.next_offset for r, _ in results if r.append)
    # Group commit: one fdatasync covers many waiters. Counted two ways: the
    # store's own figure and the real calls made by the group-commit thread.
    assert 1 <= stats.fsync_count <= total // 2
    assert 1 <= calls[GROUP_COMMIT_THREAD] <= total // 2
    found = read_all(store)
    for queue_id, bodies in expected_per_queue(APPENDERS, PUTS_EACH).items():
        assert sorted(found[queue_id]) == sorted(bodies)


def test_group_commit_with_64_appender_threads(
    open_store: Callable[..., MessageStore], fdatasync_calls: collections.Counter[str]
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    results: list[tuple[PutResult, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(APPENDERS)

    def appender(a: int) -> None:
        start.wait()
        for n in range(PUTS_EACH):
            result = store.put_messages([message(a, n)])
            flushed = store.stats().flushed_offset
            with lock:
                results.append((result, flushed))

    threads = [threading.Thread(target=appender, args=(a,)) for a in range(APPENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check_group_commit_run(store, results, fdatasync_calls)


def test_group_commit_with_64_asyncio_tasks(
    open_store: Callable[..., MessageStore], fdatasync_calls: collections.Counter[str]
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)

    async def appender(a: int) -> list[tuple[PutResult, int]]:
        out = []
        for n in range(PUTS_EACH):
            result = await store.put_messages_async([message(a, n)])
            out.append((result, store.stats().flushed_offset))
        return out

    async def run() -> list[tuple[PutResult, int]]:
        per_task = await asyncio.gather(*(appender(a) for a in range(APPENDERS)))
        return [r for task in per_task for r in task]

    check_group_commit_run(store, asyncio.run(run()), fdatasync_calls)


def put(store: MessageStore, msg: Message, mode: str) -> PutResult:
    if mode == "thread":
        return store.put_messages([msg])
    return asyncio.run(store.put_messages_async([msg]))


@pytest.mark.parametrize("mode", ["thread", "asyncio"])
def test_failed_flush_is_reported_and_later_puts_are_refused(
    open_store: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    before = put(store, message(0, 0), mode)
    assert before.status is PutStatus.PUT_OK
    assert before.append is not None

    real = os.fdatasync

    def failing(fd: int) -> None:
        # A real EIO from fdatasync (a failing disk) cannot be produced on this
        # machine, so the group-commit thread's calls raise it instead; every other
        # thread still reaches the disk.
        if threading.current_thread().name == GROUP_COMMIT_THREAD:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    during = put(store, message(0, 1), mode)
    assert during.status is PutStatus.FLUSH_DISK_TIMEOUT  # never PUT_OK
    assert "flushing the commit log failed" in during.reason
    assert os.strerror(errno.EIO) in during.reason
    assert "may not be on disk" in during.reason

    for later_mode in ("thread", "asyncio"):
        later = put(store, message(0, 2), later_mode)
        assert later.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "flushing the commit log failed" in later.reason
        assert "restarted" in later.reason
        assert later.append is None  # refused before anything was written
    stats = store.stats()
    assert not stats.writable
    assert "flushing the commit log failed" in stats.refusal
    # Nothing written after the failure is claimed to be on disk.
    assert stats.flushed_offset == before.append.next_offset


@pytest.mark.parametrize("mode", ["thread", "asyncio"])
def test_failed_commit_log_write_is_reported_and_later_puts_are_refused(
    open_store: Callable[..., MessageStore],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """A batch large enough to be written with pwrite meets a disk that fails the write:
    it is refused, so is every later put, and after a restart the log holds exactly
    what was acknowledged before."""
    store = open_store(flush_type=FlushType.SYNC_FLUSH)
    before = put(store, message(0, 0), mode)
    assert before.status is PutStatus.PUT_OK

    def failing(fd: int, data: Any, pos: int) -> int:
        # A real EIO needs a failing disk; the commit log's writes raise the one it would.
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "pwrite", failing)
    large = [message(0, n, repeat=100) for n in range(1, 20)]  # about 40 KiB
    if mode == "thread":
        during = store.put_messages(large)
    else:
        during = asyncio.run(store.put_messages_async(large))
    monkeypatch.undo()
    assert during.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "writing the commit log failed" in during.reason
    assert os.strerror(errno.EIO) in during.reason
    later = put(store, message(0, 30), mode)
    assert later.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "restarted" in later.reason
    assert not store.stats().writable

    store.shutdown()
    again = open_store(flush_type=FlushType.SYNC_FLUSH)
    assert read_all(again, range(1)) == {0: [body(0, 0)]}
    assert put(again, message(0, 31), mode).status is PutStatus.PUT_OK


@pytest.mark.parametrize("mode", ["thread", "asyncio"])
def test_flush_slower_than_the_timeout_gives_flush_disk_timeout(
    open_store: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    store = open_store(flush_type=FlushType.SYNC_FLUSH, sync_flush_timeout=0.2)
    real = os.fdatasync

    def slow(fd: int) -> None:
        # A disk slower than the flush timeout cannot be produced on demand here, so
        # the group-commit thread's fdatasync is held past it, then really runs.
        if threading.current_thread().name == GROUP_COMMIT_THREAD:
            time.sleep(1.0)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow)
    result = put(store, message(0, 0), mode)
    assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert "did not finish within 0.2s" in result.reason
    assert result.append is not None
    # The message is written, and the slow flush does finish.
    wait_for(
        lambda: store.stats().flushed_offset >= result.append.next_offset,
        "the flush to pass the put",
    )
    assert read_all(store, range(1))[0] == [body(0, 0)]

    # A timeout is not a failure: with a healthy disk again, puts succeed.
    monkeypatch.setattr(os, "fdatasync", real)
    again = put(store, message(0, 1), mode)
    assert again.status is PutStatus.PUT_OK, again.reason
    assert store.stats().writable


# -- ASYNC_FLUSH ----------------------------------------------------------------------


def test_async_puts_do_not_wait_for_the_flush(
    tmp_path: Path, open_store: Callable[..., MessageStore]
) -> None:
    # The flusher's first pass is a minute away: nothing can be flushed meanwhile.
    store = open_store(flush_interval_commit_log=60.0, flush_commit_log_thorough_interval=60.0)
    for n in range(20):
        result = store.put_messages([message(0, n)])
        assert result.status is PutStatus.PUT_OK, result.reason
    stats = store.stats()
    assert stats.flushed_offset == 0 < stats.wrote_offset
    # Readable at once, before any flush.
    assert read_all(store, range(1))[0] == [body(0, n) for n in range(20)]
    store.shutdown()  # a clean stop flushes everything
    reopened = open_store(flush_interval_commit_log=60.0)
    assert reopened.stats().flushed_offset == stats.wrote_offset
    assert read_all(reopened, range(1))[0] == [body(0, n) for n in range(20)]


def test_async_flush_runs_in_the_background(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(flush_interval_commit_log=0.02, flush_commit_log_least_pages=0)
    for n in range(500):
        assert store.put_messages([message(n % 8, n, repeat=10)]).ok
    wait_for(lambda: fully_flushed(store), "every written byte flushed")
    assert store.stats().flushed_offset > 2 * 64 * 1024  # across segment boundaries


def test_thorough_flush_flushes_below_least_pages(
    open_store: Callable[..., MessageStore],
) -> None:
    # Far fewer dirty pages than least_pages: only the thorough flush can write them.
    store = open_store(
        flush_interval_commit_log=0.02,
        flush_commit_log_least_pages=10_000,
        flush_commit_log_thorough_interval=0.2,
    )
    for n in range(5):
        assert store.put_messages([message(0, n)]).ok
    assert store.stats().wrote_offset < 4096
    wait_for(lambda: fully_flushed(store), "every written byte flushed")


# -- transient store pool ----------------------------------------------------------------


def test_pool_data_is_readable_only_once_committed(
    open_store: Callable[..., MessageStore],
) -> None:
    # The commit service's first pass is a minute away.
    store = open_store(
        transient_store_pool_enable=True,
        transient_store_pool_size=2,
        commit_interval_commit_log=60.0,
        commit_commit_log_thorough_interval=60.0,
    )
    result = store.put_messages([message(0, 0)])
    assert result.status is PutStatus.PUT_OK
    stats = store.stats()
    assert stats.wrote_offset > 0
    assert stats.committed_offset == stats.commit_log_max_offset == stats.flushed_offset == 0
    # Still in the write buffer, so not dispatched either.
    assert not store.wait_dispatched(0.5)
    assert store.get_messages(TOPIC, 0, 0, 10).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert result.append is not None
    assert store.get_message_at(result.append.wrote_offset, result.append.wrote_bytes) is None
    store.shutdown()  # a clean stop commits and flushes the write buffer

    reopened = open_store(transient_store_pool_enable=True, transient_store_pool_size=2)
    assert read_all(reopened, range(1))[0] == [body(0, 0)]


def test_pool_commits_in_the_background(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(
        transient_store_pool_enable=True,
        transient_store_pool_size=2,
        commit_interval_commit_log=0.02,
        commit_commit_log_least_pages=0,
        flush_interval_commit_log=0.02,
        flush_commit_log_least_pages=0,
    )
    for n in range(300):  # several segments, more than the pool's two buffers
        assert store.put_messages([message(n % 8, n)]).ok
    expected: dict[int, list[bytes]] = collections.defaultdict(list)
    for n in range(300):
        expected[n % 8].append(body(n % 8, n))
    wait_for(lambda: read_all(store) == expected, "every put readable")
    wait_for(lambda: fully_flushed(store), "every written byte flushed")


def ordered(s: StoreStats) -> bool:
    return 0 <= s.flushed_offset <= s.committed_offset <= s.wrote_offset


@pytest.mark.parametrize("pool", [True, False], ids=["pool", "direct"])
def test_positions_keep_their_order_while_appending_concurrently(
    open_store: Callable[..., MessageStore], pool: bool
) -> None:
    store = open_store(
        transient_store_pool_enable=pool,
        transient_store_pool_size=2,
        commit_interval_commit_log=0.002,
        commit_commit_log_least_pages=1,
        commit_commit_log_thorough_interval=0.02,
        flush_interval_commit_log=0.002,
        flush_commit_log_least_pages=1,
        flush_commit_log_thorough_interval=0.02,
    )
    appenders, puts_each = 4, 1000
    samples: list[StoreStats] = []
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            samples.append(store.stats())

    failures: list[PutResult] = []

    def appender(a: int) -> None:
        for n in range(puts_each):
            result = store.put_messages([message(a, n, repeat=8)])
            if not result.ok:
                failures.append(result)

    watcher = threading.Thread(target=sampler)
    watcher.start()
    threads = [threading.Thread(target=appender, args=(a,)) for a in range(appenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_for(lambda: fully_flushed(store), "every written byte flushed")
    done.set()
    watcher.join()

    assert failures == []
    assert len(samples) > 10
    bad = [s for s in samples if not ordered(s)]
    assert bad == [], f"{len(bad)} of {len(samples)} samples out of order, e.g. {bad[0]}"
    # Each position only grows.
    for field in ("wrote_offset", "committed_offset", "flushed_offset"):
        values = [getattr(s, field) for s in samples]
        assert values == sorted(values), field
    assert store.stats().wrote_offset > 10 * 64 * 1024  # many segment rolls
    found = read_all(store, range(appenders))
    for a in range(appenders):
        assert found[a] == [body(a, n, repeat=8) for n in range(puts_each)]
