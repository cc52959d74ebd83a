#!/usr/bin/env python3
"""Where a blocking send's time goes: the official Java client's 16 threads against Skiff
and Apache RocketMQ, quiet and beside a low-priority CPU load, in one run.

For each load (``quiet``; ``loaded``: one ``nice -n 19`` busy loop per CPU, the same for
both systems) and each system it runs, on a fresh broker (ASYNC_FLUSH, 1 KiB bodies):

- ``blocking``: ``--messages`` blocking sends over 16 threads, as fast as they are
  answered (the peers benchmark's row);
- ``rate``: ``--rate-messages`` blocking sends started at ``--rate`` per second;
- with ``--send-async``, that many ``sendAsync`` calls, ``--in-flight`` unanswered at once;
- with ``--drain``, a SimpleConsumer receiving (and acknowledging) that many of them.

It prints msg/s, the client's p50/p99 and the broker's CPU per message for both, and for
Skiff the broker's own timeline of each SendMessage call (``skiff_broker.send_timeline``):
per stage, the p50/p90/p99 of its duration and its share of the time from the request's
bytes to its answer's write, and what the client saw beyond that (the network, TLS below
the protocol, the client itself). It also splits the broker's CPU into the event loop's
thread (whose store appends the timeline times) and the rest, the figures of
``bench/results/send-latency.md``'s projection.

    python bench/send_timeline.py [--messages 20000] [--rate 1000] [--loads quiet,loaded]
                                  [--systems skiff,rocketmq] [--baseline TREE]
                                  [--send-async N] [--in-flight 1024] [--drain N]
                                  [--data-dir .]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broker"))

import peer_brokers
import peer_clients
import peer_install
from java_send_ab import TreeBroker
from skiff_broker import send_timeline

KiB = 1024
NAMES = {"skiff": "Skiff", "base": "Skiff base", "rocketmq": "RocketMQ"}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, int(p * len(ordered) + 0.999999) - 1))]


@contextlib.contextmanager
def background_load(on: bool) -> Iterator[None]:
    """One lowest-priority busy loop per CPU while the block runs (``on``)."""
    procs: list[subprocess.Popen] = []
    if on:
        for _ in range(os.cpu_count() or 1):
            procs.append(
                subprocess.Popen(
                    ["nice", "-n", "19", sys.executable, "-c", "while True: pass"],
                    stdin=subprocess.DEVNULL,
                )
            )
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def thread_seconds(pid: int, tid: int) -> float:
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stage_table(records: list[tuple[int, ...]]) -> list[str]:
    """Per stage: p50/p90/p99 µs and share of the broker's total, from the records."""
    lines = [f"    {'stage (ends at)':<12} {'p50 µs':>8} {'p90 µs':>8} {'p99 µs':>8} {'share':>6}"]
    totals = [r[send_timeline.WRITTEN] - r[0] for r in records]
    whole = sum(totals) or 1
    for k in range(1, len(send_timeline.STAGES)):
        spans = [(r[k] - r[k - 1]) / 1000 for r in records]
        lines.append(
            f"    {send_timeline.STAGES[k]:<12} {percentile(spans, 0.5):>8.0f} "
            f"{percentile(spans, 0.9):>8.0f} {percentile(spans, 0.99):>8.0f} "
            f"{sum(spans) * 1000 / whole:>6.1%}"
        )
    micros = [t / 1000 for t in totals]
    lines.append(
        f"    {'total':<12} {percentile(micros, 0.5):>8.0f} {percentile(micros, 0.9):>8.0f} "
        f"{percentile(micros, 0.99):>8.0f} {1:>6.0%}"
    )
    return lines


def append_seconds(records: list[tuple[int, ...]]) -> float:
    """CPU seconds of the store appends on the loop's thread: each batch counted once."""
    spans = {(r[send_timeline.APPEND_CPU_BEGIN], r[send_timeline.APPEND_CPU_END]) for r in records}
    return sum(end - begin for begin, end in spans) / 1e9


class Run:
    def __init__(self, args: argparse.Namespace, root: str) -> None:
        self.args = args
        self.root = root
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)

    def system(self, system: str, load: str) -> None:
        args = self.args
        timeline = Path(self.root) / f"timeline-{system}-{load}.bin"
        skiff = system in ("skiff", "base")
        if skiff:
            os.environ[send_timeline.ENV] = str(timeline)
        broker: peer_brokers.Broker
        if system == "base":
            broker = TreeBroker(self.root, peer_brokers.ASYNC, args.baseline.resolve())
        else:
            broker = peer_brokers.SYSTEMS[system](self.root, peer_brokers.ASYNC)
        try:
            broker.start()
            os.environ.pop(send_timeline.ENV, None)
            driver = peer_clients.JavaClientDriver(broker.endpoint, broker.data_dir / "java-logs")
            pid = broker.procs[-1].pid
            limit_s = 60 + args.messages / 200
            workloads = [
                ("blocking", lambda: driver.send_blocking(KiB, args.messages, limit_s)),
                (
                    f"rate {args.rate:g}/s",
                    lambda: driver.send_blocking(
                        KiB, args.rate_messages, limit_s + args.rate_messages / args.rate, args.rate
                    ),
                ),
            ]
            if args.send_async:
                workloads.append(
                    (
                        "async",
                        lambda: driver.send_async(
                            KiB, args.send_async, limit_s, in_flight=args.in_flight
                        ),
                    )
                )
            if args.drain:
                # What the sends above stored, read back by one SimpleConsumer.
                workloads.append(("drain", lambda: driver.drain(args.drain, limit_s)))
            for name, work in workloads:
                broker.idle(5)
                with contextlib.suppress(FileNotFoundError):
                    timeline.unlink()
                stats = broker.stats()
                began = time.perf_counter_ns()  # CLOCK_MONOTONIC, as the broker's stamps
                cpu = stats.cpu_seconds()
                loop_cpu = thread_seconds(pid, pid) if skiff else 0.0
                sample = work()
                cpu = stats.cpu_seconds() - cpu
                loop_cpu = (thread_seconds(pid, pid) if skiff else 0.0) - loop_cpu
                latencies = [s * 1000 for s in sample.latencies]
                count = max(1, sample.messages)
                self.say(
                    f"  {NAMES[system]:<9} {load:<7} {name:<12} {sample.rate:>7,.0f} msg/s "
                    f"p50 {percentile(latencies, 0.5):6.2f} p99 {percentile(latencies, 0.99):6.2f}"
                    f" ms  broker {cpu / count * 1e6:5.0f} µs/msg  {sample.note}  errors "
                    f"{sample.errors}" + (f" ({sample.last_error})" if sample.last_error else "")
                )
                if not skiff or name == "drain":
                    continue
                broker.idle(5)  # the last calls' records are written with the next batch
                records = send_timeline.read(str(timeline)) if timeline.exists() else []
                # A batch held back from the workload before lands in this one's file.
                records = [r for r in records if r[0] >= began]
                if not records:
                    self.say("    (no timeline records)")
                    continue
                self.lines.extend(stage_table(records))
                print("\n".join(stage_table(records)))
                broker_p50 = percentile(
                    [(r[send_timeline.WRITTEN] - r[0]) / 1e6 for r in records], 0.5
                )
                appends = append_seconds(records)
                self.say(
                    f"    {len(records):,} calls timed; client p50 {percentile(latencies, 0.5):.2f}"
                    f" ms, broker bytes-in→written p50 {broker_p50:.2f} ms: "
                    f"{percentile(latencies, 0.5) - broker_p50:.2f} ms outside the broker's "
                    "stamps (network, TLS below the protocol, waiting for the loop, client)"
                )
                self.say(
                    f"    CPU µs/msg: event loop {loop_cpu / count * 1e6:.0f} (of it store "
                    f"appends {appends / count * 1e6:.0f}), other threads "
                    f"{(cpu - loop_cpu) / count * 1e6:.0f} (dispatcher, flush, ...), "
                    f"total {cpu / count * 1e6:.0f}; outside the store: "
                    f"{(loop_cpu - appends) / cpu:.0%} of the broker's CPU"
                    if cpu > 0
                    else "    no CPU measured"
                )
        finally:
            os.environ.pop(send_timeline.ENV, None)
            broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--rate-messages", type=int, default=10_000)
    parser.add_argument("--loads", default="quiet,loaded")
    parser.add_argument(
        "--systems", default="skiff,rocketmq", help="of skiff, base (see --baseline), rocketmq"
    )
    parser.add_argument(
        "--baseline", type=Path, help="a checkout's root whose broker runs as system 'base'"
    )
    parser.add_argument(
        "--send-async",
        type=int,
        default=0,
        help="also this many sendAsync calls per system and load",
    )
    parser.add_argument(
        "--in-flight", type=int, default=1024, help="sendAsync calls unanswered at once"
    )
    parser.add_argument(
        "--drain",
        type=int,
        default=0,
        help="then a SimpleConsumer receives this many of the messages sent (no more than sent)",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--data-dir", default=".")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    loads = [s for s in args.loads.split(",") if s]
    if "base" in systems and args.baseline is None:
        parser.error("system 'base' needs --baseline")
    elif args.baseline is not None and "base" not in systems:
        systems.insert(1, "base")
    peer_brokers.refuse_tmpfs(args.data_dir)
    if "rocketmq" in systems:
        peer_install.ensure_rocketmq()
    root = tempfile.mkdtemp(prefix="skiff-timeline-", dir=args.data_dir)
    run = Run(args, root)
    print(f"load average before: {os.getloadavg()}", flush=True)
    started = time.perf_counter()
    try:
        for round_ in range(args.rounds):
            for load in loads:
                with background_load(load == "loaded"):
                    # Alternating which system goes first: drift on the machine hits both.
                    order = systems if round_ % 2 == 0 else list(reversed(systems))
                    for system in order:
                        run.system(system, load)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"load average after: {os.getloadavg()}; {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
