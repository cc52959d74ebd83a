"""Receive throughput of SQL92 subscriptions against tag subscriptions on the same data.

One real broker holds ``--messages`` messages of 256 B, each with a tag ``T<i % 10>`` and
a property ``a = i % 10``. Each variant is a fresh consumer group draining the topic
through ReceiveMessage (32 a call, acknowledged) until it has every message it matches:

- ``tag 10%`` (``T0``) against ``sql 10%`` (``a = 0``): one message in ten delivered;
- ``tag 100%`` (``*``) against ``sql 100%`` (``a >= 0``): every message delivered.

Printed per variant: delivered msg/s, and the broker's CPU (user + system, from
/proc/<pid>/stat) per delivered message; then each SQL variant's CPU over its tag
variant's, measured in the same run (the target is within 1.5x). Variants alternate
over ``--rounds`` and the table shows medians.

    python bench/filter_bench.py [--messages N] [--rounds R] [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "broker")]

from tests.support.broker_process import create_topics, data_dir_of, running_broker  # noqa: E402
from tests.support.process_stats import cpu_seconds  # noqa: E402
from tests.support.queue_ends import wait_until_dispatched  # noqa: E402

from skiff_broker.client.messaging import MessagingClient, OutgoingMessage  # noqa: E402
from skiff_broker.metadata.topic_table import TopicConfig  # noqa: E402

TOPIC = "filter-bench"
QUEUES = 4
# name: (tag expression, SQL92 expression or None, share of the messages it matches)
VARIANTS = {
    "tag 10%": ("T0", None, 10),
    "sql 10%": ("*", "a = 0", 10),
    "tag 100%": ("*", None, 1),
    "sql 100%": ("*", "a >= 0", 1),
}


def fill(client: MessagingClient, count: int) -> None:
    body = b"x" * 256
    batch = []
    for i in range(count):
        batch.append(OutgoingMessage(TOPIC, body, tag=f"T{i % 10}", properties={"a": str(i % 10)}))
        if len(batch) == 64:
            client.send(batch)
            batch = []
    if batch:
        client.send(batch)


def drain(client: MessagingClient, pid: int, variant: str, wanted: int) -> dict[str, float]:
    tags, sql, _ = VARIANTS[variant]
    group = f"bench-{uuid.uuid4().hex[:8]}"
    got = 0
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    while got < wanted:
        batch = client.receive(
            group, TOPIC, max_messages=32, tag_expression=tags, sql92=sql, wait_s=2
        )
        if not batch:
            raise SystemExit(f"{variant}: drained {got} of {wanted}, then nothing came")
        client.ack(group, TOPIC, batch)
        got += len(batch)
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(pid) - cpu_before
    return {"msg_per_s": got / elapsed, "cpu_us_per_msg": cpu / got * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", default=".")
    parser.add_argument("--json")
    args = parser.parse_args()
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(dir=args.data_dir, prefix="filter-bench-") as tmp:
        work = Path(tmp)
        create_topics(data_dir_of(work), TopicConfig(TOPIC, QUEUES, QUEUES))
        with running_broker(work) as broker, MessagingClient(broker.endpoint) as client:
            fill(client, args.messages)
            # Drains then measure reads only, not the dispatcher catching up.
            wait_until_dispatched(broker.endpoint)
            for round_number in range(args.rounds):
                order = list(VARIANTS) if round_number % 2 == 0 else list(reversed(VARIANTS))
                for name in order:
                    wanted = args.messages // VARIANTS[name][2]
                    figures[name].append(drain(client, broker.proc.pid, name, wanted))
    medians = {
        name: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for name, rows in figures.items()
    }
    print(f"{'variant':<10} {'msg/s':>10} {'broker CPU µs/msg':>18}")
    for name, row in medians.items():
        print(f"{name:<10} {row['msg_per_s']:>10.0f} {row['cpu_us_per_msg']:>18.1f}")
    for share in ("10%", "100%"):
        ratio = (
            medians[f"sql {share}"]["cpu_us_per_msg"] / medians[f"tag {share}"]["cpu_us_per_msg"]
        )
        print(f"SQL92 / tag broker CPU per delivered message, {share} matching: {ratio:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": figures, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
