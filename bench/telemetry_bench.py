#!/usr/bin/env python3
"""What telemetry costs: store and server throughput with telemetry off and on.

Three configurations, each measured in the same run and interleaved round by round:

- ``off``: no OTEL_* exporter configured (the store gets no observer, the server no
  interceptor);
- ``default``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` only, so the broker's default sampler
  (parent-based, trace-id ratio ``DEFAULT_SAMPLE_RATIO``) and default export intervals;
- ``100%``: the same with ``OTEL_TRACES_SAMPLER_ARG=1``: every request traced.

Telemetry is exported over OTLP/HTTP to a receiver in a process of its own
(``python -m tests.otlp_receiver``), so the exporting is part of what is measured.

- store level: one ``MessageStore`` in this process, ``--appenders`` asyncio tasks each
  putting one 100-byte message at a time with ``put_messages_async`` (the way the gRPC
  server drives the store). Appends have no parent span: they are new traces, sampled
  by the ratio.
- server level: a real broker process (``python -m skiff_broker broker``) and, in this
  process, ``--clients`` concurrent asyncio clients, each on its own channel, sending
  one-message ``SendMessage`` requests over raw gRPC without trace context, as the
  official clients do.

Each figure is the median over ``--rounds`` of the messages per second in a measured
window of ``--seconds`` after a warm-up; ratios are on/off. Run from the repository
root: ``python bench/telemetry_bench.py [--seconds S] [--rounds N] [--only store|server]``.
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
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "broker"), str(ROOT)]

import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub  # noqa: E402
from tests.broker_process import create_topics, data_dir_of, running_broker  # noqa: E402

from skiff_broker.metadata.topic_table import TopicConfig  # noqa: E402
from skiff_broker.store.config import FlushType, StoreConfig  # noqa: E402
from skiff_broker.store.message import Message  # noqa: E402
from skiff_broker.store.message_store import MessageStore  # noqa: E402
from skiff_broker.telemetry import telemetry_from_env  # noqa: E402
from skiff_broker.telemetry.setup import DEFAULT_SAMPLE_RATIO  # noqa: E402

MODES = ("off", "default", "100%")
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
        [sys.executable, "-m", "tests.otlp_receiver"],
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
    if mode != "off":
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
        telemetry = telemetry_from_env("bench")
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


def server_run(
    work: Path, flush_type: str, mode: str, endpoint: str, seconds: float, clients: int
) -> float:
    tmp = Path(tempfile.mkdtemp(dir=work))
    create_topics(data_dir_of(tmp), TopicConfig(TOPIC, QUEUES, QUEUES))
    args = ("--flush-type", flush_type, "--commit-log-file-size", "256m")
    try:
        with running_broker(tmp, *args, env=otel_env(mode, endpoint)) as broker:
            return asyncio.run(_send_for(broker.endpoint, seconds, clients))
    finally:
        shutil.rmtree(tmp)


async def _send_for(endpoint: str, seconds: float, clients: int) -> float:
    counting = False
    count = 0
    stop = False

    async def client() -> None:
        nonlocal count
        async with grpc.aio.insecure_channel(endpoint) as channel:
            stub = MessagingServiceStub(channel)
            while not stop:
                request = spb.SendMessageRequest(
                    messages=[
                        pb.Message(
                            topic=pb.Resource(name=TOPIC),
                            body=BODY,
                            system_properties=pb.SystemProperties(
                                message_id=uuid.uuid4().hex.upper(),
                                message_type=pb.MessageType.NORMAL,
                            ),
                        )
                    ]
                )
                response = await stub.SendMessage(request, timeout=30)
                assert response.status.code == pb.Code.OK, response.status
                if counting:
                    count += 1

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    await asyncio.sleep(WARMUP_S)
    counting = True
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    counting = False
    elapsed = time.perf_counter() - started
    stop = True
    await asyncio.gather(*tasks)
    return count / elapsed


# -- report ----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--appenders", type=int, default=16, help="store-level asyncio tasks")
    parser.add_argument("--clients", type=int, default=8, help="server-level gRPC clients")
    parser.add_argument("--only", choices=("store", "server"), help="one level only")
    parser.add_argument("--data-dir", type=Path, default=Path.cwd(), help="where to work")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()

    levels = [args.only] if args.only else ["store", "server"]
    runs: dict[tuple[str, str, str], list[float]] = {}
    work = Path(tempfile.mkdtemp(prefix="telemetry-bench-", dir=args.data_dir))
    try:
        with receiver_process() as endpoint:
            for round_no in range(args.rounds):
                for level in levels:
                    for flush_type in FLUSH_TYPES:
                        for mode in MODES:
                            if level == "store":
                                rate = store_run(
                                    work, flush_type, mode, endpoint, args.seconds, args.appenders
                                )
                            else:
                                rate = server_run(
                                    work, flush_type, mode, endpoint, args.seconds, args.clients
                                )
                            runs.setdefault((level, flush_type, mode), []).append(rate)
                            note(
                                f"round {round_no + 1}: {level} {flush_type} {mode}: "
                                f"{rate:,.0f} msg/s"
                            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"telemetry cost, median of {args.rounds} x {args.seconds:g} s; default sampler "
        f"parentbased_traceidratio {DEFAULT_SAMPLE_RATIO:g}; "
        f"{args.appenders} store appenders, {args.clients} gRPC clients; "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    header = f"{'level':<7} {'flush':<12} " + " ".join(f"{m + ' msg/s':>13}" for m in MODES)
    header += f" {'default/off':>12} {'100%/off':>9}"
    print(header)
    report: list[dict[str, Any]] = []
    for level in levels:
        for flush_type in FLUSH_TYPES:
            medians = {m: statistics.median(runs[(level, flush_type, m)]) for m in MODES}
            default_ratio = medians["default"] / medians["off"]
            full_ratio = medians["100%"] / medians["off"]
            verdict = "met" if default_ratio >= TARGET_RATIO else "MISSED"
            print(
                f"{level:<7} {flush_type:<12} "
                + " ".join(f"{medians[m]:>13,.0f}" for m in MODES)
                + f" {default_ratio:>12.3f} {full_ratio:>9.3f}"
                + f"  target default/off >= {TARGET_RATIO}: {verdict}"
            )
            report.append(
                {
                    "level": level,
                    "flush_type": flush_type,
                    "runs": {m: runs[(level, flush_type, m)] for m in MODES},
                    "median": medians,
                    "default_over_off": default_ratio,
                    "full_over_off": full_ratio,
                }
            )
    if args.json:
        args.json.write_text(json.dumps({"ratio": DEFAULT_SAMPLE_RATIO, "rows": report}, indent=2))


if __name__ == "__main__":
    main()
