#!/usr/bin/env python3
"""Throughput benchmark of the Skiff message store, judged against this machine's own disk.

Run ``python bench/store_bench.py --help``; bench/README.md explains every figure.

Absolute times on a shared machine move from run to run, so every figure is also
printed as a ratio to baselines measured in the same run: the raw sequential
write + fdatasync bandwidth of the data directory's disk, and its raw
4 KiB write + fdatasync rate.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import fnmatch
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# SKIFF_STORE_BENCH_BROKER measures another tree's store with this same bench (store_ab.py).
sys.path.insert(
    0,
    os.environ.get("SKIFF_STORE_BENCH_BROKER")
    or str(Path(__file__).resolve().parent.parent / "broker"),
)

from skiff_broker.delivery.long_polling import ArrivalHub
from skiff_broker.store.config import FlushType, StoreConfig
from skiff_broker.store.mapped_file import PAGE_SIZE
from skiff_broker.store.mapped_file_queue import MappedFileQueue
from skiff_broker.store.message import Message, Property
from skiff_broker.store.message_store import MessageStore
from skiff_broker.store.recovery import scan_from
from skiff_broker.store.results import PutResult

KiB = 1024
MiB = 1024**2
GiB = 1024**3
MB = 1e6  # throughput is reported in decimal megabytes per second

TOPIC = "BenchTopic"
QUEUES = 8
POOL_MESSAGES = 4096
BATCH = 64
APPENDERS = 64
SIZES = {"100B": 100, "1KiB": 1024}
MODES = ("SYNC_FLUSH", "ASYNC_FLUSH", "ASYNC_FLUSH+pool")
SHAPES = ("single", "batch64", "64tasks", "paced")
SHAPE_TEXT = {
    "single": "1 appender",
    "batch64": "1 appender, batch 64",
    "64tasks": "64 async appenders",
    "paced": "1 msg per put, paced",
}
# The paced shape: single-message puts arriving at a broker's rate under the official
# Java client (one SendMessage per message), each woken dispatch step handling few records.
PACED_RATE = 2000

TARGET_ASYNC_MSGS = 250_000
TARGET_ASYNC_RATIO = 0.70
TARGET_SYNC_MSGS = 50_000
TARGET_SYNC_FSYNC_PER_MSG = 0.05
TARGET_SCAN_MBPS = 500.0

log = logging.getLogger("store_bench")


def note(text: str) -> None:
    """Progress goes to stderr so that stdout holds only the report."""
    print(text, file=sys.stderr, flush=True)


# -- machine -----------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mount_of(path: str) -> tuple[str, str, str]:
    """(mount point, device, file-system type) holding ``path``, from /proc/mounts."""
    real = os.path.realpath(path)
    best = ("/", "?", "unknown")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                device, point, fstype = line.split()[:3]
                point = point.replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best[0]):
                    best = (point, device, fstype)
    except OSError:
        pass
    return best


def machine_info(data_dir: str) -> dict[str, Any]:
    point, device, fstype = _mount_of(data_dir)
    usage = shutil.disk_usage(data_dir)
    return {
        "nproc": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "data_dir": data_dir,
        "filesystem": fstype,
        "device": device,
        "mount_point": point,
        "disk_free_bytes": usage.free,
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "loadavg_start": os.getloadavg(),
    }


def drop_page_cache() -> bool:
    """Write dirty pages out and drop the page cache; False if not permitted here."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


# -- baselines ---------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class BaselinePass:
    when: str
    seq_bytes: int
    seq_seconds: float
    seq_bytes_per_s: float
    fdatasync_calls: int
    fdatasync_seconds: float
    fdatasync_per_s: float


@dataclasses.dataclass(slots=True)
class Baselines:
    """Measured before and after the workloads; ratios use the mean of the passes."""

    passes: list[BaselinePass]
    seq_bytes_per_s: float
    fdatasync_per_s: float

    @classmethod
    def of(cls, passes: list[BaselinePass]) -> Baselines:
        return cls(
            passes,
            sum(p.seq_bytes_per_s for p in passes) / len(passes),
            sum(p.fdatasync_per_s for p in passes) / len(passes),
        )

    @property
    def spread(self) -> float:
        """Largest relative change between passes: how much the machine moved meanwhile."""
        seq = [p.seq_bytes_per_s for p in self.passes]
        sync = [p.fdatasync_per_s for p in self.passes]
        return max(max(seq) / min(seq), max(sync) / min(sync)) - 1


def measure_seq_write(directory: str, max_bytes: int, max_seconds: float) -> tuple[int, float]:
    """1 MiB os.write calls to a fresh file, then one fdatasync: (bytes, seconds)."""
    path = os.path.join(directory, "raw-seq.bin")
    chunk = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        start = time.perf_counter()
        while written < max_bytes and time.perf_counter() - start < max_seconds:
            written += os.write(fd, chunk)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return written, elapsed


def measure_fdatasync_rate(directory: str, seconds: float) -> tuple[int, float]:
    """4 KiB pwrite + fdatasync in a loop: (calls, seconds).

    The file is allocated and synced first, so each call overwrites allocated
    blocks, as appends into the store's pre-warmed segments do.
    """
    path = os.path.join(directory, "raw-fdatasync.bin")
    size = 16 * MiB
    block = os.urandom(4 * KiB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, bytes(size))
        os.fsync(fd)
        calls = 0
        offset = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            os.pwrite(fd, block, offset)
            os.fdatasync(fd)
            calls += 1
            offset = (offset + len(block)) % size
    finally:
        os.close(fd)
        os.unlink(path)
    return calls, elapsed


def measure_baselines(directory: str, seconds: float, when: str) -> BaselinePass:
    note(f"baseline ({when}): raw sequential write + fdatasync ...")
    seq_bytes, seq_seconds = measure_seq_write(directory, GiB, max(seconds, 2.0))
    note(f"  {seq_bytes / MiB:.0f} MiB in {seq_seconds:.2f} s")
    note(f"baseline ({when}): raw 4 KiB write + fdatasync rate ...")
    calls, sync_seconds = measure_fdatasync_rate(directory, min(2.0, seconds))
    note(f"  {calls} calls in {sync_seconds:.2f} s")
    return BaselinePass(
        when=when,
        seq_bytes=seq_bytes,
        seq_seconds=seq_seconds,
        seq_bytes_per_s=seq_bytes / seq_seconds,
        fdatasync_calls=calls,
        fdatasync_seconds=sync_seconds,
        fdatasync_per_s=calls / sync_seconds,
    )


# -- messages and stores -----------------------------------------------------


def message_pool(body_size: int, count: int = POOL_MESSAGES) -> list[Message]:
    """Messages as a RocketMQ producer sends them: a tag and a client-made unique key.

    A pool is cycled so that building messages costs the benchmark nothing; the
    store keeps no reference to a Message, so reuse is safe.
    """
    bodies = [os.urandom(body_size) for _ in range(16)]
    prefix = os.urandom(10).hex().upper()
    return [
        Message(
            topic=TOPIC,
            body=bodies[i % len(bodies)],
            queue_id=i % QUEUES,
            properties={Property.TAGS: "TagA", Property.UNIQ_KEY: f"{prefix}{i:012X}"},
            born_timestamp=int(time.time() * 1000),
            born_host="10.0.0.7:53412",
        )
        for i in range(count)
    ]


def store_config(data_dir: str, mode: str, segment_bytes: int) -> StoreConfig:
    pool = mode.endswith("+pool")
    return StoreConfig(
        data_dir=data_dir,
        flush_type=FlushType.SYNC_FLUSH if mode == "SYNC_FLUSH" else FlushType.ASYNC_FLUSH,
        commit_log_file_size=segment_bytes,
        max_message_size=min(4 * MiB, segment_bytes // 2),
        transient_store_pool_enable=pool,
        # Five buffers of a full segment each, as RocketMQ; capped so that 1 GiB
        # segments do not reserve 5 GiB of memory on a small machine.
        transient_store_pool_size=max(2, min(5, (2 * GiB) // segment_bytes)),
    )


def segment_path(config: StoreConfig, index: int) -> str:
    return os.path.join(config.commit_log_dir, f"{index * config.commit_log_file_size:020d}")


def wait_for(condition: Callable[[], bool], timeout: float, poll: float = 0.002) -> float | None:
    """Seconds until ``condition`` held, or None if it did not within ``timeout``."""
    start = time.perf_counter()
    while not condition():
        if time.perf_counter() - start > timeout:
            return None
        time.sleep(poll)
    return time.perf_counter() - start


# -- profiling ---------------------------------------------------------------


class StackSampler:
    """Samples every thread's Python stack: where the store's background threads spend time.

    pyinstrument sees only the thread it runs on; this shows the dispatcher,
    flush and allocator threads too. A thread blocked in C (fdatasync, a lock)
    is counted at the Python line that made the call.
    """

    def __init__(self, interval: float = 0.002) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self.self_counts: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.total_counts: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.samples: collections.Counter[str] = collections.Counter()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self._interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, str(ident))
                self.samples[name] += 1
                self.self_counts[name][_frame_label(frame)] += 1
                seen = set()
                f = frame
                while f is not None:
                    label = _function_label(f)
                    if label not in seen:
                        seen.add(label)
                        self.total_counts[name][label] += 1
                    f = f.f_back

    def report(self, top: int = 12) -> str:
        lines = []
        for name, total in self.samples.most_common():
            lines.append(f"thread {name}: {total} samples")
            lines.append("  self (innermost Python line):")
            for label, count in self.self_counts[name].most_common(top):
                lines.append(f"    {100 * count / total:5.1f}%  {label}")
            lines.append("  inclusive (function on the stack):")
            for label, count in self.total_counts[name].most_common(top):
                lines.append(f"    {100 * count / total:5.1f}%  {label}")
        return "\n".join(lines)


def _short_path(path: str) -> str:
    marker = "skiff_broker" + os.sep
    at = path.find(marker)
    if at >= 0:
        return path[at + len(marker) :]
    return os.path.basename(path)


def _frame_label(frame: Any) -> str:
    code = frame.f_code
    return f"{code.co_name} ({_short_path(code.co_filename)}:{frame.f_lineno})"


def _function_label(frame: Any) -> str:
    code = frame.f_code
    return f"{code.co_name} ({_short_path(code.co_filename)})"


class Profiling:
    """Optional profilers around one workload's measured window (``--profile DIR``)."""

    def __init__(self, out_dir: str | None) -> None:
        self.out_dir = out_dir
        self._pyinstrument: Any = None
        self._sampler: StackSampler | None = None
        if out_dir is not None:
            os.makedirs(out_dir, exist_ok=True)
            try:
                import pyinstrument  # noqa: F401 (only checks it is there)
            except ImportError:
                raise SystemExit("--profile needs pyinstrument: pip install pyinstrument") from None

    def begin(self) -> None:
        if self.out_dir is None:
            return
        from pyinstrument import Profiler

        # "disabled": sample the whole thread, the event loop and all its tasks.
        self._pyinstrument = Profiler(interval=0.001, async_mode="disabled")
        self._sampler = StackSampler()
        self._sampler.start()
        self._pyinstrument.start()

    def end(self, key: str) -> None:
        if self.out_dir is None or self._pyinstrument is None or self._sampler is None:
            return
        self._pyinstrument.stop()
        self._sampler.stop()
        name = key.replace("/", "_").replace("+", "-")
        text = self._pyinstrument.output_text(unicode=False, color=False, show_all=False)
        with open(os.path.join(self.out_dir, f"{name}.pyinstrument.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(self.out_dir, f"{name}.pyinstrument.html"), "w") as f:
            f.write(self._pyinstrument.output_html())
        with open(os.path.join(self.out_dir, f"{name}.threads.txt"), "w") as f:
            f.write(self._sampler.report() + "\n")
        note(f"  profiles written to {self.out_dir}/{name}.*")
        self._pyinstrument = None
        self._sampler = None


# -- append workloads --------------------------------------------------------


@dataclasses.dataclass(slots=True)
class AppendFigure:
    key: str
    mode: str
    size: str
    shape: str
    appenders: int
    batch: int
    messages: int
    seconds: float
    log_bytes: int
    msg_per_s: float
    log_bytes_per_s: float
    body_bytes_per_s: float
    ratio_seq: float
    fsyncs: int
    fsync_per_msg: float
    fsync_per_s: float
    ratio_fdatasync: float
    drain_seconds: float | None
    dispatch_lag_seconds: float | None
    # CPU per message from the window's start until dispatched: the dispatcher thread's,
    # and the whole process's (appending thread, dispatcher, flush and allocator threads).
    dispatcher_us_per_msg: float
    process_us_per_msg: float
    failures: dict[str, int]


@dataclasses.dataclass(slots=True)
class Window:
    messages: int
    seconds: float
    log_bytes: int
    fsyncs: int
    failures: collections.Counter[str]
    cpu_at_start: CpuClocks


@dataclasses.dataclass(slots=True)
class CpuClocks:
    """CPU seconds used so far by the dispatcher thread and by the whole process."""

    dispatcher: float
    process: float

    @classmethod
    def read(cls, store: MessageStore) -> CpuClocks:
        thread = store.dispatcher._thread
        assert thread is not None and thread.ident is not None, "the dispatcher is not running"
        clock = time.pthread_getcpuclockid(thread.ident)
        return cls(time.clock_gettime(clock), time.process_time())


def _counters(store: MessageStore) -> tuple[int, int]:
    return store.commit_log.queue.max_wrote_offset, store.commit_log.queue.flush_count


def run_loop(
    store: MessageStore,
    batches: Sequence[list[Message]],
    warmup: float,
    seconds: float,
    profiling: Profiling,
) -> Window:
    """One appender calling put_messages back to back."""
    put = store.put_messages
    n = len(batches)
    failures: collections.Counter[str] = collections.Counter()
    i = 0
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        put(batches[i % n])
        i += 1
    profiling.begin()
    wrote0, fsync0 = _counters(store)
    cpu0 = CpuClocks.read(store)
    messages = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        batch = batches[i % n]
        result = put(batch)
        i += 1
        if result.ok:
            messages += len(batch)
        else:
            failures[result.status.value] += 1
        if time.perf_counter() >= end:
            break
    elapsed = time.perf_counter() - start
    wrote1, fsync1 = _counters(store)
    return Window(messages, elapsed, wrote1 - wrote0, fsync1 - fsync0, failures, cpu0)


def run_tasks(
    store: MessageStore,
    batches: Sequence[list[Message]],
    appenders: int,
    warmup: float,
    seconds: float,
    waits_for_flush: bool,
    profiling: Profiling,
) -> Window:
    """``appenders`` asyncio tasks calling put_messages_async in one event loop."""

    async def main() -> Window:
        n = len(batches)
        done = [0]
        stop = [False]
        failures: collections.Counter[str] = collections.Counter()

        async def appender(k: int) -> None:
            put = store.put_messages_async
            i = k
            while not stop[0]:
                batch = batches[i % n]
                result: PutResult = await put(batch)
                i += appenders
                if result.ok:
                    done[0] += len(batch)
                else:
                    failures[result.status.value] += 1
                if not waits_for_flush:
                    # An ASYNC put never suspends; a server gives other requests
                    # a turn of the loop between two puts.
                    await asyncio.sleep(0)

        tasks = [asyncio.create_task(appender(k)) for k in range(appenders)]
        await asyncio.sleep(warmup)
        profiling.begin()
        failures.clear()
        wrote0, fsync0 = _counters(store)
        cpu0 = CpuClocks.read(store)
        done0 = done[0]
        start = time.perf_counter()
        await asyncio.sleep(seconds)
        messages = done[0] - done0
        elapsed = time.perf_counter() - start
        wrote1, fsync1 = _counters(store)
        stop[0] = True
        await asyncio.gather(*tasks)
        return Window(messages, elapsed, wrote1 - wrote0, fsync1 - fsync0, failures, cpu0)

    return asyncio.run(main())


def run_paced(
    store: MessageStore,
    pool: Sequence[Message],
    rate: float,
    warmup: float,
    seconds: float,
    profiling: Profiling,
) -> Window:
    """One message per ``put_messages_async`` at ``rate`` per second from one event loop,
    with the broker's long-polling bridge (``ArrivalHub``) listening for arrivals."""

    async def main() -> Window:
        hub = ArrivalHub(asyncio.get_running_loop())
        store.add_arrival_listener(hub.on_arrival)
        failures: collections.Counter[str] = collections.Counter()
        pending: set[asyncio.Task[PutResult]] = set()
        counted = [False]
        done = [0]

        def finished(task: asyncio.Task[PutResult]) -> None:
            pending.discard(task)
            result = task.result()
            if not counted[0]:
                return
            if result.ok:
                done[0] += 1
            else:
                failures[result.status.value] += 1

        gap = 1.0 / rate
        n = len(pool)
        i = 0

        async def send_until(end: float) -> None:
            nonlocal i
            due = time.perf_counter()
            while due < end:
                # A task per put: under SYNC_FLUSH puts overlap while they wait for the disk.
                task = asyncio.create_task(store.put_messages_async([pool[i % n]]))
                task.add_done_callback(finished)
                pending.add(task)
                i += 1
                due += gap
                await asyncio.sleep(max(0.0, due - time.perf_counter()))

        await send_until(time.perf_counter() + warmup)
        if pending:
            await asyncio.gather(*pending)
        profiling.begin()
        counted[0] = True
        wrote0, fsync0 = _counters(store)
        cpu0 = CpuClocks.read(store)
        start = time.perf_counter()
        await send_until(start + seconds)
        if pending:
            await asyncio.gather(*pending)
        elapsed = time.perf_counter() - start
        wrote1, fsync1 = _counters(store)
        return Window(done[0], elapsed, wrote1 - wrote0, fsync1 - fsync0, failures, cpu0)

    return asyncio.run(main())


def run_append_workload(
    root: str,
    mode: str,
    size: str,
    shape: str,
    *,
    segment_bytes: int,
    warmup: float,
    seconds: float,
    profiling: Profiling,
    paced_rate: float = PACED_RATE,
) -> AppendFigure:
    key = f"{mode}/{size}/{shape}"
    data_dir = tempfile.mkdtemp(prefix="append-", dir=root)
    config = store_config(data_dir, mode, segment_bytes)
    pool = message_pool(SIZES[size])
    batch = BATCH if shape == "batch64" else 1
    batches = [pool[i : i + batch] for i in range(0, len(pool), batch)]
    store = MessageStore(config)
    store.start()
    window: Window | None = None
    try:
        # The first segment is made synchronously by the first put, and the next
        # one in the background: both belong to set-up, not to the measurement.
        first = store.put_messages(batches[0])
        if not first.ok:
            raise RuntimeError(f"{key}: first put failed: {first.status} {first.reason}")
        if wait_for(lambda: os.path.exists(segment_path(config, 1)), 120.0, 0.01) is None:
            log.warning("%s: next segment not prepared after 120 s", key)
        if shape == "64tasks":
            window = run_tasks(
                store,
                batches,
                APPENDERS,
                warmup,
                seconds,
                waits_for_flush=mode == "SYNC_FLUSH",
                profiling=profiling,
            )
        elif shape == "paced":
            window = run_paced(store, pool, paced_rate, warmup, seconds, profiling)
        else:
            window = run_loop(store, batches, warmup, seconds, profiling)
        profiling.end(key)
        # How long the background services need to catch up with what was appended.
        wrote_stop = store.commit_log.queue.max_wrote_offset
        # ASYNC_FLUSH leaves fewer than least_pages dirty pages for its thorough pass.
        slack = config.flush_commit_log_least_pages * PAGE_SIZE
        drain = wait_for(lambda: store.commit_log.queue.flushed_where >= wrote_stop - slack, 60.0)
        dispatch_lag = wait_for(lambda: store.dispatcher.reput_offset >= wrote_stop, 60.0)
        cpu1 = CpuClocks.read(store)
    finally:
        store.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
    assert window is not None
    messages = window.messages
    elapsed = window.seconds
    cpu0 = window.cpu_at_start
    per_msg = 1e6 / messages if messages else float("nan")
    log_rate = window.log_bytes / elapsed
    fsync_rate = window.fsyncs / elapsed
    return AppendFigure(
        key=key,
        mode=mode,
        size=size,
        shape=shape,
        appenders=APPENDERS if shape == "64tasks" else 1,
        batch=batch,
        messages=messages,
        seconds=elapsed,
        log_bytes=window.log_bytes,
        msg_per_s=messages / elapsed,
        log_bytes_per_s=log_rate,
        body_bytes_per_s=messages * SIZES[size] / elapsed,
        ratio_seq=0.0,
        fsyncs=window.fsyncs,
        fsync_per_msg=window.fsyncs / messages if messages else float("nan"),
        fsync_per_s=fsync_rate,
        ratio_fdatasync=0.0,
        drain_seconds=drain,
        dispatch_lag_seconds=dispatch_lag,
        dispatcher_us_per_msg=(cpu1.dispatcher - cpu0.dispatcher) * per_msg,
        process_us_per_msg=(cpu1.process - cpu0.process) * per_msg,
        failures=dict(window.failures),
    )


# -- recovery ----------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class ScanFigure:
    label: str
    cold: bool
    check_crc: bool
    bytes: int
    records: int
    seconds: float
    bytes_per_s: float
    ratio_seq: float


@dataclasses.dataclass(slots=True)
class StartFigure:
    label: str
    cold: bool
    recovered_from: int
    end: int
    records_checked: int
    seconds: float
    bytes_per_s: float
    ratio_seq: float


@dataclasses.dataclass(slots=True)
class RecoveryFigures:
    written_bytes: int
    written_messages: int
    write_seconds: float
    page_cache_dropped: bool
    scans: list[ScanFigure]
    starts: list[StartFigure]


def recovery_writer(data_dir: str, segment_bytes: int, target_bytes: int) -> None:
    """Child process: fill a store with 1 KiB messages, say READY, wait to be killed."""
    config = store_config(data_dir, "ASYNC_FLUSH", segment_bytes)
    store = MessageStore(config)
    store.start()
    pool = message_pool(1024)
    batches = [pool[i : i + BATCH] for i in range(0, len(pool), BATCH)]
    queue = store.commit_log.queue
    messages = 0
    i = 0
    start = time.perf_counter()
    while queue.max_wrote_offset < target_bytes:
        result = store.put_messages(batches[i % len(batches)])
        if not result.ok:
            raise SystemExit(f"recovery writer: put failed: {result.status} {result.reason}")
        messages += BATCH
        i += 1
    elapsed = time.perf_counter() - start
    # Let the dispatcher catch up as a live broker's would, then crash with the
    # abort file still there and whatever the flush services have not synced.
    store.wait_dispatched(60.0)
    print(f"READY {queue.max_wrote_offset} {messages} {elapsed:.6f}", flush=True)
    while True:
        time.sleep(3600)


class _RecoveryLog(logging.Handler):
    """Captures recovery's own account of what it checked (records, start, end)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.found: tuple[int, int, int] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("recovered after a crash") and record.args:
            records, start, end = record.args  # type: ignore[misc]
            self.found = (int(records), int(start), int(end))


def _timed_scan(config: StoreConfig, label: str, cold: bool, check_crc: bool) -> ScanFigure:
    queue = MappedFileQueue(config.commit_log_dir, config.commit_log_file_size)
    queue.load()
    try:
        start = time.perf_counter()
        result = scan_from(queue, 0, check_crc=check_crc)
        elapsed = time.perf_counter() - start
    finally:
        queue.close()
    if result.problem:
        log.warning("scan stopped early: %s", result.problem)
    rate = result.bytes_scanned / elapsed
    return ScanFigure(
        label,
        cold,
        check_crc,
        result.bytes_scanned,
        result.records,
        elapsed,
        rate,
        0.0,
    )


def _timed_start(config: StoreConfig, label: str, cold: bool) -> StartFigure:
    capture = _RecoveryLog()
    recovery_log = logging.getLogger("skiff_broker.store.recovery")
    old_level = recovery_log.level
    recovery_log.setLevel(logging.INFO)
    recovery_log.addHandler(capture)
    store = MessageStore(config)
    try:
        start = time.perf_counter()
        store.start()
        elapsed = time.perf_counter() - start
    finally:
        recovery_log.removeHandler(capture)
        recovery_log.setLevel(old_level)
    try:
        if store.clean_start or capture.found is None:
            raise RuntimeError(f"{label}: the store did not run an abnormal recovery")
        records, begin, end = capture.found
    finally:
        store.shutdown()
    rate = (end - begin) / elapsed
    return StartFigure(label, cold, begin, end, records, elapsed, rate, 0.0)


def _forget_progress(config: StoreConfig) -> None:
    """Make the next start rebuild everything from offset 0, as after a lost checkpoint."""
    for path in (config.consume_queue_dir, config.index_dir):
        shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(config.checkpoint_path):
        os.unlink(config.checkpoint_path)
    with open(config.abort_path, "wb"):
        pass


def run_recovery(root: str, segment_bytes: int, target_bytes: int) -> RecoveryFigures:
    data_dir = tempfile.mkdtemp(prefix="recovery-", dir=root)
    config = store_config(data_dir, "ASYNC_FLUSH", segment_bytes)
    note(f"recovery: writing {target_bytes / GiB:.2f} GiB of 1 KiB messages in a child process")
    child = subprocess.Popen(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--recovery-writer",
            data_dir,
            "--segment-mib",
            str(segment_bytes // MiB),
            "--recovery-bytes",
            str(target_bytes),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"recovery writer failed (exit {child.wait()}): {line!r}")
        _, wrote, messages, write_seconds = line.split()
        # The crash: no shutdown, the abort file stays, page-cache contents survive.
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    note(f"  {int(wrote) / MiB:.0f} MiB in {float(write_seconds):.1f} s; writer killed")
    scans = []
    starts = []
    try:
        dropped = drop_page_cache()
        note(f"recovery: page cache dropped: {'yes' if dropped else 'no (not permitted)'}")
        scans.append(_timed_scan(config, "CRC scan", dropped, True))
        scans.append(_timed_scan(config, "CRC scan", False, True))
        scans.append(_timed_scan(config, "scan without CRC", False, False))
        for s in scans:
            note(f"  {s.label} ({'cold' if s.cold else 'warm'}): {s.bytes_per_s / MB:.0f} MB/s")

        drop_page_cache()
        starts.append(_timed_start(config, "start() after the crash", dropped))
        _forget_progress(config)
        drop_page_cache()
        starts.append(_timed_start(config, "start() rebuilding all", dropped))
        _forget_progress(config)
        starts.append(_timed_start(config, "start() rebuilding all", False))
        for s in starts:
            note(f"  {s.label} ({'cold' if s.cold else 'warm'}): {s.seconds:.2f} s")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return RecoveryFigures(
        written_bytes=int(wrote),
        written_messages=int(messages),
        write_seconds=float(write_seconds),
        page_cache_dropped=dropped,
        scans=scans,
        starts=starts,
    )


def apply_ratios(
    baselines: Baselines, appends: list[AppendFigure], recovery: RecoveryFigures | None
) -> None:
    """Express every figure against the baselines (known only once the run is over)."""
    for f in appends:
        f.ratio_seq = f.log_bytes_per_s / baselines.seq_bytes_per_s
        f.ratio_fdatasync = f.fsync_per_s / baselines.fdatasync_per_s
    if recovery is not None:
        for s in recovery.scans:
            s.ratio_seq = s.bytes_per_s / baselines.seq_bytes_per_s
        for st in recovery.starts:
            st.ratio_seq = st.bytes_per_s / baselines.seq_bytes_per_s


# -- report ------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def append_target(f: AppendFigure) -> tuple[str, bool] | None:
    if f.shape == "paced":
        return None  # its rate is set, not measured
    if f.mode.startswith("ASYNC_FLUSH") and f.size == "1KiB":
        ok = f.msg_per_s >= TARGET_ASYNC_MSGS or f.ratio_seq >= TARGET_ASYNC_RATIO
        return "250k/s|0.70 seq", ok
    if f.mode == "SYNC_FLUSH" and f.shape == "64tasks":
        ok = f.msg_per_s >= TARGET_SYNC_MSGS and f.fsync_per_msg <= TARGET_SYNC_FSYNC_PER_MSG
        return "50k/s,<=0.05", ok
    return None


def _fmt_rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def _fmt_opt(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(
    info: dict[str, Any],
    settings: dict[str, Any],
    baselines: Baselines,
    appends: list[AppendFigure],
    recovery: RecoveryFigures | None,
) -> str:
    out: list[str] = []
    w = out.append
    w("Skiff store benchmark")
    w(
        f"machine: {info['nproc']} CPU(s) {info['cpu_model']}, kernel {info['kernel']}, "
        f"Python {info['python']}, {info['filesystem']} on {info['device']}"
    )
    w(
        f"settings: segments {settings['segment_bytes'] // MiB} MiB, {settings['seconds']:g} s "
        f"per workload after {settings['warmup']:g} s warm-up, load average "
        f"{info['loadavg_start'][0]:.2f} at start / {info['loadavg_end'][0]:.2f} at end"
    )
    for text in settings["notes"]:
        w(f"note: {text}")
    w("Absolute figures move with machine load; judge the ratios to this run's baselines.")
    w("MB = 10^6 bytes. 'log' bytes are commit-log record bytes (header, body, topic, props).")
    w("")
    w("Baselines (measured in this run, before and after the workloads; ratios use the mean)")
    for p in baselines.passes:
        w(
            f"  {p.when:<6} raw sequential write + fdatasync: {p.seq_bytes / MiB:.0f} MiB in "
            f"{p.seq_seconds:.2f} s = {p.seq_bytes_per_s / MB:.1f} MB/s; "
            f"raw 4 KiB write + fdatasync: {p.fdatasync_per_s:.0f} calls/s"
        )
    w(
        f"  mean   {baselines.seq_bytes_per_s / MB:.1f} MB/s (= 1.00 seq), "
        f"{baselines.fdatasync_per_s:.0f} fdatasync/s (= 1.00 sync); passes differ by up to "
        f"{baselines.spread:.0%}"
    )
    if baselines.spread > 0.3:
        w("  WARNING: the baselines moved by more than 30% during the run: the disk is shared")
    w("")
    header = (
        f"{'workload':<45} {'msg/s':>8} {'log MB/s':>9} {'x seq':>6} {'fsync/msg':>10} "
        f"{'x sync':>7} {'drain s':>8} {'disp s':>7} {'disp us':>8} {'proc us':>8}  target"
    )
    w("Appends  (x seq = log MB/s / raw sequential; x sync = fsync/s / raw fdatasync rate;")
    w("          drain/disp s = time after the window until flushed / dispatched;")
    w("          disp/proc us = CPU µs per message of the dispatcher thread / the process)")
    w(header)
    w("-" * len(header))
    for f in appends:
        label = f"{f.mode:<17} {f.size:<5} {SHAPE_TEXT[f.shape]}"
        target = append_target(f)
        target_text = f"{target[0]} {_verdict(target[1])}" if target else ""
        w(
            f"{label:<45} {_fmt_rate(f.msg_per_s):>8} {f.log_bytes_per_s / MB:>9.1f} "
            f"{f.ratio_seq:>6.2f} {f.fsync_per_msg:>10.4f} {f.ratio_fdatasync:>7.2f} "
            f"{_fmt_opt(f.drain_seconds, '.2f'):>8} {_fmt_opt(f.dispatch_lag_seconds, '.2f'):>7}"
            f" {f.dispatcher_us_per_msg:>8.1f} {f.process_us_per_msg:>8.1f}  {target_text}"
        )
        if f.failures:
            w(f"{'':<45} failed puts: {f.failures}")
    if recovery is not None:
        w("")
        w(
            f"Recovery  ({recovery.written_bytes / MiB:.0f} MiB of 1 KiB messages written, "
            f"writer killed with SIGKILL; page cache dropped for cold runs: "
            f"{'yes' if recovery.page_cache_dropped else 'NO, cold figures are warm'})"
        )
        w(f"{'measurement':<45} {'MB/s':>8} {'x seq':>6} {'seconds':>8} {'MiB':>7}  target")
        for s in recovery.scans:
            label = f"{s.label} ({'cold' if s.cold else 'warm'})"
            target_text = ""
            if s.check_crc:
                target_text = f">=500 MB/s {_verdict(s.bytes_per_s / MB >= TARGET_SCAN_MBPS)}"
            w(
                f"{label:<45} {s.bytes_per_s / MB:>8.1f} {s.ratio_seq:>6.2f} {s.seconds:>8.2f} "
                f"{s.bytes / MiB:>7.0f}  {target_text}"
            )
        for st in recovery.starts:
            label = f"{st.label} ({'cold' if st.cold else 'warm'})"
            w(
                f"{label:<45} {st.bytes_per_s / MB:>8.1f} {st.ratio_seq:>6.2f} "
                f"{st.seconds:>8.2f} {(st.end - st.recovered_from) / MiB:>7.0f}"
            )
    w("")
    w("Targets")
    for line in target_summary(appends, recovery):
        w(f"  {line}")
    return "\n".join(out)


def target_summary(appends: list[AppendFigure], recovery: RecoveryFigures | None) -> list[str]:
    lines = []
    async_rows = [
        f
        for f in appends
        if f.mode.startswith("ASYNC_FLUSH") and f.size == "1KiB" and f.shape != "paced"
    ]
    if async_rows:
        best = max(async_rows, key=lambda f: f.msg_per_s)
        ok = best.msg_per_s >= TARGET_ASYNC_MSGS or best.ratio_seq >= TARGET_ASYNC_RATIO
        lines.append(
            f"ASYNC_FLUSH 1 KiB >= 250k msg/s or >= 0.70 x seq: best {best.key} "
            f"{best.msg_per_s:,.0f} msg/s, {best.ratio_seq:.2f} x seq -> {_verdict(ok)}"
        )
    for f in appends:
        if f.mode == "SYNC_FLUSH" and f.shape == "64tasks":
            ok = f.msg_per_s >= TARGET_SYNC_MSGS and f.fsync_per_msg <= TARGET_SYNC_FSYNC_PER_MSG
            lines.append(
                f"SYNC_FLUSH {f.size} 64 appenders >= 50k msg/s and <= 0.05 fsync/msg: "
                f"{f.msg_per_s:,.0f} msg/s, {f.fsync_per_msg:.4f} fsync/msg -> {_verdict(ok)}"
            )
    if recovery is not None:
        for s in recovery.scans:
            if s.check_crc:
                lines.append(
                    f"recovery CRC scan ({'cold' if s.cold else 'warm'}) >= 500 MB/s: "
                    f"{s.bytes_per_s / MB:.0f} MB/s -> "
                    f"{_verdict(s.bytes_per_s / MB >= TARGET_SCAN_MBPS)}"
                )
    return lines


# -- main --------------------------------------------------------------------


def plan_space(
    root: str, segment_bytes: int, recovery_bytes: int, want_recovery: bool
) -> tuple[int, int, list[str]]:
    """Shrink segments and the recovery log until the run fits in half the free space."""
    notes = []
    free = shutil.disk_usage(root).free
    budget = free // 2
    # An append workload holds about three segments plus an index file of
    # 40 + 5M*4 + 20M*20 bytes (the defaults); the raw baseline needs 1 GiB.
    index_bytes = 420 * MiB

    def need(seg: int, rec: int) -> int:
        appends = 3 * seg + index_bytes
        recovery = rec + 2 * seg + index_bytes if want_recovery else 0
        return max(appends, recovery, GiB)

    original = (segment_bytes, recovery_bytes)
    while need(segment_bytes, recovery_bytes) > budget and segment_bytes > 64 * MiB:
        segment_bytes //= 2
    while need(segment_bytes, recovery_bytes) > budget and recovery_bytes > 256 * MiB:
        recovery_bytes //= 2
    if (segment_bytes, recovery_bytes) != original:
        notes.append(
            f"only {free / GiB:.1f} GiB free: segments scaled to {segment_bytes // MiB} MiB, "
            f"recovery log to {recovery_bytes / GiB:.2f} GiB"
        )
    if need(segment_bytes, recovery_bytes) > budget:
        raise SystemExit(f"not enough free disk space in {root} ({free / GiB:.1f} GiB free)")
    return segment_bytes, recovery_bytes, notes


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Skiff store throughput and recovery benchmark (see bench/README.md)."
    )
    parser.add_argument(
        "--data-dir",
        help="directory on the disk to measure; a temporary directory is made inside it "
        "and removed at the end (default: the current directory)",
    )
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="measured seconds per workload (default 5)"
    )
    parser.add_argument(
        "--recovery-gib",
        type=float,
        default=1.0,
        help="size of the commit log written for the recovery figures (default 1; 0 skips)",
    )
    parser.add_argument(
        "--segment-mib",
        type=int,
        default=256,
        help="commit-log segment size in MiB (default 256; the store's default is 1024)",
    )
    parser.add_argument("--json", dest="json_out", help="also write every figure to this file")
    parser.add_argument(
        "--only",
        help="comma-separated glob patterns of workloads to run, e.g. 'SYNC_FLUSH/*/64tasks' "
        f"(names are MODE/SIZE/SHAPE with MODE in {', '.join(MODES)}, SIZE in "
        f"{', '.join(SIZES)}, SHAPE in {', '.join(SHAPES)})",
    )
    parser.add_argument(
        "--paced-rate",
        type=float,
        default=PACED_RATE,
        help=f"messages per second of the 'paced' shape (default {PACED_RATE})",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="profile each workload's measured window with pyinstrument (main thread) and a "
        "stack sampler (every thread); reports go to DIR",
    )
    # Internal: the child process of the recovery measurement.
    parser.add_argument("--recovery-writer", help=argparse.SUPPRESS)
    parser.add_argument("--recovery-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    if args.paced_rate <= 0:
        parser.error("--paced-rate must be positive")
    if args.segment_mib < 1:
        parser.error("--segment-mib must be at least 1")
    return args


def selected_workloads(only: str | None) -> list[tuple[str, str, str]]:
    patterns = [p.strip() for p in only.split(",")] if only else ["*"]
    chosen = []
    for mode in MODES:
        for size in SIZES:
            for shape in SHAPES:
                key = f"{mode}/{size}/{shape}"
                if any(fnmatch.fnmatchcase(key, p) for p in patterns):
                    chosen.append((mode, size, shape))
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # The handler's own level keeps the INFO records that the recovery capture
    # enables from reaching stderr.
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    if args.recovery_writer:
        recovery_writer(args.recovery_writer, args.segment_mib * MiB, args.recovery_bytes)
        return 0

    parent = os.path.abspath(args.data_dir or os.getcwd())
    if _mount_of(parent)[2] in ("tmpfs", "ramfs"):
        raise SystemExit(f"{parent} is in memory ({_mount_of(parent)[2]}); choose a disk")
    os.makedirs(parent, exist_ok=True)
    workloads = selected_workloads(args.only)
    if args.only and not workloads:
        raise SystemExit(f"--only {args.only!r} matches no workload")
    want_recovery = args.recovery_gib > 0 and not args.only
    segment_bytes, recovery_bytes, notes = plan_space(
        parent, args.segment_mib * MiB, int(args.recovery_gib * GiB), want_recovery
    )
    warmup = max(0.5, min(1.0, args.seconds * 0.2))
    profiling = Profiling(args.profile)
    root = tempfile.mkdtemp(prefix="skiff-store-bench-", dir=parent)
    info = machine_info(root)
    notes.append(f"{info['nproc']} CPU(s); other processes on this machine share the disk and CPUs")
    settings = {
        "seconds": args.seconds,
        "warmup": warmup,
        "segment_bytes": segment_bytes,
        "recovery_bytes": recovery_bytes if want_recovery else 0,
        "body_sizes": SIZES,
        "batch": BATCH,
        "appenders": APPENDERS,
        "queues": QUEUES,
        "paced_rate": args.paced_rate,
        "notes": notes,
    }
    note(f"data in {root}")
    appends: list[AppendFigure] = []
    recovery: RecoveryFigures | None = None
    try:
        passes = [measure_baselines(root, args.seconds, "start")]
        for n, (mode, size, shape) in enumerate(workloads, 1):
            note(f"[{n}/{len(workloads)}] {mode}/{size}/{shape} ...")
            figure = run_append_workload(
                root,
                mode,
                size,
                shape,
                segment_bytes=segment_bytes,
                warmup=warmup,
                seconds=args.seconds,
                profiling=profiling,
                paced_rate=args.paced_rate,
            )
            note(
                f"  {figure.msg_per_s:,.0f} msg/s, {figure.log_bytes_per_s / MB:.1f} MB/s, "
                f"{figure.fsync_per_msg:.4f} fsync/msg, dispatcher "
                f"{figure.dispatcher_us_per_msg:.1f} µs/msg"
            )
            appends.append(figure)
        if want_recovery:
            recovery = run_recovery(root, segment_bytes, recovery_bytes)
        passes.append(measure_baselines(root, args.seconds, "end"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    info["loadavg_end"] = os.getloadavg()
    baselines = Baselines.of(passes)
    apply_ratios(baselines, appends, recovery)
    print(render(info, settings, baselines, appends, recovery))
    if args.json_out:
        document = {
            "machine": info,
            "settings": settings,
            "baselines": {**dataclasses.asdict(baselines), "spread": baselines.spread},
            "appends": [dataclasses.asdict(f) for f in appends],
            "recovery": dataclasses.asdict(recovery) if recovery is not None else None,
            "targets": target_summary(appends, recovery),
        }
        with open(args.json_out, "w") as f:
            json.dump(document, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
