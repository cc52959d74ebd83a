#!/usr/bin/env python3
"""Skiff side by side with the brokers users would pick instead, in one run on this machine.

Run ``python bench/peers_bench.py --quick`` (a few minutes) or without ``--quick``
(about 20 minutes); bench/README.md explains every figure. Each system is
installed from a registry into the cache (see peer_install.py), started on
loopback with its data on the disk of ``--data-dir``, measured, stopped and its
data removed. Ratios are to Skiff measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer_brokers
import peer_clients
import peer_install
from peer_brokers import ASYNC, SYNC

SIZES = {"100B": 100, "1KiB": 1024}
PRODUCERS = (1, 64)
KiB = 1024
MiB = 1024**2
GiB = 1024**3
# The systems the official Java client drives (it speaks RocketMQ 5's gRPC protocol), and
# the 4.x client too (remoting: Skiff's remoting port, RocketMQ's name server and broker).
JAVA_SYSTEMS = ("skiff", "rocketmq")
NAMES = {
    "skiff": "Skiff",
    "rocketmq": "RocketMQ",
    "redis": "Redis Streams",
    "nats": "NATS JetStream",
    "kafka": "Kafka",
}


@dataclasses.dataclass(frozen=True)
class Plan:
    warmup: float
    seconds: float
    async_sizes: tuple[str, ...]  # body sizes of the produce rows
    sync_sizes: tuple[str, ...]
    backlog_1k_bytes: int
    backlog_100_messages: int
    fill_limit_s: float
    drain_limit_s: float
    e2e_seconds: float
    idle_limit_s: float
    java_push_seconds: float  # how long the Java PushConsumer's paced sends last
    # Unmeasured sends at the same pace just before those: the JVM compiles the client's hot
    # paths in its first seconds on the broker's CPUs, which is no broker's latency.
    java_push_warmup_s: int


QUICK = Plan(0.5, 1.0, ("1KiB",), ("1KiB",), 32 * MiB, 200_000, 30, 10, 3, 2, 5, 3)
FULL = Plan(0.5, 2.5, ("100B", "1KiB"), ("100B", "1KiB"), GiB, 500_000, 75, 30, 6, 5, 20, 10)


@dataclasses.dataclass
class Row:
    system: str
    version: str
    durability: str
    settings: str
    client: str
    workload: str  # produce, drain, e2e
    size: str
    producers: int | None
    mode: str  # batch, single, or the consumer used
    messages: int
    seconds: float
    rate: float
    p50_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    broker_cpu: float  # broker CPU seconds per wall second during the workload
    errors: int
    note: str = ""
    x_skiff: float | None = None
    # Broker CPU microseconds per message, where the measurement spans exactly those messages.
    cpu_us_per_msg: float | None = None


def percentile(ordered: list[float], p: float) -> float | None:
    if not ordered:
        return None
    index = min(len(ordered) - 1, max(0, int(p * len(ordered) + 0.999999) - 1))
    return ordered[index] * 1000


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine(data_dir: str) -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    device = fs = ""
    real = os.path.realpath(data_dir)
    best = ""
    with open("/proc/mounts") as f:
        for mount in (line.split() for line in f):
            point = mount[1]
            if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(
                best
            ):
                best, device, fs = point, mount[0], mount[2]
    rotational = ""
    name = os.path.basename(device)
    with_path = Path(f"/sys/class/block/{name}/queue/rotational")
    if with_path.exists():
        rotational = "HDD" if with_path.read_text().strip() == "1" else "SSD/virtual"
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB, 1),
        "disk": f"{device} ({fs}, {rotational or 'unknown kind'}) mounted at {best}",
        "java": (
            subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
            or [""]
        )[0],
    }


class Runner:
    def __init__(
        self,
        plan: Plan,
        root: str,
        e2e_max_rate: float,
        java_messages: int,
        java_only: bool,
        push_rate: float = 0.0,
        remoting_messages: int = 0,
    ) -> None:
        self.plan = plan
        self.root = root
        self.e2e_max_rate = e2e_max_rate
        self.java_messages = java_messages
        self.java_only = java_only
        self.push_rate = push_rate
        self.remoting_messages = remoting_messages
        self.rows: list[Row] = []
        self.resources: list[dict[str, Any]] = []
        self.failures: list[str] = []

    def _row(
        self,
        broker: peer_brokers.Broker,
        driver: peer_clients.Driver,
        workload: str,
        size: str,
        producers: int | None,
        mode: str,
        sample: peer_clients.Sample,
        cpu: float,
        wall: float,
        latency: bool,
    ) -> Row:
        ordered = sorted(sample.latencies) if latency else []
        extra = sample.note
        if sample.last_error:
            extra = f"{extra}; last error: {sample.last_error}".strip("; ")
        row = Row(
            system=broker.system,
            version=broker.version,
            durability=broker.durability,
            settings=broker.settings,
            client=driver.client,
            workload=workload,
            size=size,
            producers=producers,
            mode=mode,
            messages=sample.messages,
            seconds=round(sample.seconds, 3),
            rate=sample.rate,
            p50_ms=percentile(ordered, 0.50),
            p99_ms=percentile(ordered, 0.99),
            p999_ms=percentile(ordered, 0.999),
            broker_cpu=cpu / wall if wall > 0 else 0.0,
            errors=sample.errors,
            note=extra,
        )
        self.rows.append(row)
        lat = f" p50 {row.p50_ms:.2f} p99 {row.p99_ms:.2f} ms" if row.p50_ms is not None else ""
        note(
            f"  {NAMES[broker.system]:<14} {driver.client:<32} {workload:<7} {size:>4} "
            f"{producers or '-':>3} {mode:<14} {row.rate:>11,.0f} msg/s{lat} err {row.errors}"
            + (f" ({extra})" if extra else "")
        )
        return row

    def _measure(self, broker: peer_brokers.Broker, coroutine: Any) -> tuple[Any, float, float]:
        stats = broker.stats()
        cpu = stats.cpu_seconds()
        start = time.perf_counter()
        result = asyncio.run(coroutine)
        return result, stats.cpu_seconds() - cpu, time.perf_counter() - start

    def run_system(self, system: str, durability: str) -> None:
        plan = self.plan
        broker = peer_brokers.SYSTEMS[system](self.root, durability)
        note(f"{NAMES[system]} ({durability}): starting")
        try:
            broker.start()
        except Exception as exc:
            self.failures.append(f"{NAMES[system]} {durability}: did not start: {exc}")
            note(self.failures[-1])
            broker.stop()
            return
        started = time.perf_counter()
        drivers = [cls(broker.endpoint) for cls in peer_clients.DRIVERS[system]]
        if self.java_only:
            drivers = []
        try:
            if self.java_messages and system in JAVA_SYSTEMS:
                self._java(broker)
            if self.remoting_messages and system in JAVA_SYSTEMS:
                self._remoting(broker)
            chosen = plan.async_sizes if durability == ASYNC else plan.sync_sizes
            sizes = {s: SIZES[s] for s in chosen}
            peaks: dict[str, float] = {}
            for driver in drivers:
                for size_name, size in sizes.items():
                    for producers in PRODUCERS:
                        for mode in driver.modes:
                            broker.idle(plan.idle_limit_s)
                            sample, cpu, wall = self._measure(
                                broker,
                                driver.produce(
                                    "bench", size, producers, mode, plan.warmup, plan.seconds
                                ),
                            )
                            row = self._row(
                                broker,
                                driver,
                                "produce",
                                size_name,
                                producers,
                                mode,
                                sample,
                                cpu,
                                wall,
                                latency=mode == "single",
                            )
                            if size_name == "1KiB":
                                peaks[driver.client] = max(peaks.get(driver.client, 0), row.rate)
            if durability == ASYNC and drivers:
                self._backlogs(broker, drivers)
                for driver in drivers:
                    rate = min(self.e2e_max_rate, peaks.get(driver.client, 0) / 2)
                    if rate < 1 or not driver.consumes:
                        continue
                    broker.idle(plan.idle_limit_s)
                    sample, cpu, wall = self._measure(
                        broker, driver.e2e(driver.e2e_topic, SIZES["1KiB"], rate, plan.e2e_seconds)
                    )
                    self._row(
                        broker,
                        driver,
                        "e2e",
                        "1KiB",
                        1,
                        f"{rate:,.0f}/s",
                        sample,
                        cpu,
                        wall,
                        latency=True,
                    )
        except Exception as exc:
            self.failures.append(f"{NAMES[system]} {durability}: {exc!r}")
            note(self.failures[-1])
        finally:
            stats = broker.stats()
            self.resources.append(
                {
                    "system": system,
                    "durability": durability,
                    "version": broker.version,
                    "settings": broker.settings,
                    "cpu_seconds": round(stats.cpu_seconds(), 1),
                    "wall_seconds": round(time.perf_counter() - started, 1),
                    "peak_rss_mib": round(stats.peak_rss_mib(), 1),
                }
            )
            broker.stop()

    def _java(self, broker: peer_brokers.Broker) -> None:
        """sendAsync, then blocking sends in threads, then a SimpleConsumer drains both; last
        a PushConsumer's end-to-end latency at half the sendAsync rate."""
        count = self.java_messages
        limit_s = self.plan.drain_limit_s + count / 1000  # generous: ends when the work does
        driver = peer_clients.JavaClientDriver(broker.endpoint, broker.data_dir / "java-logs")
        workloads = (
            ("produce", driver.IN_FLIGHT, "async", lambda: driver.send_async(KiB, count, limit_s)),
            (
                "produce",
                driver.THREADS,
                "blocking",
                lambda: driver.send_blocking(KiB, count, limit_s),
            ),
            ("drain", None, "Simple", lambda: driver.drain(2 * count, limit_s)),
        )
        peak = 0.0
        for workload, producers, mode, run in workloads:
            row = self._measure_java(broker, driver, workload, producers, mode, run)
            if mode == "async":
                peak = row.rate
        rate = self.push_rate or peak / 2
        if rate >= 1:
            pushed = max(1, min(count, int(rate * self.plan.java_push_seconds)))
            self._measure_java(
                broker,
                driver,
                "e2e",
                1,
                f"Push {rate:,.0f}/s",
                lambda: driver.push_e2e(KiB, pushed, rate, self.plan.java_push_warmup_s, limit_s),
            )

    def _remoting(self, broker: peer_brokers.Broker) -> None:
        """The 4.x client: after an unmeasured warm-up, sync sends in 16 threads, async
        sends, then a new group's push consumer reads both back from the start."""
        count = self.remoting_messages
        limit_s = self.plan.drain_limit_s + count / 1000  # generous: ends when the work does
        driver = peer_clients.RemotingClientDriver(
            broker.namesrv_endpoint, broker.data_dir / "remoting-logs"
        )
        driver.warm_up(KiB, max(1, count // 2), limit_s)
        stored = 0  # what the sends stored: the push consumer waits for no more
        workloads = (
            ("produce", driver.THREADS, "sync", lambda: driver.send_sync(KiB, count, limit_s)),
            ("produce", driver.IN_FLIGHT, "async", lambda: driver.send_async(KiB, count, limit_s)),
            ("drain", None, "Push", lambda: driver.push(stored, limit_s)),
        )
        for workload, producers, mode, run in workloads:
            row = self._measure_java(broker, driver, workload, producers, mode, run)
            if workload == "produce":
                stored += row.messages

    def _measure_java(
        self,
        broker: peer_brokers.Broker,
        driver: peer_clients.JavaClientDriver | peer_clients.RemotingClientDriver,
        workload: str,
        producers: int | None,
        mode: str,
        run: Any,
    ) -> Row:
        broker.idle(self.plan.idle_limit_s)
        stats = broker.stats()
        cpu = stats.cpu_seconds()
        sample = run()
        cpu = stats.cpu_seconds() - cpu
        # The JVM's start-up is outside the sample's seconds but inside the CPU figure;
        # the broker does little for it (a route query, a telemetry stream or heartbeats).
        row = self._row(
            broker,
            driver,  # type: ignore[arg-type]
            workload,
            "1KiB",
            producers,
            mode,
            sample,
            cpu,
            sample.seconds,
            latency=workload in ("produce", "e2e"),
        )
        if sample.messages:
            # The broker's CPU covers a warm-up's messages too.
            row.cpu_us_per_msg = cpu / (sample.messages + sample.unmeasured) * 1e6
        return row

    def _backlogs(self, broker: peer_brokers.Broker, drivers: list[peer_clients.Driver]) -> None:
        plan = self.plan
        # Skiff and RocketMQ are filled by the batching producer, the others by their own client.
        filler = next(
            (d for d in drivers if isinstance(d, peer_clients.BatchingDriver)), drivers[0]
        )
        wanted = {
            "1KiB": ("backlog-1k", plan.backlog_1k_bytes // KiB),
            "100B": ("backlog-100", plan.backlog_100_messages),
        }
        for size_name, (topic, count) in wanted.items():
            broker.idle(plan.idle_limit_s)
            start = time.perf_counter()
            filled = asyncio.run(filler.fill(topic, SIZES[size_name], count, plan.fill_limit_s))
            fill_s = time.perf_counter() - start
            note(
                f"  {NAMES[broker.system]}: backlog {topic} filled with {filled:,} messages "
                f"({filled * SIZES[size_name] / MiB:,.0f} MiB of bodies) in {fill_s:.1f} s"
            )
            for driver in drivers:
                if not driver.consumes:
                    continue
                broker.idle(plan.idle_limit_s)
                sample, cpu, wall = self._measure(
                    broker, driver.drain(topic, filled, plan.drain_limit_s)
                )
                backlog_note = (
                    f"backlog {filled:,} msgs, {filled * SIZES[size_name] / MiB:,.0f} MiB"
                )
                if filled < count:
                    backlog_note += f" (fill stopped at the {plan.fill_limit_s:.0f} s limit)"
                if sample.messages < filled:
                    backlog_note += (
                        f"; drained {sample.messages:,} in the {plan.drain_limit_s:.0f} s limit"
                    )
                sample.note = f"{sample.note}; {backlog_note}".strip("; ")
                self._row(
                    broker,
                    driver,
                    "drain",
                    size_name,
                    None,
                    "-",
                    sample,
                    cpu,
                    wall,
                    latency=False,
                )


def add_ratios(rows: list[Row]) -> None:
    """x_skiff: a row's rate ÷ Skiff's best rate for the same workload (e2e: p99 ÷ Skiff's
    with the same client)."""
    best: dict[tuple, float] = {}
    for row in rows:
        if row.system != "skiff":
            continue
        if row.workload == "e2e":
            key = ("e2e", row.client)
            if row.p99_ms is not None:
                best[key] = min(best.get(key, float("inf")), row.p99_ms)
            continue
        key = (row.workload, row.size, row.producers, row.mode, row.durability)
        best[key] = max(best.get(key, 0.0), row.rate)
    for row in rows:
        if row.workload == "e2e":
            base = best.get(("e2e", row.client))
            if base and row.p99_ms is not None:
                row.x_skiff = row.p99_ms / base
            continue
        base = best.get((row.workload, row.size, row.producers, row.mode, row.durability))
        if base:
            row.x_skiff = row.rate / base


def find(rows: list[Row], **match: Any) -> list[Row]:
    return [r for r in rows if all(getattr(r, k) == v for k, v in match.items())]


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    """The issue's targets, each judged on the rows of this run."""
    results = []

    def best(candidates: list[Row]) -> Row | None:
        return max(candidates, key=lambda r: r.rate, default=None)

    for producers in PRODUCERS:
        skiff = best(
            find(
                rows,
                system="skiff",
                client="Skiff BatchingProducer",
                workload="produce",
                size="1KiB",
                producers=producers,
                durability=ASYNC,
            )
        )
        redis = best(
            find(
                rows,
                system="redis",
                workload="produce",
                size="1KiB",
                producers=producers,
                mode="batch",
                durability=ASYNC,
            )
        )
        rocketmq = best(
            find(
                rows,
                system="rocketmq",
                client="official rocketmq-python-client",
                workload="produce",
                size="1KiB",
                producers=producers,
                durability=ASYNC,
            )
        )
        for name, peer, factor in (
            ("Redis Streams pipelined (everysec)", redis, 2.0),
            ("RocketMQ 5, official client", rocketmq, 1.0),
        ):
            if skiff and peer:
                ratio = skiff.rate / peer.rate if peer.rate else float("inf")
                results.append(
                    {
                        "target": f"Skiff batching 1 KiB async, {producers} producer(s) >= "
                        f"{factor:g}x {name}",
                        "skiff": round(skiff.rate),
                        "peer": round(peer.rate),
                        "ratio": round(ratio, 2),
                        "met": ratio >= factor,
                    }
                )
    for size in ("1KiB", "100B"):
        skiff = best(
            find(rows, system="skiff", workload="produce", size=size, producers=64, durability=SYNC)
        )
        redis = best(
            find(rows, system="redis", workload="produce", size=size, producers=64, durability=SYNC)
        )
        if skiff and redis:
            ratio = skiff.rate / redis.rate if redis.rate else float("inf")
            results.append(
                {
                    "target": f"Skiff SYNC_FLUSH {size}, 64 producers (best client) >= "
                    "Redis always (best client)",
                    "skiff": round(skiff.rate),
                    "peer": round(redis.rate),
                    "ratio": round(ratio, 2),
                    "met": ratio >= 1.0,
                }
            )
    results.extend(java_targets(rows))
    results.extend(remoting_targets(rows))
    drain = best(find(rows, system="skiff", workload="drain", size="100B"))
    if drain:
        results.append(
            {
                "target": "Skiff drain of a 100 B backlog >= 500,000 msg/s",
                "skiff": round(drain.rate),
                "peer": 500_000,
                "ratio": round(drain.rate / 500_000, 2),
                "met": drain.rate >= 500_000,
            }
        )
    return results


def _found_java_row(
    rows: list[Row],
    system: str,
    durability: str,
    workload: str,
    mode: str,
    client: str = peer_clients.JavaClientDriver.client,
) -> Row | None:
    """A Java client's row of ``system`` for a workload (mode's first word)."""
    found = find(rows, system=system, client=client, workload=workload, durability=durability)
    return next((r for r in found if r.mode.split()[0] == mode), None)


def java_targets(rows: list[Row]) -> list[dict[str, Any]]:
    """The official Java client's targets: Skiff against RocketMQ 5, the same workload."""
    results = []

    def add(
        durability: str, target: str, skiff: float, peer: float, ratio: float, unit: str
    ) -> None:
        met = ratio <= 1.0 if "<=" in target else ratio >= 1.0
        results.append(
            {
                "target": f"Java client {durability}: {target}",
                "skiff": round(skiff, 2),
                "peer": round(peer, 2),
                "ratio": round(ratio, 2),
                "met": met,
                "unit": unit,
            }
        )

    for durability in (ASYNC, SYNC):
        for workload, mode, what in (
            ("produce", "async", "sendAsync"),
            ("produce", "blocking", "16-thread blocking send"),
            ("drain", "Simple", "SimpleConsumer drain"),
        ):
            skiff = _found_java_row(rows, "skiff", durability, workload, mode)
            rocketmq = _found_java_row(rows, "rocketmq", durability, workload, mode)
            if skiff is None or rocketmq is None or not rocketmq.rate:
                continue
            ratio = skiff.rate / rocketmq.rate
            add(
                durability,
                f"{what} msg/s >= 1.0x RocketMQ",
                skiff.rate,
                rocketmq.rate,
                ratio,
                "msg/s",
            )
            if skiff.cpu_us_per_msg and rocketmq.cpu_us_per_msg:
                cpu_ratio = skiff.cpu_us_per_msg / rocketmq.cpu_us_per_msg
                add(
                    durability,
                    f"{what} broker CPU per message <= RocketMQ's",
                    skiff.cpu_us_per_msg,
                    rocketmq.cpu_us_per_msg,
                    cpu_ratio,
                    "µs/msg",
                )
        blocking = _found_java_row(rows, "skiff", durability, "produce", "blocking")
        if blocking is not None and blocking.p50_ms is not None:
            add(
                durability,
                "blocking send p50 <= 2 ms",
                blocking.p50_ms,
                2.0,
                blocking.p50_ms / 2,
                "ms",
            )
        skiff = _found_java_row(rows, "skiff", durability, "e2e", "Push")
        rocketmq = _found_java_row(rows, "rocketmq", durability, "e2e", "Push")
        if skiff and rocketmq and skiff.p99_ms is not None and rocketmq.p99_ms:
            add(
                durability,
                "PushConsumer e2e p99 <= RocketMQ's (rates in the mode column)",
                skiff.p99_ms,
                rocketmq.p99_ms,
                skiff.p99_ms / rocketmq.p99_ms,
                "ms",
            )
    return results


def remoting_targets(rows: list[Row]) -> list[dict[str, Any]]:
    """The 4.x client's targets: Skiff's remoting port against RocketMQ's broker, direct."""
    client = peer_clients.RemotingClientDriver.client
    results = []
    for durability in (ASYNC, SYNC):
        for workload, mode, what in (
            ("produce", "sync", "16-thread sync send"),
            ("produce", "async", "async send"),
            ("drain", "Push", "push consumption"),
        ):
            skiff = _found_java_row(rows, "skiff", durability, workload, mode, client)
            rocketmq = _found_java_row(rows, "rocketmq", durability, workload, mode, client)
            if skiff is None or rocketmq is None or not rocketmq.rate:
                continue
            pairs = [("msg/s >= 1.0x RocketMQ", skiff.rate, rocketmq.rate, "msg/s")]
            if skiff.cpu_us_per_msg and rocketmq.cpu_us_per_msg:
                pairs.append(
                    (
                        "broker CPU per message <= RocketMQ's",
                        skiff.cpu_us_per_msg,
                        rocketmq.cpu_us_per_msg,
                        "µs/msg",
                    )
                )
            for target, mine, theirs, unit in pairs:
                ratio = mine / theirs
                results.append(
                    {
                        "target": f"4.x client {durability}: {what} {target}",
                        "skiff": round(mine, 2),
                        "peer": round(theirs, 2),
                        "ratio": round(ratio, 2),
                        "met": ratio <= 1.0 if "<=" in target else ratio >= 1.0,
                        "unit": unit,
                    }
                )
    return results


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[Row], resources: list[dict[str, Any]], goals: list[dict[str, Any]]) -> str:
    lines = []
    header = (
        f"{'system':<14} {'dur':<5} {'client':<32} {'work':<7} {'size':>4} {'prod':>4} "
        f"{'mode':<9} {'msg/s':>10} {'MB/s':>7} {'x Skiff':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'p99.9 ms':>8} {'brk cpu':>7} {'µs/msg':>7} {'err':>4}  note"
    )
    lines.append(header)
    lines.append("-" * len(header))
    order = {"produce": 0, "drain": 1, "e2e": 2}
    systems = list(NAMES)
    for row in sorted(
        rows,
        key=lambda r: (
            order[r.workload],
            r.durability != ASYNC,
            r.size,
            r.producers or 0,
            r.mode,
            systems.index(r.system),
            r.client,
        ),
    ):
        mb = row.rate * (100 if row.size == "100B" else 1024) / 1e6
        lines.append(
            f"{NAMES[row.system]:<14} {row.durability:<5} {row.client[:32]:<32} {row.workload:<7} "
            f"{row.size:>4} {row.producers or '-':>4} {row.mode:<9} {row.rate:>10,.0f} "
            f"{mb:>7.1f} {fmt(row.x_skiff, '.2f'):>7} {fmt(row.p50_ms, '.2f'):>7} "
            f"{fmt(row.p99_ms, '.2f'):>7} {fmt(row.p999_ms, '.2f'):>8} {row.broker_cpu:>7.2f} "
            f"{fmt(row.cpu_us_per_msg, '.0f'):>7} {row.errors:>4}  {row.note}"
        )
    lines.append("")
    lines.append(
        "x Skiff: msg/s ÷ Skiff's best msg/s for the same workload (e2e: p99 ÷ Skiff's best p99)"
    )
    lines.append(
        "brk cpu: broker CPU s per wall s; µs/msg: broker CPU µs per message (Java client rows)"
    )
    lines.append("")
    lines.append(
        f"{'system':<14} {'dur':<5} {'version':<10} {'CPU s':>7} {'wall s':>7} "
        f"{'peak RSS MiB':>12}  durability"
    )
    for res in resources:
        lines.append(
            f"{NAMES[res['system']]:<14} {res['durability']:<5} {res['version']:<10} "
            f"{res['cpu_seconds']:>7.1f} {res['wall_seconds']:>7.1f} {res['peak_rss_mib']:>12.1f}  "
            f"{res['settings']}"
        )
    if goals:
        lines.append("")
        lines.append("targets")
        for goal in goals:
            lines.append(
                f"  {'MET    ' if goal['met'] else 'NOT MET'} {goal['target']}: "
                f"{goal['skiff']:,} vs {goal['peer']:,} {goal.get('unit', 'msg/s')} "
                f"(ratio {goal['ratio']:.2f})"
            )
    return "\n".join(lines)


def chart(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (
            "produce 1 KiB, async, batch",
            dict(workload="produce", size="1KiB", durability=ASYNC, mode="batch"),
        ),
        (
            "produce 1 KiB, async, single",
            dict(workload="produce", size="1KiB", durability=ASYNC, mode="single"),
        ),
        ("produce 1 KiB, sync", dict(workload="produce", size="1KiB", durability=SYNC)),
        ("drain", dict(workload="drain")),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 4 * len(panels)))
    for ax, (title, match) in zip(axes, panels, strict=True):
        chosen = find(rows, **match)
        labels = [
            f"{NAMES[r.system]} · {r.client.split(' (')[0]}"
            + (f" · {r.producers}p {r.mode}" if r.producers else f" · {r.size}")
            for r in chosen
        ]
        colors = ["tab:blue" if r.system == "skiff" else "tab:gray" for r in chosen]
        ax.barh(range(len(chosen)), [r.rate for r in chosen], color=colors)
        ax.set_yticks(range(len(chosen)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("messages / s")
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes instead of ~20")
    parser.add_argument("--systems", default=",".join(NAMES), help="comma-separated subset")
    parser.add_argument("--durability", default=f"{ASYNC},{SYNC}", help="async, sync or both")
    parser.add_argument("--data-dir", default=".", help="where brokers keep data (a real disk)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument(
        "--e2e-max-rate",
        type=float,
        default=5_000,
        help="cap on the end-to-end offered rate (msg/s): one Python process sends and receives",
    )
    parser.add_argument(
        "--java-messages",
        type=int,
        default=20_000,
        help="messages per workload of the official Java client on Skiff and RocketMQ (0: none)",
    )
    parser.add_argument(
        "--remoting-messages",
        type=int,
        default=20_000,
        help="messages per workload of the RocketMQ 4.x client (remoting) on Skiff and "
        "RocketMQ (0: none)",
    )
    parser.add_argument(
        "--push-rate",
        type=float,
        default=0.0,
        help="msg/s of the Java PushConsumer workload on every system (default: half the "
        "system's own sendAsync msg/s); give half the lowest peak to compare at one rate",
    )
    parser.add_argument(
        "--java-only",
        action="store_true",
        help="only the Java clients' workloads, 5.x and 4.x (a quick check of those drivers)",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(NAMES)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(NAMES)}")
    durabilities = [d.strip() for d in args.durability.split(",") if d.strip()]
    peer_brokers.refuse_tmpfs(args.data_dir)

    peer_install.ensure_python_clients()
    installers = {
        "rocketmq": peer_install.ensure_rocketmq,
        "kafka": peer_install.ensure_kafka,
        "nats": peer_install.ensure_nats,
        "redis": peer_install.ensure_redis,
    }
    for system in systems:
        if system in installers:
            installers[system]()

    load_before = load_average()
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="skiff-peers-", dir=args.data_dir)
    runner = Runner(
        plan,
        root,
        args.e2e_max_rate,
        args.java_messages,
        args.java_only,
        args.push_rate,
        args.remoting_messages,
    )
    try:
        for system in systems:
            for durability in durabilities:
                runner.run_system(system, durability)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    add_ratios(runner.rows)
    goals = targets(runner.rows)
    info = machine(args.data_dir)
    info["load_before"] = load_before
    info["load_after"] = load_average()
    report = table(runner.rows, runner.resources, goals)
    header = (
        f"peers benchmark ({'quick' if args.quick else 'full'}), "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{time.perf_counter() - started:.0f} s\n"
        f"machine: {info['nproc']} CPUs, {info['cpu_model']}, kernel {info['kernel']}, "
        f"{info['memory_gib']} GiB, disk {info['disk']}\n"
        f"load average before {info['load_before']}, after {info['load_after']}; {info['java']}; "
        f"Python {info['python']}\n"
    )
    print(header)
    print(report)
    for failure in runner.failures:
        print(f"FAILED: {failure}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    json_path = out / f"peers-{stamp}.json"
    json_path.write_text(
        json.dumps(
            {
                "plan": dataclasses.asdict(plan),
                "machine": info,
                "rows": [dataclasses.asdict(r) for r in runner.rows],
                "resources": runner.resources,
                "targets": goals,
                "failures": runner.failures,
            },
            indent=2,
        )
    )
    png_path = out / f"peers-{stamp}.png"
    try:
        chart(runner.rows, png_path)
    except Exception as exc:  # the table and JSON stand without the chart
        note(f"the chart could not be drawn: {exc!r}")
    (out / f"peers-{stamp}.txt").write_text(header + "\n" + report + "\n")
    note(f"wrote {json_path}, {png_path}")
    return 1 if runner.failures else 0


if __name__ == "__main__":
    sys.exit(main())
