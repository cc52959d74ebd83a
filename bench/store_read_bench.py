#!/usr/bin/env python3
"""Read-path benchmark of the Skiff message store: a candidate tree against a baseline tree.

Run ``python bench/store_read_bench.py --baseline DIR [--candidate DIR]``;
bench/README.md explains the figures.

A shared machine's speed moves from minute to minute, so the two trees are measured
in the same run, in alternating rounds, each round in a fresh process of its own,
all reading the same data directory (written once, by the candidate). Each figure is
printed with its ratio to the baseline's: above 1.00 the candidate reads faster.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THIS_TREE = Path(__file__).resolve().parent.parent
TOPIC = "ReadBench"
MESSAGES = 20_000
BATCH = 32
SEGMENT_BYTES = 64 * 1024 * 1024
# (name, method, tag filter): a fetch as a pull makes it, of messages or raw records;
# "tagged" keeps one message in four, so most units are skipped without a read.
WORKLOADS = (
    ("records", "get_records", False),
    ("records/tagged", "get_records", True),
    ("messages", "get_messages", False),
    ("messages/tagged", "get_messages", True),
)


def _store_modules(tree: Path):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(tree / "broker"))
    from skiff_broker.store import hashing, message, message_store
    from skiff_broker.store.config import StoreConfig

    return StoreConfig, message_store.MessageStore, message, hashing


def fill(tree: Path, data_dir: str) -> None:
    """Write MESSAGES messages of 100 bytes to queue 0, one in four tagged TagA."""
    store_config, message_store, message, _ = _store_modules(tree)
    with message_store(
        store_config(data_dir=data_dir, commit_log_file_size=SEGMENT_BYTES)
    ) as store:
        body = os.urandom(100)
        batch = []
        for i in range(MESSAGES):
            tag = "TagA" if i % 4 == 0 else "TagB"
            batch.append(
                message.Message(
                    topic=TOPIC,
                    body=body,
                    queue_id=0,
                    properties={message.Property.TAGS: tag},
                    born_timestamp=int(time.time() * 1000),
                    born_host="10.0.0.7:53412",
                )
            )
            if len(batch) == 64:
                assert store.put_messages(batch).ok
                batch = []
        if batch:
            assert store.put_messages(batch).ok
        assert store.wait_dispatched(30.0)


def measure(tree: Path, data_dir: str, seconds: float) -> dict[str, float]:
    """Messages read per CPU second of the reading thread, by each workload, reading the
    queue end to end, repeatedly (CPU time, not wall time: other processes' load on a
    shared machine moves wall-clock rates far more than any change to the code)."""
    store_config, message_store, _, hashing = _store_modules(tree)
    tag_codes = {hashing.tag_hash("TagA")}
    rates = {}
    with message_store(
        store_config(data_dir=data_dir, commit_log_file_size=SEGMENT_BYTES)
    ) as store:
        for name, method, tagged in WORKLOADS:
            read = getattr(store, method)
            codes = tag_codes if tagged else None
            found = 0
            cpu_started = time.thread_time()
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                offset = 0
                while offset < MESSAGES:
                    got = read(TOPIC, 0, offset, BATCH, tag_codes=codes)
                    found += got.count if method == "get_records" else len(got.messages)
                    offset = got.next_offset
            rates[name] = found / (time.thread_time() - cpu_started)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline",
        required=True,
        type=Path,
        help="directory holding the baseline's broker/ tree (e.g. from git archive)",
    )
    parser.add_argument(
        "--candidate",
        type=Path,
        default=THIS_TREE,
        help="directory holding the candidate's broker/ tree (default: this checkout)",
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds per tree (default 4)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per workload")
    parser.add_argument("--data-dir", default=".", help="where the temporary store goes")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--store-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.store_dir, args.seconds)))
        return
    work = tempfile.mkdtemp(prefix="skiff-read-bench-", dir=args.data_dir)
    try:
        store_dir = os.path.join(work, "store")
        fill(args.candidate.resolve(), store_dir)
        trees = {"candidate": args.candidate.resolve(), "baseline": args.baseline.resolve()}
        results: dict[str, list[dict[str, float]]] = {"candidate": [], "baseline": []}
        for round_number in range(args.rounds):
            # Alternate which tree goes first, so that neither always meets a warmer cache.
            order = (
                ("candidate", "baseline") if round_number % 2 == 0 else ("baseline", "candidate")
            )
            for label in order:
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--baseline",
                        str(args.baseline),
                        "--measure",
                        str(trees[label]),
                        "--store-dir",
                        store_dir,
                        "--seconds",
                        str(args.seconds),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                results[label].append(json.loads(out))
                print(f"round {round_number + 1} {label}: done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'workload':<18}{'cand msg/cpu-s':>16}{'base msg/cpu-s':>16}{'ratio':>8}  per round")
    for name, _, _ in WORKLOADS:
        candidate = [r[name] for r in results["candidate"]]
        base = [r[name] for r in results["baseline"]]
        rounds = " ".join(f"{a / b:.2f}" for a, b in zip(candidate, base, strict=True))
        ratio = statistics.median(candidate) / statistics.median(base)
        print(
            f"{name:<18}{statistics.median(candidate):>16,.0f}{statistics.median(base):>16,.0f}"
            f"{ratio:>8.2f}  {rounds}"
        )


if __name__ == "__main__":
    main()
