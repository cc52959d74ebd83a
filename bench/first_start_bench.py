"""First start of `skiff broker` on a fresh data directory: old sizes against new defaults.

Each round starts a real broker process on an empty data directory, times it from
launch to its "listening on" log line, measures the disk the directory takes then
(allocated blocks, not apparent sizes), sends one message with a key (which makes the
first index and consume-queue files) and measures again. The "rocketmq-sizes" variant
passes what the defaults were before (1 GiB commit-log segments, 20M-entry index
files, RocketMQ's production sizes); "defaults" passes no size option at all. Variants
alternate within every round, so both see the same machine load; the table prints
medians and the ratio of the old figure to the new one.

    python bench/first_start_bench.py [--rounds N] [--data-dir DIR] [--json OUT]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "broker")]

from skiff_broker.client.messaging import MessagingClient, OutgoingMessage  # noqa: E402
from skiff_broker.metadata.topic_table import TopicConfig, TopicTable  # noqa: E402

VARIANTS = {
    "rocketmq-sizes": ["--commit-log-file-size", "1g", "--index-file-entries", "20000000"],
    "defaults": [],
}
START_DEADLINE_S = 300.0


def disk_used(directory: Path) -> int:
    """Bytes of disk blocks allocated under ``directory``."""
    total = 0
    for dirpath, _, files in os.walk(directory):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def one_start(work: Path, extra: list[str]) -> dict[str, float]:
    data_dir = work / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    # The topic exists before the start, as after `skiff topic create`.
    table = TopicTable(str(data_dir / "config" / "topics.json"))
    table.load()
    table.put(TopicConfig("first", 1, 1))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "broker"), *sys.path]),
        # The remoting port's default (8080) may be taken on a shared machine.
        "SKIFF_REMOTING_LISTEN": "127.0.0.1:0",
    }
    for name in [k for k in env if k.startswith("SKIFF_")]:
        del env[name]
    command = [sys.executable, "-m", "skiff_broker", "broker", "--listen", "127.0.0.1:0"]
    command += ["--data-dir", str(data_dir), *extra]
    launched = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    endpoint = ""
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if time.perf_counter() - launched > START_DEADLINE_S:
                raise SystemExit("the broker took too long to start")
            try:
                message = json.loads(line).get("msg", "")
            except ValueError:
                continue
            if message.startswith("listening on "):
                endpoint = message.removeprefix("listening on ")
                break
        if not endpoint:
            raise SystemExit(f"the broker exited with {proc.wait()} before listening")
        listening_s = time.perf_counter() - launched
        at_start = disk_used(data_dir)
        with MessagingClient(endpoint, timeout=60) as client:
            client.send([OutgoingMessage("first", b"hello", keys=("order-1",))])
        after_first = disk_used(data_dir)
    finally:
        proc.terminate()
        proc.wait(60)
    shutil.rmtree(data_dir, ignore_errors=True)
    return {"listening_s": listening_s, "disk_at_start": at_start, "disk_after_first": after_first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", default=".", help="where the fresh data directories go")
    parser.add_argument("--json", dest="json_out", help="write every figure here")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="skiff-first-start-", dir=args.data_dir) as tmp:
        for round_number in range(args.rounds):
            for name, extra in VARIANTS.items():
                figures = one_start(Path(tmp), extra)
                results[name].append(figures)
                print(
                    f"round {round_number + 1} {name:15} listening after "
                    f"{figures['listening_s']:.2f} s, {figures['disk_at_start'] / 1e6:.0f} MB "
                    f"on disk, {figures['disk_after_first'] / 1e6:.0f} MB after one message",
                    flush=True,
                )
    medians = {
        name: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for name, rounds in results.items()
    }
    old, new = medians["rocketmq-sizes"], medians["defaults"]
    print(f"\nmedians of {args.rounds} rounds (load average {os.getloadavg()[0]:.1f})")
    print(f"{'':28}{'rocketmq-sizes':>16}{'defaults':>12}{'old/new':>10}")
    rows = (
        ("time to listening (s)", "listening_s", 1.0),
        ("disk at start (MB)", "disk_at_start", 1e6),
        ("disk after 1 message (MB)", "disk_after_first", 1e6),
    )
    for label, key, scale in rows:
        ratio = old[key] / new[key] if new[key] else float("inf")
        print(f"{label:28}{old[key] / scale:16.2f}{new[key] / scale:12.2f}{ratio:9.1f}x")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rounds": results, "medians": medians}))


if __name__ == "__main__":
    main()
