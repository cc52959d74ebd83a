#!/usr/bin/env python3
"""A/B of two code trees' message stores under ``store_bench.py``, in one run.

Each round runs the chosen workloads against the baseline tree's store, then against the
candidate's (the order alternates between rounds), each in a child process of this tree's
``store_bench.py`` with ``SKIFF_STORE_BENCH_BROKER`` pointing at that tree's ``broker/``.
The same bench code measures both, so only the store differs. Prints per workload the
medians over rounds and candidate ÷ baseline ratios of msg/s, of the dispatcher thread's
CPU per message and of the process's CPU per message.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIGURES = (
    ("msg_per_s", "msg/s"),
    ("dispatcher_us_per_msg", "dispatcher µs/msg"),
    ("process_us_per_msg", "process µs/msg"),
)


def run_tree(tree: Path, args: argparse.Namespace, out: str) -> dict[str, dict[str, float]]:
    """One store_bench run against ``tree``'s store: figures by workload."""
    env = {**os.environ, "SKIFF_STORE_BENCH_BROKER": str(tree / "broker")}
    command = [
        sys.executable,
        str(HERE / "store_bench.py"),
        "--only",
        args.only,
        "--seconds",
        str(args.seconds),
        "--paced-rate",
        str(args.paced_rate),
        "--recovery-gib",
        "0",
        "--json",
        out,
    ]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        document = json.load(f)
    return {a["key"]: {name: a[name] for name, _ in FIGURES} for a in document["appends"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the baseline tree (a checkout)")
    parser.add_argument(
        "--candidate", default=str(HERE.parent), help="the candidate tree (default: this one)"
    )
    parser.add_argument(
        "--only",
        default="ASYNC_FLUSH/1KiB/paced,ASYNC_FLUSH/1KiB/batch64,ASYNC_FLUSH/1KiB/64tasks",
        help="store_bench workload patterns (default: the ASYNC_FLUSH 1 KiB paced, batch64 "
        "and 64tasks workloads)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per workload")
    parser.add_argument("--paced-rate", type=float, default=2000.0)
    parser.add_argument("--data-dir", help="passed to store_bench.py")
    args = parser.parse_args(argv)
    trees = {"baseline": Path(args.baseline).resolve(), "candidate": Path(args.candidate).resolve()}
    for name, tree in trees.items():
        if not (tree / "broker" / "skiff_broker" / "store").is_dir():
            parser.error(f"{name} {tree} has no broker/skiff_broker/store")
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"baseline": [], "candidate": []}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as scratch:
        for n in range(args.rounds):
            order = ["baseline", "candidate"] if n % 2 == 0 else ["candidate", "baseline"]
            for name in order:
                print(f"round {n + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
                runs[name].append(run_tree(trees[name], args, os.path.join(scratch, "out.json")))
            load.append(os.getloadavg()[0])
    print(f"store A/B: baseline {trees['baseline']}, candidate {trees['candidate']}")
    print(
        f"{args.rounds} rounds of {args.seconds:g} s per workload, paced rate "
        f"{args.paced_rate:g} msg/s, load average {min(load):.1f}-{max(load):.1f}; "
        "medians over rounds"
    )
    header = f"{'workload':<28} {'figure':<18} {'baseline':>10} {'candidate':>10} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for key in runs["baseline"][0]:
        for name, label in FIGURES:
            base = statistics.median(r[key][name] for r in runs["baseline"])
            cand = statistics.median(r[key][name] for r in runs["candidate"])
            ratio = cand / base if base else float("nan")
            print(f"{key:<28} {label:<18} {base:>10,.1f} {cand:>10,.1f} {ratio:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
