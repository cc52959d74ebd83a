#!/usr/bin/env python3
"""What replication costs a producer: send throughput and p99 with no replica, ASYNC and SYNC.

Run ``python bench/replication_bench.py --help``; bench/README.md explains the figures.

Three broker groups run side by side on this machine: a master alone, a master
with one ASYNC replica, a master with one SYNC replica (every broker a real
``python -m skiff_broker broker`` process). Each workload is measured against
the three in interleaved rounds (none, async, sync, none, ...), and the report
gives each group's median throughput and p99, and the ratio to the unreplicated
master's median measured in the same run.

Workloads (1 KiB bodies, Skiff's BatchingProducer):
- ``64 producers``: 64 concurrent senders each waiting for its receipt (at most
  64 messages in flight): the SYNC target's shape, where every acknowledgement
  waits for a replication round trip.
- ``2048 senders``: the broker benchmark's batching workload (full requests of 256).

``--transport`` also measures the two ways the log could travel, on loopback in
this process: length-prefixed frames on an asyncio TCP stream (what Skiff uses)
and a grpc.aio bidirectional stream, each sending runs of log bytes and waiting
for an acknowledgement of each, as SYNC replication does.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "broker"))
sys.path.insert(0, str(ROOT / "bench"))

from broker_bench import (  # noqa: E402
    CpuMeter,
    Window,
    latency_of,
    log_tail,
    note,
    stop_process,
)
from skiff_broker.client.producer import BatchingProducer  # noqa: E402
from skiff_broker.metadata.topic_table import TopicConfig, TopicTable  # noqa: E402

TOPIC = "bench-replication"
QUEUES = 8
BODY = 1024
GROUPS = ("none", "async", "sync")
START_DEADLINE_S = 120.0
CATCH_UP_DEADLINE_S = 120.0


# -- broker groups ----------------------------------------------------------------


BENCH_HA_SECRET = base64.b64encode(os.urandom(32)).decode()


class Node:
    """One broker process; its log in ``root``, its data in a fresh directory."""

    def __init__(self, root: str, name: str, *args: str) -> None:
        self.name = name
        self.data_dir = os.path.join(root, name)
        table = TopicTable(os.path.join(self.data_dir, "config", "topics.json"))
        table.load()
        table.put(TopicConfig(TOPIC, QUEUES, QUEUES))
        self.log_path = os.path.join(root, f"{name}.log")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "broker"), *sys.path]),
            # The group's shared replication secret (any 16+ bytes; one per run here).
            "SKIFF_HA_SECRET": BENCH_HA_SECRET,
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
                    "--ha-listen",
                    "127.0.0.1:0",
                    "--commit-log-file-size",
                    "256m",
                    *args,
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
            )
        self.endpoint = self._wait_for("listening on ")
        self.ha_endpoint = self._wait_for("serving replication on ", required=False)

    def _wait_for(self, prefix: str, required: bool = True) -> str:
        end = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < end:
            found = False
            with open(self.log_path, errors="replace") as f:
                for line in f:
                    with contextlib.suppress(ValueError):
                        message = json.loads(line).get("msg", "")
                        if message.startswith("listening on "):
                            found = True
                        if message.startswith(prefix):
                            return f"127.0.0.1:{message.rpartition(':')[2]}"
            if found and not required:
                return ""
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited before listening:\n{self.tail()}")
            time.sleep(0.05)
        self.proc.kill()
        raise SystemExit(f"{self.name} did not start listening:\n{self.tail()}")

    def tail(self) -> str:
        return log_tail(self.log_path)

    def stop(self) -> None:
        stop_process(self.proc)


class BrokerGroup:
    def __init__(self, root: str, kind: str) -> None:
        self.kind = kind
        mode = "SYNC" if kind == "sync" else "ASYNC"
        self.master = Node(root, f"{kind}-master", "--replication-mode", mode)
        self.replica = (
            None
            if kind == "none"
            else Node(
                root,
                f"{kind}-replica",
                "--role",
                "REPLICA",
                "--master-address",
                self.master.ha_endpoint,
            )
        )
        self._prime()

    def _prime(self) -> None:
        """One message (first segment made, replica connected), kept out of the figures."""

        async def send_one() -> None:
            async with BatchingProducer(self.master.endpoint) as producer:
                await producer.send(TOPIC, b"prime")

        asyncio.run(send_one())
        self.caught_up()

    def caught_up(self) -> None:
        """Wait until the replica holds the master's whole log (none: at once)."""
        if self.replica is None:
            return
        from skiff_broker.client.admin import AdminClient

        end = time.monotonic() + CATCH_UP_DEADLINE_S
        with AdminClient(self.master.endpoint) as admin:
            while time.monotonic() < end:
                state = admin.broker_info()
                if state.replicas and state.replicas[0].lag_bytes == 0:
                    return
                time.sleep(0.1)
        note(f"{self.kind}: the replica did not catch up in {CATCH_UP_DEADLINE_S:.0f} s")

    def pids(self) -> list[int]:
        return [n.proc.pid for n in (self.master, self.replica) if n is not None]

    def stop(self) -> None:
        for node in (self.replica, self.master):
            if node is not None:
                node.stop()


# -- workloads --------------------------------------------------------------------


def send_load(
    endpoint: str, senders: int, warmup: float, seconds: float, pids: Sequence[int]
) -> dict:
    """``senders`` coroutines calling send() back to back; throughput, latency and CPU."""
    body = os.urandom(BODY)

    async def main() -> dict:
        window = Window()
        stop = False
        async with BatchingProducer(endpoint) as producer:

            async def sender() -> None:
                while not stop:
                    start = time.perf_counter()
                    try:
                        await producer.send(TOPIC, body)
                    except Exception:
                        window.done(0.0, ok=False)
                        continue
                    window.done(time.perf_counter() - start)

            tasks = [asyncio.create_task(sender()) for _ in range(senders)]
            await asyncio.sleep(warmup)
            meters = [CpuMeter(pid) for pid in pids]
            window.begin()
            await asyncio.sleep(seconds)
            window.end()
            cpu = [m.shares()[0] for m in meters]
            stop = True
            await asyncio.gather(*tasks)
        latency = latency_of(window.latencies)
        return {
            "msg_per_s": len(window.latencies) / window.seconds,
            "p50_ms": latency.p50_ms if latency else float("nan"),
            "p99_ms": latency.p99_ms if latency else float("nan"),
            "errors": window.errors,
            "master_cpu": cpu[0],
            "replica_cpu": cpu[1] if len(cpu) > 1 else 0.0,
        }

    return asyncio.run(main())


# -- transport comparison -------------------------------------------------------------


async def _tcp_round_trips(run_bytes: int, runs: int) -> float:
    """Seconds for ``runs`` DATA frames of ``run_bytes``, each acknowledged before the next."""
    from skiff_broker.ha import framing
    from skiff_broker.ha.framing import FrameType

    async def replica(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Ends when the sender closes, or is cancelled when the server closes.
        with contextlib.suppress(asyncio.IncompleteReadError, asyncio.CancelledError):
            while True:
                frame = await framing.read_frame(reader)
                _, offset, data = frame.data()
                writer.write(framing.encode_offset(FrameType.ACK, offset + len(data)))

    server = await asyncio.start_server(replica, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    payload = os.urandom(run_bytes)
    start = time.perf_counter()
    for i in range(runs):
        writer.write(framing.data_header(0, i * run_bytes, run_bytes))
        writer.write(payload)
        await framing.read_frame(reader)
    elapsed = time.perf_counter() - start
    writer.close()
    server.close()
    return elapsed


async def _grpc_round_trips(run_bytes: int, runs: int) -> float:
    """The same over a grpc.aio bidirectional stream of bytes messages."""
    import grpc

    method = "/skiff.bench.Replication/Stream"

    async def stream(request_iterator, context):  # type: ignore[no-untyped-def]
        async for data in request_iterator:
            yield len(data).to_bytes(8, "big")

    handler = grpc.method_handlers_generic_handler(
        "skiff.bench.Replication",
        {"Stream": grpc.stream_stream_rpc_method_handler(stream)},
    )
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1)])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", -1)]
    )
    call = channel.stream_stream(method)()
    payload = os.urandom(run_bytes)
    start = time.perf_counter()
    for _ in range(runs):
        await call.write(payload)
        await call.read()
    elapsed = time.perf_counter() - start
    await call.done_writing()
    await channel.close()
    await server.stop(None)
    return elapsed


def measure_transport(runs: int, repeats: int = 3) -> list[tuple[str, int, float, float]]:
    """(transport, run bytes, µs per acknowledged run, MB/s) for small and large runs.

    Each transport is timed ``repeats`` times, alternating with the other; the median
    repeat is reported (a busy machine slows single repeats by several times).
    """
    rows = []
    transports = (("TCP frames", _tcp_round_trips), ("grpc.aio", _grpc_round_trips))
    for run_bytes in (1024, 64 * 1024, 1024 * 1024):
        count = max(50, runs * 1024 // run_bytes) if run_bytes > 1024 else runs
        timings: dict[str, list[float]] = {name: [] for name, _ in transports}
        for _ in range(repeats):
            for name, measure in transports:
                timings[name].append(asyncio.run(measure(run_bytes, count)))
        for name, _ in transports:
            seconds = statistics.median(timings[name])
            rows.append((name, run_bytes, seconds / count * 1e6, run_bytes * count / seconds / 1e6))
    return rows


# -- report --------------------------------------------------------------------------


def render(results: dict[str, dict[str, list[dict]]], senders: Sequence[int]) -> str:
    lines = [
        "| workload | replication | msg/s (median) | x none | p99 ms (median) | p99 x none "
        "| master CPU | replica CPU | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for count in senders:
        key = f"{count} producers"
        base = results[key]["none"]
        base_rate = statistics.median(r["msg_per_s"] for r in base)
        base_p99 = statistics.median(r["p99_ms"] for r in base)
        for kind in GROUPS:
            rows = results[key][kind]
            rate = statistics.median(r["msg_per_s"] for r in rows)
            p99 = statistics.median(r["p99_ms"] for r in rows)
            master_cpu = statistics.median(r["master_cpu"] for r in rows)
            replica_cpu = statistics.median(r["replica_cpu"] for r in rows)
            errors = sum(r["errors"] for r in rows)
            replica = f"{replica_cpu:.2f}" if kind != "none" else "-"
            lines.append(
                f"| {key} | {kind.upper() if kind != 'none' else 'none'} | {rate:,.0f} "
                f"| {rate / base_rate:.2f} | {p99:.1f} | {p99 / base_p99:.2f} "
                f"| {master_cpu:.2f} | {replica} | {errors} |"
            )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=".", help="a directory on the disk to use")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per workload")
    parser.add_argument(
        "--senders",
        default="64,2048",
        help="concurrent senders of each workload (comma list; empty: only --transport)",
    )
    parser.add_argument(
        "--transport",
        action="store_true",
        help="also compare TCP frames with a grpc.aio stream for the log transfer",
    )
    parser.add_argument("--transport-runs", type=int, default=5000, help="1 KiB runs to time")
    parser.add_argument("--json", metavar="OUT", help="write every run as JSON")
    args = parser.parse_args(argv)
    args.senders = [int(s) for s in args.senders.split(",") if s.strip()]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="skiff-replication-bench-", dir=os.path.abspath(args.data_dir))
    groups: dict[str, BrokerGroup] = {}
    results: dict[str, dict[str, list[dict]]] = {}
    try:
        for kind in GROUPS if args.senders else ():
            note(f"starting the {kind} group")
            groups[kind] = BrokerGroup(root, kind)
        for count in args.senders:
            key = f"{count} producers"
            results[key] = {kind: [] for kind in GROUPS}
            for round_number in range(args.rounds):
                for kind in GROUPS:
                    group = groups[kind]
                    group.caught_up()
                    note(f"{key}, round {round_number + 1}: {kind}")
                    run = send_load(
                        group.master.endpoint, count, args.warmup, args.seconds, group.pids()
                    )
                    results[key][kind].append(run)
    except BaseException:
        for group in groups.values():
            note(f"{group.kind} master log tail:\n{group.master.tail()}")
        raise
    finally:
        for group in groups.values():
            group.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.senders:
        print(
            f"Replication cost, {os.cpu_count()} CPUs, {args.rounds} interleaved rounds of "
            f"{args.seconds:g} s, 1 KiB bodies, BatchingProducer; ratios to the unreplicated "
            "master in the same run"
        )
        print()
        print(render(results, args.senders))
    transport = []
    if args.transport:
        note("transport: TCP frames and grpc.aio stream")
        transport = measure_transport(args.transport_runs)
        print()
        print("| transport | run bytes | µs per acknowledged run | MB/s |")
        print("|---|---|---|---|")
        for name, run_bytes, micros, rate in transport:
            print(f"| {name} | {run_bytes:,} | {micros:,.0f} | {rate:,.0f} |")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arguments": vars(args), "runs": results, "transport": transport}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
