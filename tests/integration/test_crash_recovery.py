"""Crash tests with real processes: a writer is killed with SIGKILL at random points.

Each round starts tests/integration/crash_writer.py on the same data directory,
lets it append for a random short time and kills it. The store is then opened in
this process, which recovers it the way a broker restarting after a crash would
(the writer's ``abort`` file is still there), and checked against what the
writer acknowledged. The rounds use one seeded ``random.Random``; the seed is
printed first, so a failure report shows it (set SKIFF_CRASH_SEED to replay).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from skiff_broker.store.config import FlushType
from skiff_broker.store.errors import StoreError
from skiff_broker.store.message import Message, StoredMessage
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.results import GetStatus

pytestmark = pytest.mark.crash

WRITER = Path(__file__).with_name("crash_writer.py")


def _load_writer() -> ModuleType:
    # Loaded by path: the test must not depend on how pytest put tests/ on sys.path.
    spec = importlib.util.spec_from_file_location("crash_writer", WRITER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cw = _load_writer()


@functools.cache
def expected(seq: int) -> Message:
    return cw.expected_message(seq)


@dataclasses.dataclass(frozen=True)
class Ack:
    seq: int
    physical: int
    size: int
    queue_id: int
    queue_offset: int
    flushed: int

    @property
    def end(self) -> int:
        return self.physical + self.size


@dataclasses.dataclass
class WriterRun:
    acks: list[Ack]
    # The writer's own report of its start: True/False, None if it died before.
    clean_start: bool | None


def _seed() -> int:
    seed = int(os.environ.get("SKIFF_CRASH_SEED") or random.SystemRandom().randrange(2**32))
    print(f"crash test seed {seed} (replay with SKIFF_CRASH_SEED={seed})")
    return seed


def _spawn(
    out: Path, data_dir: Path, flush_type: FlushType, start_seq: int, concurrency: int
) -> subprocess.Popen[bytes]:
    with open(out, "wb") as stdout, open(out.with_suffix(".err"), "wb") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                str(WRITER),
                "--data-dir",
                str(data_dir),
                "--flush-type",
                flush_type.value,
                "--start-seq",
                str(start_seq),
                "--concurrency",
                str(concurrency),
            ],
            stdout=stdout,
            stderr=stderr,
        )


def _stderr(out: Path) -> str:
    return out.with_suffix(".err").read_text(errors="replace")[-3000:]


def _wait_for_first_ack(proc: subprocess.Popen[bytes], out: Path) -> None:
    """Poll the writer's output until it has acknowledged something (generous deadline)."""
    deadline = time.monotonic() + 60
    while b"ack " not in out.read_bytes():
        assert proc.poll() is None, f"writer exited with {proc.returncode}:\n{_stderr(out)}"
        assert time.monotonic() < deadline, "writer acknowledged nothing within 60 s"
        time.sleep(0.01)


def _kill(proc: subprocess.Popen[bytes], out: Path) -> WriterRun:
    assert proc.poll() is None, f"writer exited on its own ({proc.returncode}):\n{_stderr(out)}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    text = out.read_text()
    # A line without its newline was torn by the kill; it counts for nothing.
    lines = text.split("\n")[:-1]
    acks = []
    clean_start = None
    for line in lines:
        if line.startswith("# start clean="):
            clean_start = line.endswith("=1")
        elif line.startswith("ack "):
            acks.append(Ack(*map(int, line.split()[1:])))
    return WriterRun(acks, clean_start)


def _open(data_dir: Path, flush_type: FlushType) -> MessageStore:
    store = MessageStore(cw.store_config(str(data_dir), flush_type))
    store.start()
    return store


def _assert_is_seq(m: StoredMessage) -> int:
    """``m`` is exactly the writer's message for the sequence number it carries."""
    seq = int(m.properties["SEQ"])
    want = expected(seq)
    assert m.topic == want.topic
    assert m.queue_id == want.queue_id
    assert m.body == want.body, f"message {seq} at {m.physical_offset} has a different body"
    assert m.properties == want.properties
    return seq


def _verify(store: MessageStore, acked: dict[int, Ack], recent: list[Ack], rng: random.Random):
    """Everything acknowledged is there and byte-identical; nothing else is damaged."""
    assert store.wait_dispatched(timeout=60)
    # A crash tears at most the append it interrupted: a cut tail, never a damaged stretch.
    assert store.damage_history() == []
    by_queue_offset: dict[tuple[int, int], int] = {}
    total = 0
    for queue_id in range(cw.QUEUES):
        low = store.min_offset(cw.TOPIC, queue_id)
        high = store.max_offset(cw.TOPIC, queue_id)
        assert low == 0
        offset = low
        while offset < high:
            result = store.get_messages(cw.TOPIC, queue_id, offset, 256)
            assert result.status is GetStatus.FOUND, (queue_id, offset, result.status)
            for m in result.messages:
                # Contiguous: every queue offset from min to max holds a whole message.
                assert m.queue_offset == offset
                _assert_is_seq(m)
                by_queue_offset[(queue_id, offset)] = m.physical_offset
                offset += 1
            assert result.next_offset == offset
        total += high - low
    assert len(by_queue_offset) == total

    for a in acked.values():
        assert by_queue_offset.get((a.queue_id, a.queue_offset)) == a.physical, (
            f"acknowledged message {a.seq} is not at queue {a.queue_id} offset {a.queue_offset}"
        )
    recent_set = set(recent)
    older = [a for a in acked.values() if a not in recent_set]
    sample = recent[-300:] + rng.sample(older, min(100, len(older)))
    for a in sample:
        m = store.get_message_at(a.physical, a.size)
        assert m is not None, f"acknowledged message {a.seq} at {a.physical} is gone"
        assert _assert_is_seq(m) == a.seq
        assert m.queue_offset == a.queue_offset
        assert a.physical in [x.physical_offset for x in store.query_by_key(cw.TOPIC, f"k{a.seq}")]
    for a in sample[:20]:
        found = store.query_by_key(cw.TOPIC, expected(a.seq).properties["UNIQ_KEY"])
        assert a.physical in [x.physical_offset for x in found]


def test_sync_flush_loses_no_acknowledged_message_to_sigkill(tmp_path: Path) -> None:
    rng = random.Random(_seed())
    data_dir = tmp_path / "store"
    acked: dict[int, Ack] = {}
    rounds = 24
    # Whether the next writer must find a clean stop (True), a crash (False), or
    # either (None: the last writer may have died before it marked the store running).
    expect_clean: bool | None = None
    for i in range(rounds):
        concurrency = rng.choice([1, 4, 8])
        start_seq = max(acked, default=-1) + 1
        out = tmp_path / f"writer-{i}.out"
        proc = _spawn(out, data_dir, FlushType.SYNC_FLUSH, start_seq, concurrency)
        early = i > 0 and rng.random() < 0.15
        if early:
            # Anywhere from start-up and recovery to the first appends.
            delay = rng.uniform(0.05, 0.8)
        else:
            _wait_for_first_ack(proc, out)
            delay = rng.uniform(0.0, 0.3)
        if i == 0:
            # A running writer holds the data directory: a second store is refused.
            with pytest.raises(StoreError, match="in use by another process"):
                _open(data_dir, FlushType.SYNC_FLUSH)
        time.sleep(delay)
        run = _kill(proc, out)
        print(
            f"round {i}: concurrency {concurrency}, from seq {start_seq}, "
            f"{'early ' if early else ''}kill after {delay:.3f}s, {len(run.acks)} acks, "
            f"writer start clean={run.clean_start}"
        )
        if expect_clean is not None and run.clean_start is not None:
            assert run.clean_start is expect_clean
        for a in run.acks:
            assert a.seq not in acked, f"seq {a.seq} acknowledged twice"
            acked[a.seq] = a

        if rng.random() < 0.7 or i == rounds - 1:
            store = _open(data_dir, FlushType.SYNC_FLUSH)
            if run.clean_start is not None:
                assert not store.clean_start, "a killed writer's store must be recovered"
            _verify(store, acked, run.acks, rng)
            store.shutdown()
            expect_clean = True
        else:
            # The next writer recovers from this crash itself.
            expect_clean = False if run.clean_start is not None else None
    assert len(acked) > 0


def _power_cut(data_dir: Path, flushed: int, garbage: random.Random | None) -> None:
    """Overwrite every commit-log byte at or after ``flushed``.

    Stands in for a power cut, which cannot be produced here: SIGKILL leaves the
    page cache, so the kernel would still write everything; a machine losing
    power loses what was never flushed. Zeros are a lost page never written
    back; random bytes are a page written back half or from stale blocks.
    """
    size = cw.SEGMENT_SIZE
    commit_log = data_dir / "commitlog"
    for name in sorted(os.listdir(commit_log)):
        if not name.isdigit():
            continue
        base = int(name)
        start = max(flushed - base, 0)
        if start >= size:
            continue
        n = size - start
        data = garbage.randbytes(n) if garbage is not None else bytes(n)
        with open(commit_log / name, "r+b") as f:
            f.seek(start)
            f.write(data)


def test_async_flush_loses_at_most_what_was_not_flushed(tmp_path: Path) -> None:
    rng = random.Random(_seed())
    data_dir = tmp_path / "store"
    acked: dict[int, Ack] = {}
    for i in range(5):
        start_seq = max(acked, default=-1) + 1
        out = tmp_path / f"writer-{i}.out"
        proc = _spawn(out, data_dir, FlushType.ASYNC_FLUSH, start_seq, 1)
        _wait_for_first_ack(proc, out)
        delay = rng.uniform(0.05, 0.3)
        time.sleep(delay)
        run = _kill(proc, out)
        assert run.acks
        # The writer reports the flushed offset after each put; the newest one is a
        # lower bound of what was on disk when it died.
        flushed = max(a.flushed for a in run.acks)
        for a in run.acks:
            assert a.seq not in acked, f"seq {a.seq} acknowledged twice"
            acked[a.seq] = a
        mode = ["none", "zeros", "garbage"][i % 3]
        print(
            f"round {i}: from seq {start_seq}, kill after {delay:.3f}s, {len(run.acks)} acks, "
            f"last {run.acks[-1].end}, flushed {flushed}, power cut: {mode}"
        )

        if mode == "none":
            # SIGKILL alone: the page cache survives, so nothing acknowledged is lost.
            store = _open(data_dir, FlushType.ASYNC_FLUSH)
            assert store.commit_log.max_offset >= max(a.end for a in acked.values())
        else:
            _power_cut(data_dir, flushed, random.Random(i) if mode == "garbage" else None)
            store = _open(data_dir, FlushType.ASYNC_FLUSH)
            # Exactly what was flushed is kept, nothing less and nothing corrupt more.
            assert store.commit_log.max_offset == flushed
            lost = [seq for seq, a in acked.items() if a.end > flushed]
            assert all(acked[seq].physical >= flushed for seq in lost)
            for seq in lost:
                del acked[seq]
        assert not store.clean_start
        _verify(store, acked, [a for a in run.acks if a.seq in acked], rng)
        store.shutdown()
