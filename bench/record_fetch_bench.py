#!/usr/bin/env python3
"""Record fetches of a broker with metrics on: a candidate tree against a baseline tree.

Run ``python bench/record_fetch_bench.py --baseline DIR [--candidate DIR]``, where DIR
holds a tree's ``broker/`` (e.g. ``git archive HEAD~1 | tar -x -C DIR``).

skiff.records.v1 Fetch is the read path of ``PullConsumer`` and the Spark reader. Both
trees serve the same data directory (filled once, through the candidate's broker, with
``MESSAGES`` 100-byte messages in one queue) from broker processes of their own, with
the metrics endpoint on as a broker runs by default. One client in this process reads
the queue end to end with raw Fetch calls (no decoding, so the client stays light),
over and over, for ``--seconds`` per batch size. Each round starts one broker per
tree, in alternating order, so that neither always meets a warmer cache.

Printed per batch size, as medians over the rounds with candidate/baseline ratios
(above 1.00 the candidate is faster): records fetched per second of wall time, and
records per CPU second of the broker process (from ``/proc``; the steadier figure on
a shared machine, as other processes' load moves wall-clock rates far more).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "broker"), str(ROOT), str(ROOT / "bench")]

import grpc  # noqa: E402
from tests.support.broker_process import create_topics, data_dir_of, running_broker  # noqa: E402

from skiff_broker.client.producer import BatchingProducer  # noqa: E402
from skiff_broker.metadata.topic_table import TopicConfig  # noqa: E402
from skiff_broker.records.v1 import records_pb2 as rpb  # noqa: E402
from skiff_broker.records.v1 import records_pb2_grpc  # noqa: E402
from telemetry_bench import process_cpu_seconds  # noqa: E402

TOPIC = "FetchBench"
MESSAGES = 20_000
BODY = b"x" * 100
# A small batch, where a fetch's fixed cost weighs most, a large one, and the pull
# consumer's (and the Spark source's) default.
BATCH_SIZES = (32, 1024, 8192)


def fill(work: Path, candidate: Path) -> None:
    """MESSAGES messages in queue 0 of TOPIC, appended by Skiff's producer."""
    create_topics(data_dir_of(work), TopicConfig(TOPIC, 1, 1))

    async def produce(endpoint: str) -> None:
        async with BatchingProducer(endpoint) as producer:
            for _ in range(0, MESSAGES, 1000):
                await producer.send_batch(TOPIC, [BODY] * 1000)

    with running_broker(work, env=tree_env(candidate)) as broker:
        asyncio.run(produce(broker.endpoint))


def tree_env(tree: Path) -> dict[str, str]:
    """The broker process imports ``tree``'s skiff_broker before anything else."""
    return {"PYTHONPATH": os.pathsep.join([str(tree / "broker"), *sys.path])}


def measure(work: Path, tree: Path, seconds: float) -> dict[int, tuple[float, float]]:
    """Per batch size: records per wall second, and per broker CPU second."""
    rates = {}
    with (
        running_broker(work, env=tree_env(tree)) as broker,
        grpc.insecure_channel(broker.endpoint) as channel,
    ):
        fetch = records_pb2_grpc.RecordServiceStub(channel).Fetch
        # Warm up: the first read of the data comes from disk.
        read_queue(fetch, 1024)
        for batch in BATCH_SIZES:
            fetched = 0
            cpu_started = process_cpu_seconds(broker.proc.pid)
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                fetched += read_queue(fetch, batch)
            wall = time.perf_counter() - started
            cpu = process_cpu_seconds(broker.proc.pid) - cpu_started
            rates[batch] = (fetched / wall, fetched / cpu)
    return rates


def read_queue(fetch: grpc.UnaryUnaryMultiCallable, batch: int) -> int:
    """Fetch queue 0 from its start to its end; the records read."""
    offset = count = 0
    while offset < MESSAGES:
        response = fetch(
            rpb.FetchRequest(topic=TOPIC, queue_id=0, offset=offset, max_records=batch),
            timeout=30,
        )
        assert response.result == rpb.FetchResponse.FOUND, response
        count += response.record_count
        offset = response.next_offset
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="the baseline's tree")
    parser.add_argument(
        "--candidate", type=Path, default=ROOT, help="the candidate's tree (this checkout)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds per tree (default 4)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per batch size")
    parser.add_argument("--data-dir", default=".", help="where the temporary store goes")
    args = parser.parse_args()
    trees = {"candidate": args.candidate.resolve(), "baseline": args.baseline.resolve()}
    results: dict[str, list[dict[int, tuple[float, float]]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="skiff-fetch-bench-", dir=args.data_dir) as work:
        fill(Path(work), trees["candidate"])
        for round_number in range(args.rounds):
            # Alternate which tree goes first, so that neither always meets a warmer cache.
            order = ("candidate", "baseline")[:: 1 if round_number % 2 == 0 else -1]
            for name in order:
                results[name].append(measure(Path(work), trees[name], args.seconds))
                print(f"round {round_number + 1} {name}: done", file=sys.stderr, flush=True)
    print(f"{'batch':>6} {'figure':<16}{'candidate':>12}{'baseline':>12}{'ratio':>8}  per round")
    for batch in BATCH_SIZES:
        for index, figure in enumerate(("records/s", "records/cpu-s")):
            candidate = [r[batch][index] for r in results["candidate"]]
            base = [r[batch][index] for r in results["baseline"]]
            rounds = " ".join(f"{a / b:.2f}" for a, b in zip(candidate, base, strict=True))
            ratio = statistics.median(candidate) / statistics.median(base)
            print(
                f"{batch:>6} {figure:<16}{statistics.median(candidate):>12,.0f}"
                f"{statistics.median(base):>12,.0f}{ratio:>8.2f}  {rounds}"
            )


if __name__ == "__main__":
    main()
