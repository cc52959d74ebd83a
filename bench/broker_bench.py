#!/usr/bin/env python3
"""End-to-end benchmark of a Skiff broker process, judged against this machine's own ceilings.

Run ``python bench/broker_bench.py --help``; bench/README.md explains every figure.

For each flush mode it starts a real broker (``python -m skiff_broker broker``)
and drives it over gRPC with the official RocketMQ Python client (Producer.send
in threads, Producer.send_async, a SimpleConsumer draining the backlog, a
PushConsumer at a fixed rate) and with Skiff's own BatchingProducer. Two
ceilings are measured in the same run, so that figures can be read as ratios:
the unary-call rate of a trivial grpc.aio echo server on this machine (what any
Python gRPC service here can answer), and the store's own in-process append
rate (the store benchmark's code, no gRPC at all).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "broker"))
sys.path.insert(0, str(ROOT / "bench"))

import grpc  # noqa: E402

# The store benchmark's workloads are the in-process ceiling.
import store_bench  # noqa: E402
from skiff_broker.client.producer import BatchingProducer  # noqa: E402
from skiff_broker.metadata.topic_table import TopicConfig, TopicTable  # noqa: E402

KiB = 1024
MiB = 1024**2
MB = 1e6

MODES = ("ASYNC_FLUSH", "SYNC_FLUSH")
QUEUES = 8
SEND_TOPIC = "bench-send"  # official Producer; the SimpleConsumer drains it afterwards
BATCH_TOPIC = "bench-batch"  # Skiff's BatchingProducer
E2E_TOPIC = "bench-e2e"  # PushConsumer end-to-end latency
BODY_1K = 1024
BODY_100 = 100
SEND_ASYNC_WINDOW = 256  # send_async calls outstanding at once
BATCHING_SENDERS = 2048  # concurrent send() coroutines: enough to fill 4 requests of 256
ECHO_CONCURRENCY = 64
ECHO_METHOD = "/skiff.bench.Echo/Echo"
DRAIN_THREADS = 8
BROKER_START_DEADLINE_S = 120.0
WAIT_DEADLINE_S = 60.0


def note(text: str) -> None:
    """Progress goes to stderr so that stdout holds only the report."""
    print(text, file=sys.stderr, flush=True)


# -- measurements --------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Latency:
    samples: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float


def latency_of(seconds: Sequence[float]) -> Latency | None:
    """Nearest-rank percentiles of latencies given in seconds."""
    if not seconds:
        return None
    ordered = sorted(seconds)
    n = len(ordered)

    def rank(p: float) -> float:
        return ordered[min(n - 1, max(0, int(p * n + 0.999999) - 1))] * 1000

    return Latency(n, rank(0.50), rank(0.99), rank(0.999), ordered[-1] * 1000)


class CpuMeter:
    """CPU seconds per wall second of the broker process and of this one (all threads)."""

    def __init__(self, pid: int) -> None:
        self._stat = f"/proc/{pid}/stat"
        self._tick = os.sysconf("SC_CLK_TCK")
        self._start = self._read()

    def _read(self) -> tuple[float, float, float]:
        try:
            with open(self._stat) as f:
                fields = f.read().rpartition(")")[2].split()
            broker = (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime
        except OSError:
            broker = float("nan")
        return broker, time.process_time(), time.perf_counter()

    def restart(self) -> None:
        self._start = self._read()

    def shares(self) -> tuple[float, float]:
        broker, own, wall = self._read()
        elapsed = wall - self._start[2]
        return (broker - self._start[0]) / elapsed, (own - self._start[1]) / elapsed


@dataclasses.dataclass(slots=True)
class Figure:
    key: str
    mode: str  # flush mode, or "-" for a baseline
    workload: str
    body_bytes: int
    messages: int
    seconds: float
    msg_per_s: float | None
    latency: Latency | None
    broker_cpu: float | None = None
    client_cpu: float | None = None
    errors: int = 0
    requests: int | None = None  # BatchingProducer: SendMessage requests in the window
    x_echo: float | None = None
    x_store: float | None = None
    store_key: str | None = None  # the store figure x_store divides by
    note: str = ""

    @property
    def body_mb_per_s(self) -> float | None:
        return None if self.msg_per_s is None else self.msg_per_s * self.body_bytes / MB


class Window:
    """Counts what completes between begin() and end(); workers call done() from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self.latencies: list[float] = []
        self.errors = 0
        self.started = 0.0
        self.seconds = 0.0

    def begin(self) -> None:
        with self._lock:
            self._open = True
            self.latencies.clear()
            self.errors = 0
            self.started = time.perf_counter()

    def end(self) -> None:
        with self._lock:
            self._open = False
            self.seconds = time.perf_counter() - self.started

    def done(self, latency: float, ok: bool = True) -> None:
        if not self._open:
            return
        with self._lock:
            if not self._open:
                return
            if ok:
                self.latencies.append(latency)
            else:
                self.errors += 1


def measured(
    window: Window,
    warmup: float,
    seconds: float,
    cpu: CpuMeter | None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[float | None, float | None]:
    sleep(warmup)
    window.begin()
    if cpu is not None:
        cpu.restart()
    sleep(seconds)
    window.end()
    return cpu.shares() if cpu is not None else (None, None)


# -- broker process ---------------------------------------------------------------


def log_tail(path: str) -> str:
    """The end of a broker's log, for the message of a run that failed."""
    with open(path, errors="replace") as f:
        return f.read()[-3000:]


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, as a broker is stopped in production; SIGKILL if it is not gone in 60 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class BrokerProcess:
    def __init__(self, root: str, mode: str, segment_mib: int) -> None:
        self.mode = mode
        self.data_dir = tempfile.mkdtemp(prefix=f"broker-{mode}-", dir=root)
        table = TopicTable(os.path.join(self.data_dir, "config", "topics.json"))
        table.load()
        for name in (SEND_TOPIC, BATCH_TOPIC, E2E_TOPIC):
            table.put(TopicConfig(name, QUEUES, QUEUES))
        self.log_path = os.path.join(root, f"broker-{mode}.log")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "broker"), *sys.path]),
            # The remoting port's default (8080) may be taken on a shared machine.
            "SKIFF_REMOTING_LISTEN": "127.0.0.1:0",
        }
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "skiff_broker",
                    "broker",
                    "--data-dir",
                    self.data_dir,
                    "--listen",
                    "127.0.0.1:0",
                    "--flush-type",
                    mode,
                    "--commit-log-file-size",
                    f"{segment_mib}m",
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
            )
        self.endpoint = self._wait_listening()
        self._prime()

    def _prime(self) -> None:
        """One message, then wait until the next commit-log segment is prepared.

        A fresh broker makes its first segment on the first write and warms the
        next one in the background; that one-off cost stays out of the figures.
        """

        async def send_one() -> None:
            async with BatchingProducer(self.endpoint, request_timeout_s=WAIT_DEADLINE_S) as p:
                await p.send(BATCH_TOPIC, b"prime")

        asyncio.run(send_one())
        commit_log = os.path.join(self.data_dir, "commitlog")
        end = time.monotonic() + WAIT_DEADLINE_S
        while time.monotonic() < end:
            ready = [name for name in os.listdir(commit_log) if name.isdigit()]
            if len(ready) >= 2:
                return
            time.sleep(0.05)
        note(f"{self.mode}: the next commit-log segment was not ready after {WAIT_DEADLINE_S} s")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_listening(self) -> str:
        end = time.monotonic() + BROKER_START_DEADLINE_S
        while time.monotonic() < end:
            with open(self.log_path, errors="replace") as f:
                for line in f:
                    with contextlib.suppress(ValueError):
                        message = json.loads(line).get("msg", "")
                        if message.startswith("listening on "):
                            return f"127.0.0.1:{message.rpartition(':')[2]}"
            if self.proc.poll() is not None:
                raise SystemExit(f"the broker exited before listening:\n{self.tail()}")
            time.sleep(0.05)
        self.proc.kill()
        raise SystemExit(f"the broker did not start listening:\n{self.tail()}")

    def settle(self, limit: float = 30.0) -> None:
        """Wait (up to ``limit`` s) until the broker is idle: dispatch of an earlier
        workload's messages must not run into the next workload's window."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            cpu = CpuMeter(self.pid)
            time.sleep(0.5)
            if cpu.shares()[0] < 0.05:
                return
        note(f"{self.mode}: the broker was still busy after {limit:.0f} s")

    def tail(self) -> str:
        return log_tail(self.log_path)

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.data_dir, ignore_errors=True)


# -- baseline: a trivial gRPC echo server ----------------------------------------------


def serve_echo() -> None:
    """The echo server process: one generic unary method answering its request bytes."""

    async def main() -> None:
        async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return request

        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(echo)
        service, _, method = ECHO_METHOD.strip("/").partition("/")
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {method: handler}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"port {port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop(None)

    asyncio.run(main())


@contextlib.contextmanager
def echo_server() -> Iterator[tuple[str, int]]:
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-echo"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("port "):
            raise SystemExit("the echo server did not start")
        yield f"127.0.0.1:{line.split()[1]}", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure_echo(warmup: float, seconds: float) -> list[Figure]:
    """Unary calls per second with 64 outstanding, and the unloaded round trip."""
    payload = os.urandom(BODY_1K)

    async def drive(endpoint: str, pid: int) -> tuple[Figure, Figure]:
        async with grpc.aio.insecure_channel(endpoint) as channel:
            call = channel.unary_unary(ECHO_METHOD)  # no serializers: bytes travel as they are
            window = Window()
            stop = False

            async def caller() -> None:
                while not stop:
                    start = time.perf_counter()
                    await call(payload)
                    window.done(time.perf_counter() - start)

            cpu = CpuMeter(pid)
            callers = [asyncio.create_task(caller()) for _ in range(ECHO_CONCURRENCY)]
            await asyncio.sleep(warmup)
            window.begin()
            cpu.restart()
            await asyncio.sleep(seconds)
            window.end()
            server_cpu, client_cpu = cpu.shares()
            stop = True
            await asyncio.gather(*callers)
            rate = Figure(
                key="baseline/echo/64",
                mode="-",
                workload=f"gRPC echo, {ECHO_CONCURRENCY} outstanding",
                body_bytes=BODY_1K,
                messages=len(window.latencies),
                seconds=window.seconds,
                msg_per_s=len(window.latencies) / window.seconds,
                latency=latency_of(window.latencies),
                broker_cpu=server_cpu,
                client_cpu=client_cpu,
            )
            # One call at a time: the round trip without queueing.
            one = Window()
            one.begin()
            end = time.perf_counter() + min(seconds, 2.0)
            while time.perf_counter() < end:
                start = time.perf_counter()
                await call(payload)
                one.done(time.perf_counter() - start)
            one.end()
            rtt = Figure(
                key="baseline/echo/1",
                mode="-",
                workload="gRPC echo, 1 outstanding",
                body_bytes=BODY_1K,
                messages=len(one.latencies),
                seconds=one.seconds,
                msg_per_s=len(one.latencies) / one.seconds,
                latency=latency_of(one.latencies),
            )
            return rate, rtt

    with echo_server() as (endpoint, pid):
        rate, rtt = asyncio.run(drive(endpoint, pid))
    return [rate, rtt]


# -- baseline: the store in process ----------------------------------------------------


STORE_SHAPES = (("1KiB", "batch64"), ("100B", "batch64"), ("1KiB", "64tasks"))


def measure_store(root: str, mode: str, segment_mib: int, seconds: float) -> list[Figure]:
    figures = []
    for size, shape in STORE_SHAPES:
        got = store_bench.run_append_workload(
            root,
            mode,
            size,
            shape,
            segment_bytes=segment_mib * MiB,
            warmup=0.5,
            seconds=seconds,
            profiling=store_bench.Profiling(None),
        )
        figures.append(
            Figure(
                key=f"store/{mode}/{size}/{shape}",
                mode=mode,
                workload=f"store in process, {store_bench.SHAPE_TEXT[shape]}",
                body_bytes=store_bench.SIZES[size],
                messages=got.messages,
                seconds=got.seconds,
                msg_per_s=got.msg_per_s,
                latency=None,
            )
        )
    return figures


# -- the official client -----------------------------------------------------------------


def official_config(endpoint: str) -> Any:
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(endpoint, Credentials())


def official_message(topic: str, body: bytes, **properties: str) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    message.tag = "TagA"
    for name, value in properties.items():
        message.add_property(name, value)
    return message


@contextlib.contextmanager
def started(client: Any) -> Iterator[Any]:
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def official_send_threads(
    broker: BrokerProcess, threads: int, warmup: float, seconds: float
) -> tuple[Figure, int]:
    """Producer.send (blocking) from ``threads`` threads, back to back."""
    from rocketmq import Producer

    body = os.urandom(BODY_1K)
    window = Window()
    stop = threading.Event()
    sent = [0] * threads

    def sender(index: int, producer: Any) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                producer.send(official_message(SEND_TOPIC, body))
            except Exception:
                window.done(0.0, ok=False)
                continue
            window.done(time.perf_counter() - start)
            sent[index] += 1

    with started(Producer(official_config(broker.endpoint), (SEND_TOPIC,))) as producer:
        workers = [
            threading.Thread(target=sender, args=(i, producer), daemon=True) for i in range(threads)
        ]
        for worker in workers:
            worker.start()
        broker_cpu, client_cpu = measured(window, warmup, seconds, CpuMeter(broker.pid))
        stop.set()
        for worker in workers:
            worker.join()
    figure = Figure(
        key=f"{broker.mode}/official-send/{threads}threads",
        mode=broker.mode,
        workload=f"official Producer.send, {threads} threads",
        body_bytes=BODY_1K,
        messages=len(window.latencies),
        seconds=window.seconds,
        msg_per_s=len(window.latencies) / window.seconds,
        latency=latency_of(window.latencies),
        broker_cpu=broker_cpu,
        client_cpu=client_cpu,
        errors=window.errors,
    )
    return figure, sum(sent)


def official_send_async(broker: BrokerProcess, warmup: float, seconds: float) -> tuple[Figure, int]:
    """Producer.send_async with up to SEND_ASYNC_WINDOW futures outstanding."""
    from rocketmq import Producer

    body = os.urandom(BODY_1K)
    window = Window()
    room = threading.BoundedSemaphore(SEND_ASYNC_WINDOW)
    stop = threading.Event()
    sent = [0]

    def submitter(producer: Any) -> None:
        while not stop.is_set():
            if not room.acquire(timeout=0.1):
                continue
            start = time.perf_counter()

            def finished(future: concurrent.futures.Future, start: float = start) -> None:
                ok = future.exception() is None
                window.done(time.perf_counter() - start, ok)
                sent[0] += ok
                room.release()

            try:
                producer.send_async(official_message(SEND_TOPIC, body)).add_done_callback(finished)
            except Exception:
                window.done(0.0, ok=False)
                room.release()

    with started(Producer(official_config(broker.endpoint), (SEND_TOPIC,))) as producer:
        worker = threading.Thread(target=submitter, args=(producer,), daemon=True)
        worker.start()
        broker_cpu, client_cpu = measured(window, warmup, seconds, CpuMeter(broker.pid))
        stop.set()
        worker.join()
        # Let the outstanding sends finish before the producer shuts down.
        for _ in range(SEND_ASYNC_WINDOW):
            room.acquire(timeout=WAIT_DEADLINE_S)
    figure = Figure(
        key=f"{broker.mode}/official-send-async",
        mode=broker.mode,
        workload=f"official Producer.send_async, {SEND_ASYNC_WINDOW} outstanding",
        body_bytes=BODY_1K,
        messages=len(window.latencies),
        seconds=window.seconds,
        msg_per_s=len(window.latencies) / window.seconds,
        latency=latency_of(window.latencies),
        broker_cpu=broker_cpu,
        client_cpu=client_cpu,
        errors=window.errors,
    )
    return figure, sent[0]


def official_drain(broker: BrokerProcess, backlog: int, max_seconds: float) -> Figure:
    """A SimpleConsumer (receive 32 + ack each, in threads) draining the send backlog."""
    from rocketmq import FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(
        official_config(broker.endpoint),
        f"bench-drain-{broker.mode.lower().replace('_', '-')}",
        {SEND_TOPIC: FilterExpression("*")},
        1,  # long-poll briefly once the backlog is gone
    )
    acked = [0]
    lock = threading.Lock()
    errors = [0]
    stop = threading.Event()

    def drainer() -> None:
        while not stop.is_set():
            try:
                messages = consumer.receive(32, 60)
            except Exception:
                errors[0] += 1
                continue
            for message in messages:
                try:
                    consumer.ack(message)
                except Exception:
                    errors[0] += 1
                    continue
                with lock:
                    acked[0] += 1
                    if acked[0] >= backlog:
                        stop.set()

    with started(consumer):
        cpu = CpuMeter(broker.pid)
        start = time.perf_counter()
        workers = [threading.Thread(target=drainer, daemon=True) for _ in range(DRAIN_THREADS)]
        for worker in workers:
            worker.start()
        stop.wait(max_seconds)
        elapsed = time.perf_counter() - start
        broker_cpu, client_cpu = cpu.shares()
        stop.set()
        for worker in workers:
            worker.join()
    done = min(acked[0], backlog)
    return Figure(
        key=f"{broker.mode}/official-drain",
        mode=broker.mode,
        workload=f"official SimpleConsumer receive+ack, {DRAIN_THREADS} threads",
        body_bytes=BODY_1K,
        messages=done,
        seconds=elapsed,
        msg_per_s=done / elapsed,
        latency=None,
        broker_cpu=broker_cpu,
        client_cpu=client_cpu,
        errors=errors[0],
        note=f"{done} of a {backlog}-message backlog"
        + ("" if done >= backlog else f" in the {max_seconds:.0f} s limit"),
    )


def official_push_latency(broker: BrokerProcess, rate: int, seconds: float) -> Figure:
    """Send at a fixed rate; a PushConsumer records send-start to consume-call latency."""
    from rocketmq import ConsumeResult, FilterExpression, MessageListener, Producer, PushConsumer

    latencies: list[float] = []
    lock = threading.Lock()
    seen: set[str] = set()

    class Recorder(MessageListener):
        def consume(self, message: Any) -> Any:
            now = time.perf_counter_ns()
            sent = int(message.properties.get("sent_ns", "0"))
            with lock:
                if message.message_id not in seen:
                    seen.add(message.message_id)
                    if sent:
                        latencies.append((now - sent) / 1e9)
            return ConsumeResult.SUCCESS

    config = official_config(broker.endpoint)
    body = os.urandom(BODY_1K)
    group = f"bench-push-{broker.mode.lower().replace('_', '-')}"
    subscription = {E2E_TOPIC: FilterExpression("*")}
    with (
        started(PushConsumer(config, group, Recorder(), subscription)),
        started(Producer(config, (E2E_TOPIC,))) as producer,
    ):
        # Wait until the consumer is assigned and polling: a marker must come back.
        end = time.monotonic() + WAIT_DEADLINE_S
        while time.monotonic() < end:
            producer.send(official_message(E2E_TOPIC, body))
            time.sleep(0.5)
            with lock:
                if seen:
                    break
        with lock:
            latencies.clear()
            seen.clear()
        cpu = CpuMeter(broker.pid)
        total = int(rate * seconds)
        start = time.perf_counter()
        errors = 0
        for i in range(total):
            due = start + i / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            try:
                producer.send(
                    official_message(E2E_TOPIC, body, sent_ns=str(time.perf_counter_ns()))
                )
            except Exception:
                errors += 1
        elapsed = time.perf_counter() - start
        broker_cpu, client_cpu = cpu.shares()
        end = time.monotonic() + WAIT_DEADLINE_S
        while time.monotonic() < end:
            with lock:
                if len(latencies) >= total - errors:
                    break
            time.sleep(0.05)
    with lock:
        received = list(latencies)
    return Figure(
        key=f"{broker.mode}/official-push-e2e",
        mode=broker.mode,
        workload=f"official PushConsumer end to end, {rate} msg/s",
        body_bytes=BODY_1K,
        messages=len(received),
        seconds=elapsed,
        msg_per_s=None,
        latency=latency_of(received),
        broker_cpu=broker_cpu,
        client_cpu=client_cpu,
        errors=errors,
        note=f"{len(received)} of {total} consumed",
    )


# -- Skiff's BatchingProducer -----------------------------------------------------------


def batching_throughput(
    broker: BrokerProcess, body_bytes: int, warmup: float, seconds: float
) -> Figure:
    """BATCHING_SENDERS coroutines calling send() back to back (defaults: 5 ms, 256, 4)."""
    body = os.urandom(body_bytes)

    async def main() -> Figure:
        window = Window()
        stop = False
        async with BatchingProducer(broker.endpoint) as producer:

            async def sender() -> None:
                while not stop:
                    start = time.perf_counter()
                    try:
                        await producer.send(BATCH_TOPIC, body, tag="TagA")
                    except Exception:
                        window.done(0.0, ok=False)
                        continue
                    window.done(time.perf_counter() - start)

            cpu = CpuMeter(broker.pid)
            senders = [asyncio.create_task(sender()) for _ in range(BATCHING_SENDERS)]
            await asyncio.sleep(warmup)
            window.begin()
            requests0 = producer.stats().requests_sent
            cpu.restart()
            await asyncio.sleep(seconds)
            window.end()
            broker_cpu, client_cpu = cpu.shares()
            requests = producer.stats().requests_sent - requests0
            stop = True
            await asyncio.gather(*senders)
        messages = len(window.latencies)
        return Figure(
            key=f"{broker.mode}/batching/{body_bytes}B",
            mode=broker.mode,
            workload=f"Skiff BatchingProducer, {BATCHING_SENDERS} senders",
            body_bytes=body_bytes,
            messages=messages,
            seconds=window.seconds,
            msg_per_s=messages / window.seconds,
            latency=latency_of(window.latencies),
            broker_cpu=broker_cpu,
            client_cpu=client_cpu,
            errors=window.errors,
            requests=requests,
            note=f"{messages / max(requests, 1):.0f} msg/request",
        )

    return asyncio.run(main())


def batching_latency(broker: BrokerProcess, rate: float, seconds: float) -> Figure:
    """Open loop: send() calls started at a fixed rate, each timed to its receipt."""
    body = os.urandom(BODY_1K)

    async def main() -> Figure:
        window = Window()
        async with BatchingProducer(broker.endpoint) as producer:

            async def one() -> None:
                start = time.perf_counter()
                try:
                    await producer.send(BATCH_TOPIC, body, tag="TagA")
                except Exception:
                    window.done(0.0, ok=False)
                    return
                window.done(time.perf_counter() - start)

            cpu = CpuMeter(broker.pid)
            tasks: set[asyncio.Task] = set()
            window.begin()
            start = time.perf_counter()
            issued = 0
            total = int(rate * seconds)
            while issued < total:
                due = int((time.perf_counter() - start) * rate) + 1
                for _ in range(min(due, total) - issued):
                    task = asyncio.create_task(one())
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                issued = max(issued, min(due, total))
                await asyncio.sleep(0.001)
            await asyncio.gather(*tasks)
            window.end()
            broker_cpu, client_cpu = cpu.shares()
        return Figure(
            key=f"{broker.mode}/batching-latency",
            mode=broker.mode,
            workload=f"Skiff BatchingProducer at {rate:,.0f} msg/s (half its max)",
            body_bytes=BODY_1K,
            messages=len(window.latencies),
            seconds=window.seconds,
            msg_per_s=len(window.latencies) / window.seconds,
            latency=latency_of(window.latencies),
            broker_cpu=broker_cpu,
            client_cpu=client_cpu,
            errors=window.errors,
        )

    return asyncio.run(main())


# -- profile of the broker ------------------------------------------------------------


def py_spy() -> str | None:
    """py-spy on the PATH, or installed beside this interpreter (a venv not activated)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))


class BrokerProfile:
    """py-spy sampling the broker process (whichever thread holds the GIL) in one workload."""

    def __init__(self, out_dir: str | None) -> None:
        self.out_dir = out_dir
        self._proc: subprocess.Popen | None = None
        self.raw_path = ""
        self.summary: dict[str, Any] | None = None
        self._py_spy = py_spy()
        if out_dir is not None:
            if self._py_spy is None:
                raise SystemExit("--profile needs py-spy: pip install py-spy")
            os.makedirs(out_dir, exist_ok=True)

    def begin(self, pid: int, seconds: float, name: str) -> None:
        if self.out_dir is None:
            return
        self.raw_path = os.path.join(self.out_dir, f"{name}.pyspy.txt")
        assert self._py_spy is not None
        self._proc = subprocess.Popen(
            [
                self._py_spy,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(max(1, int(seconds))),
                "--rate",
                "250",
                "--format",
                "raw",
                "--nonblocking",  # do not pause the broker to sample it
                # Only the thread holding the GIL: the broker is bound by one core's
                # worth of Python, so this is where its time goes.
                "--gil",
                "--threads",
                "--output",
                self.raw_path,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def end(self) -> None:
        if self._proc is None:
            return
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        if os.path.exists(self.raw_path):
            self.summary = summarize_profile(self.raw_path)
            with open(self.raw_path.replace(".pyspy.txt", ".summary.txt"), "w") as f:
                f.write(render_profile(self.summary) + "\n")


def _component(frame: str) -> str:
    """Which part of the broker a leaf frame belongs to."""
    name, _, where = frame.partition(" (")
    if name == "Handle._run":
        # Without native frames, C code run from a loop callback or task step stops
        # here: grpc.aio's Cython layer (its socket writes and wake-ups) and asyncio's C.
        return "C under the event loop (grpc.aio Cython, syscalls)"
    for marker, component in (
        ("skiff_broker/store/", "store"),
        ("skiff_broker/messaging/", "gRPC handlers (Skiff)"),
        ("skiff_broker/delivery/", "delivery (Skiff)"),
        ("skiff_broker/", "other Skiff"),
        ("grpc/", "grpcio Python layer"),
        ("google/protobuf", "protobuf Python layer"),
        ("asyncio/", "asyncio (Python)"),
        ("selectors.py", "asyncio (Python)"),
        ("threading.py", "threading"),
    ):
        if marker in where:
            return component
    return "other"


def summarize_profile(raw_path: str) -> dict[str, Any]:
    """Self time per function and per component, inclusive time of Skiff's functions."""
    total = 0
    by_thread: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    components: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    with open(raw_path) as f:
        for line in f:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = stack.split(";")
            thread = frames[0] if frames[0].startswith("thread ") else "?"
            frames = [fr for fr in frames if not fr.startswith(("thread ", "process "))]
            if not frames:
                continue
            total += count
            by_thread[thread] += count
            leaf = frames[-1]
            own[_short(leaf)] += count
            components[_component(leaf)] += count
            for frame in set(frames):
                if "skiff_broker/" in frame:
                    inclusive[_short(frame)] += count
    share = 1 / total if total else 0.0
    return {
        "samples": total,
        "threads": {k: v * share for k, v in by_thread.most_common(8)},
        "components": {k: v * share for k, v in components.most_common()},
        "self": {k: v * share for k, v in own.most_common(15)},
        "skiff_inclusive": {k: v * share for k, v in inclusive.most_common(15)},
    }


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    path = where.rstrip(")")
    for marker in ("site-packages/", "skiff_broker/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def render_profile(summary: dict[str, Any]) -> str:
    lines = [f"py-spy samples: {summary['samples']} (the broker thread holding the GIL)"]
    for title, key in (
        ("share by component (leaf frame)", "components"),
        ("top self time", "self"),
        ("Skiff functions, inclusive", "skiff_inclusive"),
        ("by thread", "threads"),
    ):
        lines.append(f"  {title}:")
        lines += [f"    {v * 100:5.1f}%  {k}" for k, v in summary[key].items()]
    return "\n".join(lines)


# -- report ----------------------------------------------------------------------------


def apply_ratios(figures: list[Figure], echo: Figure, rtt: Figure) -> None:
    stores = {f.key: f for f in figures if f.key.startswith("store/")}
    for f in figures:
        if f.key.startswith(("store/", "baseline/")):
            continue
        if f.msg_per_s is not None and echo.msg_per_s:
            f.x_echo = f.msg_per_s / echo.msg_per_s
        elif f.latency is not None and rtt.latency is not None:
            # Latency rows: how many unloaded gRPC round trips the p50 is.
            f.x_echo = f.latency.p50_ms / rtt.latency.p50_ms
        if "/official-send" in f.key:
            f.store_key = f"store/{f.mode}/1KiB/64tasks"
        elif "/batching/" in f.key:
            f.store_key = f"store/{f.mode}/{'1KiB' if f.body_bytes == BODY_1K else '100B'}/batch64"
        if f.store_key in stores and f.msg_per_s is not None:
            f.x_store = f.msg_per_s / stores[f.store_key].msg_per_s


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(figures: list[Figure], machine: dict[str, Any], elapsed: float) -> str:
    load_start = machine["loadavg_start"][0]
    load_end = machine["loadavg_end"][0]
    busy = max(load_start, load_end) > machine["nproc"]
    header = (
        f"{'workload':<54} {'mode':<11} {'body':>5} {'msg/s':>9} {'MB/s':>6} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'p99.9':>7} {'x echo':>7} {'x store':>7} "
        f"{'brk cpu':>7} {'cli cpu':>7} {'err':>4}  note"
    )
    lines = [
        f"Skiff broker benchmark: {machine['nproc']} CPUs ({machine['cpu_model']}), "
        f"Python {machine['python']}, data on {machine['filesystem']} "
        f"({machine['mount_point']}), {elapsed:.0f} s; load average {load_start:.1f} at the "
        f"start, {load_end:.1f} at the end"
        + (" (above the CPU count: other work shared the machine)" if busy else ""),
        "",
        header,
        "-" * len(header),
    ]
    for f in figures:
        lat = f.latency
        body = f"{f.body_bytes}B" if f.body_bytes < KiB else f"{f.body_bytes // KiB}K"
        lines.append(
            f"{f.workload:<54} {f.mode:<11} {body:>5} {_num(f.msg_per_s, ',.0f'):>9} "
            f"{_num(f.body_mb_per_s, '.1f'):>6} "
            f"{_num(lat and lat.p50_ms, '.2f'):>7} {_num(lat and lat.p99_ms, '.2f'):>7} "
            f"{_num(lat and lat.p999_ms, '.2f'):>7} {_num(f.x_echo, '.2f'):>7} "
            f"{_num(f.x_store, '.3f'):>7} {_num(f.broker_cpu, '.2f'):>7} "
            f"{_num(f.client_cpu, '.2f'):>7} {f.errors:>4}  {f.note}"
        )
    lines += [
        "",
        "x echo: msg/s / gRPC echo calls/s (64 outstanding); for the push row, p50 / unloaded",
        "echo round trip. x store: msg/s / the store's in-process rate for the same mode and",
        "shape (official sends: 64 tasks x 1 message; BatchingProducer: batches of 64).",
        "brk/cli cpu: CPU seconds per second of the broker (or echo server) and of this",
        "process (clients); 1.00 = one core.",
    ]
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=".", help="a directory on the disk to measure")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per workload")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up per workload")
    parser.add_argument("--modes", default=",".join(MODES), help="flush modes to run")
    parser.add_argument("--threads", type=int, default=16, help="Producer.send threads")
    parser.add_argument("--push-rate", type=int, default=200, help="PushConsumer test msg/s")
    parser.add_argument("--drain-seconds", type=float, default=10.0, help="drain time limit")
    parser.add_argument("--segment-mib", type=int, default=256, help="commit-log segment size")
    parser.add_argument("--json", metavar="OUT", help="write every figure as JSON")
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="sample the broker with py-spy during the first Producer.send workload",
    )
    parser.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown flush modes {sorted(unknown)}; choose from {list(MODES)}")
    args.modes = modes
    return args


def run_mode(
    root: str, mode: str, args: argparse.Namespace, profile: BrokerProfile
) -> list[Figure]:
    figures: list[Figure] = []
    note(f"{mode}: starting a broker")
    broker = BrokerProcess(root, mode, args.segment_mib)
    try:
        broker.settle()
        note(f"{mode}: official Producer.send, {args.threads} threads")
        if profile.summary is None:
            profile.begin(broker.pid, args.warmup + args.seconds, f"{mode}-official-send")
        figure, sent = official_send_threads(broker, args.threads, args.warmup, args.seconds)
        profile.end()
        figures.append(figure)
        broker.settle()
        note(f"{mode}: official Producer.send_async")
        figure, sent_async = official_send_async(broker, args.warmup, args.seconds)
        figures.append(figure)
        broker.settle()
        note(f"{mode}: official SimpleConsumer draining {sent + sent_async} messages")
        figures.append(official_drain(broker, sent + sent_async, args.drain_seconds))
        broker.settle()
        note(f"{mode}: official PushConsumer at {args.push_rate} msg/s")
        figures.append(official_push_latency(broker, args.push_rate, args.seconds))
        for body in (BODY_1K, BODY_100):
            broker.settle()
            note(f"{mode}: BatchingProducer, {body} B")
            figures.append(batching_throughput(broker, body, args.warmup, args.seconds))
        most = figures[-2].msg_per_s or 0.0
        if most > 0:
            broker.settle()
            note(f"{mode}: BatchingProducer latency at {most / 2:,.0f} msg/s")
            figures.append(batching_latency(broker, most / 2, min(args.seconds, 3.0)))
    except BaseException:
        note(f"broker log tail:\n{broker.tail()}")
        raise
    finally:
        broker.stop()
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_echo:
        serve_echo()
        return 0
    started_at = time.perf_counter()
    data_dir = os.path.abspath(args.data_dir)
    _, _, fstype = store_bench._mount_of(data_dir)
    if fstype in ("tmpfs", "ramfs"):
        raise SystemExit(f"{data_dir} is on {fstype}; point --data-dir at a real disk")
    machine = store_bench.machine_info(data_dir)
    profile = BrokerProfile(args.profile)
    root = tempfile.mkdtemp(prefix="skiff-broker-bench-", dir=data_dir)
    figures: list[Figure] = []
    try:
        note("baseline: gRPC echo server")
        echo, rtt = measure_echo(args.warmup, args.seconds)
        figures += [echo, rtt]
        for mode in args.modes:
            note(f"baseline: store in process, {mode}")
            figures += measure_store(root, mode, args.segment_mib, min(args.seconds, 3.0))
        for mode in args.modes:
            figures += run_mode(root, mode, args, profile)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    apply_ratios(figures, echo, rtt)
    elapsed = time.perf_counter() - started_at
    machine["loadavg_end"] = os.getloadavg()
    print(render(figures, machine, elapsed))
    if profile.summary is not None:
        print()
        print(
            f"Broker profile during the first official Producer.send workload ({profile.raw_path})"
        )
        print(render_profile(profile.summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine,
                    "seconds": elapsed,
                    "arguments": {k: v for k, v in vars(args).items() if k != "serve_echo"},
                    "figures": [dataclasses.asdict(f) for f in figures],
                    "profile": profile.summary,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
