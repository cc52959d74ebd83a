"""Broker CPU per message under the official Java client, for two code trees in one run.

Starts one Skiff broker (ASYNC_FLUSH or SYNC_FLUSH, TLS permissive as by default) per code tree
and per round and drives it with the Java client (1 KiB bodies). ``--workload send``: its
``sendAsync`` (256 in flight) and 16 threads of blocking ``send``. ``--workload drain``: a
SimpleConsumer (8 threads, ``receive`` of 32, one ``ack`` per message) drains a backlog the
client sent beforehand (not measured); the backlog holds a few batches more than are drained,
so no receive waits on an empty queue. ``both`` runs the two. For each tree it prints broker
CPU µs per message (all threads, the event loop's thread alone, and the dispatcher's, its
thread id from ``py-spy dump``) and msg/s, with the ratio of the candidate to the baseline.
``--client remoting`` drives the RocketMQ 4.x client (rocketmq-client 4.9.8) at the broker's
remoting port instead: ``send`` is its async send (256 in flight) and 16 threads of sync
send, ``drain`` a new group's push consumer reading a backlog the client sent beforehand.
Rounds alternate the trees so that load from other processes on the machine falls on both.
``--profile DIR`` records each broker with py-spy (``pip install py-spy``; native frames,
100 Hz) and writes a collapsed-stack file per tree and workload whose first frame is the
thread.

    python bench/java_send_ab.py --baseline /path/to/old/checkout [--workload drain]
                                 [--rounds 3] [--messages N] [--client remoting]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_brokers
import peer_clients
from broker_bench import py_spy

KiB = 1024


class TreeBroker(peer_brokers.SkiffBroker):
    """A Skiff broker run from the code of ``tree`` (a checkout's root)."""

    def __init__(self, root: str, durability: str, tree: Path) -> None:
        super().__init__(root, durability)
        self.tree = tree

    def start(self) -> None:
        saved = peer_brokers.ROOT
        peer_brokers.ROOT = self.tree
        try:
            super().start()
        finally:
            peer_brokers.ROOT = saved


# Messages the drain's threads may have asked for beyond ``count`` when it ends: 8 threads
# receiving 32 each (tests/official_clients/java/OfficialClient.java).
_DRAIN_SLACK = 8 * 32


Workloads = dict[str, tuple[Callable[[], object] | None, Callable[[], peer_clients.Sample]]]


def _remoting_workloads(
    driver: peer_clients.RemotingClientDriver, count: int, workload: str
) -> Workloads:
    """The 4.x client's: name -> (unmeasured preparation or None, measured run)."""
    limit_s = 60 + count / 200
    sends: Workloads = {
        "async": (None, lambda: driver.send_async(KiB, count, limit_s)),
        "sync": (None, lambda: driver.send_sync(KiB, count, limit_s)),
    }
    # A topic of its own, so that the backlog holds just what the preparation sent.
    drains: Workloads = {
        "push": (
            lambda: driver.send_async(KiB, count, limit_s, topic=driver.warmup_topic),
            lambda: driver.push(count, limit_s, topic=driver.warmup_topic),
        )
    }
    return {"send": sends, "drain": drains, "both": sends | drains}[workload]


def _workloads(driver: peer_clients.JavaClientDriver, count: int, workload: str) -> Workloads:
    """Name -> (unmeasured preparation or None, measured run)."""
    limit_s = 60 + count / 200
    sends = {
        "async": (None, lambda: driver.send_async(KiB, count, limit_s)),
        "blocking": (None, lambda: driver.send_blocking(KiB, count, limit_s)),
    }
    drains = {
        "drain": (
            lambda: driver.send_async(KiB, count + _DRAIN_SLACK, limit_s),
            lambda: driver.drain(count, limit_s),
        )
    }
    return {"send": sends, "drain": drains, "both": sends | drains}[workload]


def _py_spy() -> str:
    return py_spy() or "py-spy"


def _thread_seconds(pid: int, tid: int) -> float:
    """CPU of one broker thread; the main thread (the event loop) is the task whose id is
    the pid."""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _dispatcher_tid(pid: int) -> int:
    """The dispatcher thread's id: Python names threads only for itself, py-spy reads them."""
    dump = subprocess.run(
        [_py_spy(), "dump", "--pid", str(pid)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r'^Thread (\d+) \(\w+\): "dispatcher"$', dump, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no dispatcher thread in the broker's py-spy dump:\n{dump}")
    return int(found.group(1))


def _measure(
    tree: Path,
    root: str,
    durability: str,
    count: int,
    workload: str,
    profile: Path | None,
    tag: str,
    client: str = "official",
) -> dict[str, tuple[float, float, float, float]]:
    broker = TreeBroker(root, durability, tree)
    results: dict[str, tuple[float, float, float, float]] = {}
    try:
        broker.start()
        pid = broker.procs[0].pid
        dispatcher = _dispatcher_tid(pid)
        if client == "remoting":
            chosen = _remoting_workloads(
                peer_clients.RemotingClientDriver(
                    broker.namesrv_endpoint, broker.data_dir / "remoting-logs"
                ),
                count,
                workload,
            )
        else:
            driver = peer_clients.JavaClientDriver(broker.endpoint, broker.data_dir / "java-logs")
            chosen = _workloads(driver, count, workload)
        for name, (prepare, run) in chosen.items():
            if prepare is not None:
                prepare()
            broker.idle(5)
            stats = broker.stats()
            spy = None
            if profile is not None:
                profile.mkdir(parents=True, exist_ok=True)
                spy = subprocess.Popen(
                    [
                        _py_spy(),
                        "record",
                        "--pid",
                        str(broker.procs[0].pid),
                        "--format",
                        "raw",
                        # Native frames show gRPC's C core; thread ids split the event loop
                        # from the poller, store and dispatcher threads.
                        "--native",
                        "--threads",
                        "--rate",
                        "100",
                        "--output",
                        str(profile / f"{tag}-{name}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            cpu = stats.cpu_seconds()
            loop_cpu = _thread_seconds(pid, pid)
            dispatcher_cpu = _thread_seconds(pid, dispatcher)
            sample = run()
            cpu = stats.cpu_seconds() - cpu
            loop_cpu = _thread_seconds(pid, pid) - loop_cpu
            dispatcher_cpu = _thread_seconds(pid, dispatcher) - dispatcher_cpu
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
            if sample.errors or not sample.messages:
                raise RuntimeError(f"{tag} {name}: {sample.errors} errors: {sample.last_error}")
            results[name] = (
                cpu / sample.messages * 1e6,
                sample.messages / sample.seconds,
                loop_cpu / sample.messages * 1e6,
                dispatcher_cpu / sample.messages * 1e6,
            )
    finally:
        broker.stop()
    return results


def _ratio(candidate: float, baseline: float) -> str:
    # A push consumer's reads wake no dispatcher: its share rounds to 0 µs/msg.
    return f"{candidate / baseline:.2f}x" if baseline else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--baseline", type=Path, required=True, help="root of the old checkout")
    parser.add_argument("--candidate", type=Path, default=here, help="default: this checkout")
    parser.add_argument("--durability", default="async", choices=("async", "sync"))
    parser.add_argument("--workload", default="send", choices=("send", "drain", "both"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--data-dir", default=".")
    parser.add_argument("--profile", type=Path)
    parser.add_argument(
        "--client",
        default="official",
        choices=("official", "remoting"),
        help="official: the 5.x Java client (gRPC); remoting: the 4.x client",
    )
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "candidate": args.candidate.resolve()}
    figures: dict[str, dict[str, list[tuple[float, float, float, float]]]] = {t: {} for t in trees}
    print(f"load average before: {os.getloadavg()}", flush=True)
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for tag in order:
            profile = args.profile if round_ == 0 else None
            got = _measure(
                trees[tag],
                args.data_dir,
                args.durability,
                args.messages,
                args.workload,
                profile,
                tag,
                args.client,
            )
            for name, figure in got.items():
                figures[tag].setdefault(name, []).append(figure)
                print(
                    f"round {round_ + 1} {tag:9} {name:8} {figure[0]:7.0f} µs/msg "
                    f"{figure[1]:8.0f} msg/s {figure[2]:7.0f} µs/msg on the event loop "
                    f"{figure[3]:6.0f} µs/msg in the dispatcher",
                    flush=True,
                )
    print(f"load average after: {os.getloadavg()}")
    print(
        "\n| workload | baseline µs/msg | candidate µs/msg | ratio | event loop baseline | "
        "candidate | ratio | dispatcher baseline | candidate | ratio | baseline msg/s | "
        "candidate msg/s | ratio |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for name in figures["baseline"]:
        base = figures["baseline"][name]
        cand = figures["candidate"][name]
        b_cpu = statistics.median(f[0] for f in base)
        c_cpu = statistics.median(f[0] for f in cand)
        b_rate = statistics.median(f[1] for f in base)
        c_rate = statistics.median(f[1] for f in cand)
        b_loop = statistics.median(f[2] for f in base)
        c_loop = statistics.median(f[2] for f in cand)
        b_disp = statistics.median(f[3] for f in base)
        c_disp = statistics.median(f[3] for f in cand)
        print(
            f"| {name} | {b_cpu:.0f} | {c_cpu:.0f} | {c_cpu / b_cpu:.2f}x | {b_loop:.0f} | "
            f"{c_loop:.0f} | {c_loop / b_loop:.2f}x | {b_disp:.0f} | {c_disp:.0f} | "
            f"{_ratio(c_disp, b_disp)} | {b_rate:.0f} | {c_rate:.0f} | {c_rate / b_rate:.2f}x |"
        )


if __name__ == "__main__":
    main()
