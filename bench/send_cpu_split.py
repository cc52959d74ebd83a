#!/usr/bin/env python3
"""Which parts of the broker a sent message's CPU goes to: the front door's (TLS, HTTP/2,
gRPC, protobuf, auth, checks) against the store's (append, flush, dispatch).

Starts a Skiff broker (ASYNC_FLUSH, TLS permissive as by default), samples it with py-spy
(native frames, every thread, 100 Hz; ``pip install py-spy`` or ``--py-spy PATH``) while
the official Java client sends ``--messages`` 1 KiB messages (``sendAsync``, 256 in
flight, or ``--workload blocking``: 16 threads), and prints each part's share of the
samples of running threads (waiting ones left out) and of the broker's measured CPU per
message. A sample is counted for the
innermost frame that names a part (a protobuf parse inside the send handler is protobuf's,
a store append inside it the store's). These are the measured parts of
``results/send-latency.md``'s projection.

    python bench/send_cpu_split.py [--workload async|blocking] [--messages 20000]
                                   [--data-dir .] [--py-spy PATH]
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer_brokers
import peer_clients
from broker_bench import py_spy

KiB = 1024
# (part, whether the store's side of a split would run it, what marks its frames), innermost
# match first. Native frame names come from the libraries' symbols.
PARTS: tuple[tuple[str, bool, tuple[str, ...]], ...] = (
    ("TLS (OpenSSL, uvloop's SSL protocol)", False, ("ssl", "libcrypto", "evp_", "aes")),
    ("protobuf (parse, serialize)", False, ("google/protobuf", "_message.", "upb_", "upb/")),
    ("store: append (commit log)", True, ("skiff_broker/store/",)),
    ("telemetry", False, ("skiff_broker/telemetry/",)),
    ("auth", False, ("skiff_broker/auth/",)),
    ("HTTP/2 (frames, HPACK, windows)", False, ("skiff_broker/frontdoor/http2/",)),
    ("gRPC calls (frontdoor/grpc/)", False, ("skiff_broker/frontdoor/grpc/",)),
    (
        "send handler (checks, conversion, answer)",
        False,
        ("skiff_broker/messaging/", "skiff_broker/delivery/", "skiff_broker/wire/"),
    ),
    ("event loop (uvloop, asyncio, epoll)", False, ("uvloop", "asyncio/", "epoll", "uv__")),
)
OTHER = ("other (interpreter, allocator, kernel)", False)
# The store's own threads, told by a frame anywhere in the stack: all they run is theirs.
THREADS = (
    ("store: dispatch (consume queues, index)", ("store/dispatcher",)),
    ("store: flush", ("store/flush_service", "store/group_commit")),
)


# A thread waiting, not running: py-spy's native stacks include waiting threads.
WAITING = (
    "wait_for_work",
    "PyThread_acquire_lock",
    "Condition.wait",
    "Event.wait",
    "select_poll",
    "epoll_wait",
    "epoll_pwait",
    "time_sleep",
    "serve_forever",
)


def part_of(frames: list[str]) -> tuple[str, bool] | None:
    """The part a sample is counted for; None for a waiting thread's."""
    if any(mark in frame for frame in frames for mark in WAITING):
        return None
    for name, marks in THREADS:
        if any(mark in frame for frame in frames for mark in marks):
            return name, True
    for frame in reversed(frames):  # innermost first
        low = frame.lower()
        for name, store_side, marks in PARTS:
            if any(mark in low for mark in marks):
                return name, store_side
    return OTHER


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("async", "blocking"), default="async")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--data-dir", default=".")
    parser.add_argument("--py-spy", dest="spy", default=py_spy() or "py-spy")
    parser.add_argument("--keep", help="a folder to keep py-spy's collapsed stacks in")
    args = parser.parse_args()
    if shutil.which(args.spy) is None:
        parser.error(f"py-spy not found at {args.spy!r}: pip install py-spy, or give --py-spy")
    peer_brokers.refuse_tmpfs(args.data_dir)
    root = tempfile.mkdtemp(prefix="skiff-cpu-split-", dir=args.data_dir)
    broker = peer_brokers.SkiffBroker(root, peer_brokers.ASYNC)
    try:
        broker.start()
        pid = broker.procs[0].pid
        driver = peer_clients.JavaClientDriver(broker.endpoint, broker.data_dir / "java-logs")
        limit_s = 60 + args.messages / 200
        broker.idle(5)
        raw = Path(args.keep or root) / "profile.txt"
        spy = subprocess.Popen(
            [
                *(args.spy, "record", "--pid", str(pid), "--format", "raw", "--native"),
                *("--threads", "--rate", "100", "--output", str(raw)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        stats = broker.stats()
        cpu = stats.cpu_seconds()
        if args.workload == "async":
            sample = driver.send_async(KiB, args.messages, limit_s)
        else:
            sample = driver.send_blocking(KiB, args.messages, limit_s)
        cpu = stats.cpu_seconds() - cpu
        spy.send_signal(signal.SIGINT)
        _, spy_errors = spy.communicate(timeout=60)
        if not raw.exists():
            raise SystemExit(f"py-spy recorded nothing: {spy_errors.strip()}")
        per_message = cpu / max(1, sample.messages) * 1e6
        counts: collections.Counter[tuple[str, bool]] = collections.Counter()
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                part = part_of(stack.split(";"))
                if part is not None:
                    counts[part] += int(count)
        total = sum(counts.values()) or 1
        print(
            f"{args.workload}: {sample.messages:,} messages, {sample.rate:,.0f} msg/s, broker "
            f"{per_message:.0f} µs/msg of CPU, {total:,} busy samples (all threads), "
            f"errors {sample.errors}"
        )
        print("| part | side | share | µs/msg |\n|---|---|---|---|")
        store_share = 0.0
        for (name, store_side), n in counts.most_common():
            share = n / total
            store_share += share if store_side else 0.0
            side = "store" if store_side else "front"
            print(f"| {name} | {side} | {share:.1%} | {share * per_message:.0f} |")
        print(
            f"\nstore side {store_share:.1%} ({store_share * per_message:.0f} µs/msg), front "
            f"side {1 - store_share:.1%} ({(1 - store_share) * per_message:.0f} µs/msg)"
        )
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
