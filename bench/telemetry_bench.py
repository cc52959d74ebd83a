#!/usr/bin/env python3
"""What telemetry costs: store and server throughput with telemetry off and on.

Runs come in pairs, ``off`` and ``default`` (and ``100%`` with ``--full``), one pair
per round, in alternating order (off first in odd rounds, last in even ones), each run
on a fresh data directory of the same layout; a pair's ratio is
on/off, so slow drifts of a noisy machine hit both sides of it. The figure reported is
the median of the per-pair ratios, with their spread (min..max and interquartile range).

- ``off``: no OTEL_* exporter configured (the store gets no observer, the server no
  interceptor);
- ``default``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` only, so the broker's default sampler
  (parent-based, trace-id ratio ``DEFAULT_SAMPLE_RATIO``) and default export intervals;
- ``100%`` (``--full``): the same with ``OTEL_TRACES_SAMPLER_ARG=1``: every request traced;
- ``metrics`` (``--metrics``): no OTEL_* exporter, the Prometheus endpoint only
  (``--metrics-listen``, on by default in a broker): RocketMQ's counters per request and
  the latency and message size histograms, read by nobody during the run.

``off`` and ``default`` serve no /metrics (``--metrics-listen ""``), as every broker
did before the endpoint existed, so their figures compare with earlier runs.

Telemetry is exported over OTLP/HTTP to a receiver in a process of its own
(``python -m tests.support.otlp_receiver``), so the exporting is part of what is measured.

- store level (information): one ``MessageStore`` in this process, ``--appenders``
  asyncio tasks each putting one 100-byte message at a time with ``put_messages_async``
  (the way the gRPC server drives the store). Appends have no parent span: they are new
  traces, sampled by the ratio.
- server level (the requirement: default/off >= 0.95): a real broker process
  (``python -m skiff_broker broker``) and, in this process, ``--clients`` concurrent
  asyncio clients, each on its own channel, sending one-message ``SendMessage`` requests
  over raw gRPC without trace context, as the official clients do.

Throughput pairs are noisy on a shared machine, so the server level also reports the
broker's own CPU time per message (from ``/proc``), and ``--profile`` samples the broker
with py-spy (only the thread holding the GIL) during every ``default`` run and reports
the share of those samples spent in telemetry code (Skiff's telemetry package and the
OpenTelemetry SDK and exporters): for a broker bound by one core's worth of Python, that
share is the throughput telemetry takes, measured inside one run instead of between two.

``--instructions N`` counts instead of timing (server level only): the broker runs under
valgrind's callgrind (``apt install valgrind``), counting nothing until it is warm; then
the clients send exactly N messages and the instructions the broker executed in that
span, all threads, are read. Counts do not drift with the machine's load, so a change of
1% shows in one run (runs of one mode differ by about 0.5% with one client, 1-2% with
several, whose calls coalesce differently run to run). Time-driven work weighs more
than in a timed run: the broker runs about 40 times slower under callgrind, so a
periodic span export serves 40 times fewer messages.

Run from the repository root:
``python bench/telemetry_bench.py [--seconds S] [--rounds N] [--only store|server] [--full]
[--profile DIR] [--instructions N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "broker"), str(ROOT), str(ROOT / "bench")]

import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub  # noqa: E402
from tests.support.broker_process import (  # noqa: E402
    SKIFF,
    create_topics,
    data_dir_of,
    running_broker,
)
from tests.support.process_stats import cpu_seconds  # noqa: E402
from tests.support.span_files import send_request  # noqa: E402

from broker_bench import BrokerProfile  # noqa: E402
from skiff_broker.metadata.topic_table import TopicConfig  # noqa: E402
from skiff_broker.store.config import FlushType, StoreConfig  # noqa: E402
from skiff_broker.store.message import Message  # noqa: E402
from skiff_broker.store.message_store import MessageStore  # noqa: E402
from skiff_broker.telemetry import telemetry_from_env  # noqa: E402
from skiff_broker.telemetry.setup import DEFAULT_SAMPLE_RATIO  # noqa: E402

MODES = ("off", "default", "100%", "metrics")
FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
TOPIC = "BenchTopic"
QUEUES = 8
BODY = b"x" * 100
WARMUP_S = 1.0
TARGET_RATIO = 0.95


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- the receiver and the OTEL_* settings of each mode --------------------------------


@contextlib.contextmanager
def receiver_process() -> Iterator[str]:
    """An OTLP/HTTP receiver in its own process; yields its endpoint."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.otlp_receiver"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("listening on "):
            raise RuntimeError(f"the OTLP receiver did not start: {line!r}")
        yield f"http://127.0.0.1:{line.split()[-1]}"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        note(f"receiver: {out.strip()}")


def otel_env(mode: str, endpoint: str) -> dict[str, str]:
    """The OTEL_* variables of ``mode``; every other OTEL_* variable is blanked."""
    env = {name: "" for name in os.environ if name.startswith("OTEL_")}
    env["SKIFF_METRICS_LISTEN"] = "127.0.0.1:0" if mode == "metrics" else ""
    if mode not in ("off", "metrics"):
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    if mode == "100%":
        env["OTEL_TRACES_SAMPLER_ARG"] = "1"
    return env


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- store level -----------------------------------------------------------------------


def store_run(
    work: Path, flush_type: str, mode: str, endpoint: str, seconds: float, appenders: int
) -> float:
    with environment(otel_env(mode, endpoint)):
        telemetry = telemetry_from_env(
            "bench", metrics_listen=os.environ.get("SKIFF_METRICS_LISTEN", "")
        )
    data_dir = Path(tempfile.mkdtemp(dir=work))
    config = StoreConfig(
        data_dir=str(data_dir),
        flush_type=FlushType(flush_type),
        commit_log_file_size=256 * 1024 * 1024,
    )
    store = MessageStore(config, observer=telemetry.store_observer())
    store.start()
    try:
        return asyncio.run(_append_for(store, seconds, appenders))
    finally:
        store.shutdown()
        telemetry.shutdown()
        shutil.rmtree(data_dir)


async def _append_for(store: MessageStore, seconds: float, appenders: int) -> float:
    counting = False
    count = 0
    stop = False

    async def appender(queue_id: int) -> None:
        nonlocal count
        message = [Message(topic=TOPIC, body=BODY, queue_id=queue_id)]
        while not stop:
            result = await store.put_messages_async(message)
            assert result.ok, result
            if counting:
                count += 1
            # As a server does between requests (an ASYNC_FLUSH put never suspends).
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(appender(i % QUEUES)) for i in range(appenders)]
    await asyncio.sleep(WARMUP_S)
    counting = True
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    counting = False
    elapsed = time.perf_counter() - started
    stop = True
    await asyncio.gather(*tasks)
    return count / elapsed


# -- server level ----------------------------------------------------------------------


def broker_setup(
    work: Path, flush_type: str, mode: str, endpoint: str
) -> tuple[Path, dict[str, str], tuple[str, ...]]:
    """A fresh directory under ``work`` with the bench topic, and the environment and
    arguments of a broker in ``mode``."""
    tmp = Path(tempfile.mkdtemp(dir=work))
    create_topics(data_dir_of(tmp), TopicConfig(TOPIC, QUEUES, QUEUES))
    env = otel_env(mode, endpoint)
    args = ("--flush-type", flush_type, "--commit-log-file-size", "256m")
    # On the command line: an empty SKIFF_METRICS_LISTEN counts as unset, which is the
    # default endpoint (port 5557), not none.
    args += ("--metrics-listen", env["SKIFF_METRICS_LISTEN"])
    return tmp, env, args


def server_run(
    work: Path,
    flush_type: str,
    mode: str,
    endpoint: str,
    seconds: float,
    clients: int,
    profile: BrokerProfile | None = None,
) -> tuple[float, float]:
    """Messages per second, and the broker's CPU microseconds per message."""
    tmp, env, args = broker_setup(work, flush_type, mode, endpoint)
    try:
        with running_broker(tmp, *args, env=env) as broker:
            if profile is not None:
                # Started now, it samples the warm-up too: the share is what matters.
                profile.begin(broker.proc.pid, WARMUP_S + seconds, f"{flush_type}-{mode}")
            try:
                return asyncio.run(_send_for(broker.endpoint, broker.proc.pid, seconds, clients))
            finally:
                if profile is not None:
                    profile.end()
    finally:
        shutil.rmtree(tmp)


async def _send_for(
    endpoint: str, broker_pid: int, seconds: float, clients: int
) -> tuple[float, float]:
    counting = False
    count = 0
    stop = False

    async def client() -> None:
        nonlocal count
        async with grpc.aio.insecure_channel(endpoint) as channel:
            stub = MessagingServiceStub(channel)
            while not stop:
                response = await stub.SendMessage(send_request(TOPIC, BODY), timeout=30)
                assert response.status.code == pb.Code.OK, response.status
                if counting:
                    count += 1

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    await asyncio.sleep(WARMUP_S)
    counting = True
    started = time.perf_counter()
    cpu_started = cpu_seconds(broker_pid)
    await asyncio.sleep(seconds)
    counting = False
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(broker_pid) - cpu_started
    stop = True
    await asyncio.gather(*tasks)
    return count / elapsed, cpu * 1e6 / max(count, 1)


# -- instructions instead of time -----------------------------------------------------

CALLGRIND_WARMUP_MESSAGES = 400


def server_instructions(
    work: Path, flush_type: str, mode: str, endpoint: str, messages: int, clients: int
) -> float:
    """The instructions the broker executes per message, ``messages`` sent once it is warm."""
    tmp, env, args = broker_setup(work, flush_type, mode, endpoint)
    out = tmp / "callgrind.out"
    launcher = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        *SKIFF,
    ]
    try:
        with running_broker(tmp, *args, env=env, launcher=launcher) as broker:
            pid = str(broker.proc.pid)
            asyncio.run(_send_count(broker.endpoint, CALLGRIND_WARMUP_MESSAGES, clients))
            _callgrind_control("--instr=on", pid)
            asyncio.run(_send_count(broker.endpoint, messages, clients))
            _callgrind_control("--dump", pid)
            broker.kill()
        # The dump taken on request is the first numbered part; the rest is the kill's.
        for line in Path(f"{out}.1").read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1]) / messages
        raise RuntimeError(f"no summary line in {out}.1")
    finally:
        shutil.rmtree(tmp)


def _callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


async def _send_count(endpoint: str, messages: int, clients: int) -> None:
    """``messages`` one-message SendMessage calls from ``clients`` concurrent clients."""
    left = messages

    async def client() -> None:
        nonlocal left
        async with grpc.aio.insecure_channel(endpoint) as channel:
            stub = MessagingServiceStub(channel)
            while left > 0:
                left -= 1
                response = await stub.SendMessage(send_request(TOPIC, BODY), timeout=600)
                assert response.status.code == pb.Code.OK, response.status

    await asyncio.gather(*(client() for _ in range(clients)))


def count_instructions(args: argparse.Namespace, modes: list[str]) -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--instructions needs valgrind's callgrind: apt install valgrind")
    flush_types = [args.flush] if args.flush else list(FLUSH_TYPES)
    counts: dict[tuple[str, str], list[float]] = {}
    work = Path(tempfile.mkdtemp(prefix="telemetry-bench-", dir=args.data_dir))
    try:
        with receiver_process() as endpoint:
            for round_no in range(args.rounds):
                for flush_type in flush_types:
                    for mode in modes if round_no % 2 == 0 else modes[::-1]:
                        per_message = server_instructions(
                            work, flush_type, mode, endpoint, args.instructions, args.clients
                        )
                        counts.setdefault((flush_type, mode), []).append(per_message)
                        note(
                            f"round {round_no + 1}: {flush_type} {mode}: "
                            f"{per_message:,.0f} instructions a message"
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"broker instructions a message (callgrind, all threads), {args.instructions:,} "
        f"messages a run once warm, {args.clients} gRPC clients, {args.rounds} rounds; "
        f"default sampler parentbased_traceidratio {DEFAULT_SAMPLE_RATIO:g}"
    )
    for flush_type in flush_types:
        off = statistics.median(counts[(flush_type, "off")])
        print(f"server {flush_type}: off median {off:,.0f}")
        for mode in modes[1:]:
            on = counts[(flush_type, mode)]
            print(
                f"  {mode + '/off':<12} {statistics.median(on) / off:.3f} "
                f"(runs {', '.join(f'{c:,.0f}' for c in on)})"
            )


# -- where the broker's time goes ------------------------------------------------------

_TELEMETRY_CODE = ("skiff_broker/telemetry/", "opentelemetry/")
_PLAIN_BROKER_CODE = "skiff_broker/"


def telemetry_samples(raw_path: str) -> tuple[int, int]:
    """(samples in telemetry code, all samples) of a py-spy raw profile.

    A sample counts when its stack passes through telemetry code and nothing of the
    broker's own runs beneath that: the SERVER span wrapper awaiting the handler is the
    handler's time, not telemetry's.
    """
    in_telemetry = total = 0
    with open(raw_path) as f:
        for line in f:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            total += count
            frames = stack.split(";")
            for depth, frame in enumerate(frames):
                if any(code in frame for code in _TELEMETRY_CODE) and not any(
                    _PLAIN_BROKER_CODE in below and "skiff_broker/telemetry/" not in below
                    for below in frames[depth + 1 :]
                ):
                    in_telemetry += count
                    break
    return in_telemetry, total


# -- report ----------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    if len(values) < 4:
        return f"{min(values):.3f}..{max(values):.3f}"
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{min(values):.3f}..{max(values):.3f} (IQR {q1:.3f}..{q3:.3f})"


def cpu_cost(off: list[float], on: list[float], mode: str) -> dict[str, Any]:
    """The broker's CPU per message, on over off, pair by pair; printed and returned.

    Less noisy than throughput on a shared machine: the broker's own CPU time per
    message does not depend on how much CPU the clients or other processes took, and
    for a broker that is busy on its core, throughput is its inverse.
    """
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    median = statistics.median(ratios)
    print(
        f"  broker CPU per message: off median {statistics.median(off):.0f} us, "
        f"{mode} {statistics.median(on):.0f} us; {mode}/off median of pair ratios "
        f"{median:.3f}, spread {spread(ratios)} (throughput equivalent {1 / median:.3f})"
    )
    return {"off_us": off, "on_us": on, "ratios": ratios, "median": median}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured window per run")
    parser.add_argument("--rounds", type=int, default=8, help="off/on pairs per figure")
    parser.add_argument("--appenders", type=int, default=16, help="store-level asyncio tasks")
    parser.add_argument("--clients", type=int, default=8, help="server-level gRPC clients")
    parser.add_argument("--only", choices=("store", "server"), help="one level only")
    parser.add_argument("--flush", choices=FLUSH_TYPES, help="one flush type only")
    parser.add_argument("--full", action="store_true", help="also measure 100%% sampling")
    parser.add_argument(
        "--metrics", action="store_true", help="also measure the Prometheus endpoint alone"
    )
    parser.add_argument("--data-dir", type=Path, default=Path.cwd(), help="where to work")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="py-spy the broker in every telemetry-on server run (pip install py-spy)",
    )
    parser.add_argument(
        "--instructions",
        type=int,
        metavar="N",
        help="count the broker's instructions for N messages a run instead (needs valgrind)",
    )
    args = parser.parse_args()
    modes = [m for m in MODES if m in ("off", "default") or (args.full and m == "100%")]
    if args.metrics:
        modes.append("metrics")
    if args.instructions:
        count_instructions(args, modes)
        return
    profile = BrokerProfile(args.profile) if args.profile else None
    # flush type -> [samples in telemetry code, all samples]
    profiled: dict[str, list[int]] = {}

    levels = [args.only] if args.only else ["store", "server"]
    flush_types = [args.flush] if args.flush else list(FLUSH_TYPES)
    runs: dict[tuple[str, str, str], list[float]] = {}
    # Server level only: the broker's CPU microseconds per message of each run.
    broker_cpu: dict[tuple[str, str, str], list[float]] = {}
    work = Path(tempfile.mkdtemp(prefix="telemetry-bench-", dir=args.data_dir))
    try:
        with receiver_process() as endpoint:
            for round_no in range(args.rounds):
                for level in levels:
                    for flush_type in flush_types:
                        # Alternate which side of a pair runs first: the second run of a
                        # pair inherits the first one's disk writeback and page cache.
                        for mode in modes if round_no % 2 == 0 else modes[::-1]:
                            if level == "store":
                                rate = store_run(
                                    work, flush_type, mode, endpoint, args.seconds, args.appenders
                                )
                            else:
                                rate, cpu_us = server_run(
                                    work,
                                    flush_type,
                                    mode,
                                    endpoint,
                                    args.seconds,
                                    args.clients,
                                    profile if mode != "off" else None,
                                )
                                if profile is not None and mode != "off" and profile.raw_path:
                                    counts = profiled.setdefault(f"{flush_type} {mode}", [0, 0])
                                    for i, n in enumerate(telemetry_samples(profile.raw_path)):
                                        counts[i] += n
                                broker_cpu.setdefault((level, flush_type, mode), []).append(cpu_us)
                            runs.setdefault((level, flush_type, mode), []).append(rate)
                            note(
                                f"round {round_no + 1}: {level} {flush_type} {mode}: "
                                f"{rate:,.0f} msg/s"
                            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"telemetry cost, {args.rounds} interleaved off/on pairs x {args.seconds:g} s; "
        f"default sampler parentbased_traceidratio {DEFAULT_SAMPLE_RATIO:g}; "
        f"{args.appenders} store appenders, {args.clients} gRPC clients; "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    report: list[dict[str, Any]] = []
    for level in levels:
        for flush_type in flush_types:
            off = runs[(level, flush_type, "off")]
            row: dict[str, Any] = {
                "level": level,
                "flush_type": flush_type,
                "runs": {m: runs[(level, flush_type, m)] for m in modes},
            }
            print(f"{level} {flush_type}: off median {statistics.median(off):,.0f} msg/s")
            for mode in modes[1:]:
                on = runs[(level, flush_type, mode)]
                ratios = [b / a for a, b in zip(off, on, strict=True)]
                median = statistics.median(ratios)
                line = (
                    f"  {mode + '/off':<12} median of pair ratios {median:.3f}, "
                    f"spread {spread(ratios)}; {mode} median {statistics.median(on):,.0f} msg/s"
                )
                if mode == "default":
                    verdict = "met" if median >= TARGET_RATIO else "MISSED"
                    line += f"; target >= {TARGET_RATIO}: {verdict}"
                print(line)
                row[f"{mode}_over_off"] = {"ratios": ratios, "median": median}
                if level == "server":
                    row[f"{mode}_cpu_per_message"] = cpu_cost(
                        broker_cpu[(level, flush_type, "off")],
                        broker_cpu[(level, flush_type, mode)],
                        mode,
                    )
            report.append(row)
    for name, (in_telemetry, total) in profiled.items():
        print(
            f"py-spy, broker thread holding the GIL, {name}: {in_telemetry:,} of {total:,} "
            f"samples in telemetry code ({in_telemetry / max(total, 1):.2%})"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "ratio": DEFAULT_SAMPLE_RATIO,
                    "rows": report,
                    "profiled": {k: {"telemetry": v[0], "all": v[1]} for k, v in profiled.items()},
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
