#!/usr/bin/env python3
"""BatchingProducer throughput with the client code of two trees, against one broker, in one run.

One broker (ASYNC_FLUSH, started from this tree as ``broker_bench`` starts it) serves every
round. Each round runs the producer workload of ``broker_bench`` (``BATCHING_SENDERS``
coroutines calling ``send()`` back to back with the defaults, 1 KiB bodies) once in a
process importing ``skiff_broker`` from the baseline tree and once from this tree; the
order alternates between rounds so that load from other processes falls on both. Printed:
msg/s and client CPU µs per message of each run, the candidate's ratio to the baseline per
round, and the median ratios.

With ``--send-batch`` each of ``--senders`` producers calls ``send_batch()`` instead, with
1024 // senders bodies at a time, as the peers benchmark's batch mode does (there ``--senders
1`` and ``64`` are its 1 and 64 producers).

    python bench/producer_ab.py --baseline /path/to/old/checkout [--rounds 5] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tree_runs import imported_tree, run_against

ROOT = Path(__file__).resolve().parent.parent


# Messages unacknowledged over all producers in --send-batch mode: peer_clients.BATCH_WINDOW.
BATCH_WINDOW = 1024


def run_client(
    endpoint: str,
    topic: str,
    senders: int,
    body_bytes: int,
    warmup: float,
    seconds: float,
    send_batch: bool,
) -> None:
    """The workload, with whatever ``skiff_broker`` PYTHONPATH names; prints one JSON line."""
    import asyncio

    from skiff_broker.client.producer import BatchingProducer

    body = os.urandom(body_bytes)
    chunk = max(1, BATCH_WINDOW // senders) if send_batch else 1

    async def main() -> dict:
        counting = False
        sent = failed = 0
        stop = False
        async with BatchingProducer(endpoint) as producer:

            async def sender() -> None:
                nonlocal sent, failed
                while not stop:
                    try:
                        if send_batch:
                            await producer.send_batch(topic, [body] * chunk)
                        else:
                            await producer.send(topic, body, tag="TagA")
                    except Exception:
                        failed += counting * chunk
                        continue
                    sent += counting * chunk

            tasks = [asyncio.create_task(sender()) for _ in range(senders)]
            await asyncio.sleep(warmup)
            counting = True
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(seconds)
            counting = False
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            stop = True
            await asyncio.gather(*tasks)
        return {
            "tree": imported_tree(),
            "msg_per_s": sent / wall,
            "client_cpu_us_per_msg": cpu / sent * 1e6 if sent else float("nan"),
            "failed": failed,
        }

    print(json.dumps(asyncio.run(main())), flush=True)


def measure(tree: Path, endpoint: str, args: argparse.Namespace, topic: str) -> dict:
    return run_against(
        tree,
        [
            __file__,
            *("--client", endpoint, "--topic", topic, "--senders", str(args.senders)),
            *("--body", str(args.body), "--warmup", str(args.warmup)),
            *("--seconds", str(args.seconds)),
            *(["--send-batch"] if args.send_batch else []),
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="root of the checkout to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up per run")
    parser.add_argument("--senders", type=int, default=0, help="default: broker_bench's")
    parser.add_argument("--body", type=int, default=1024, help="body bytes")
    parser.add_argument("--data-dir", default=".", help="a directory on the disk to use")
    parser.add_argument(
        "--send-batch", action="store_true", help="producers call send_batch(), not send()"
    )
    parser.add_argument("--client", metavar="ENDPOINT", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        run_client(
            args.client,
            args.topic,
            args.senders,
            args.body,
            args.warmup,
            args.seconds,
            args.send_batch,
        )
        return 0
    if args.baseline is None:
        parser.error("--baseline is required")

    sys.path.insert(0, str(ROOT / "bench"))
    import broker_bench

    args.senders = args.senders or broker_bench.BATCHING_SENDERS
    # The broker inherits the environment: any free metrics port, as other brokers on the
    # machine may hold the default one.
    os.environ["SKIFF_METRICS_LISTEN"] = "127.0.0.1:0"
    os.environ["SKIFF_REMOTING_LISTEN"] = "127.0.0.1:0"
    trees = {"baseline": args.baseline.resolve(), "candidate": ROOT}
    root = tempfile.mkdtemp(prefix="skiff-producer-ab-", dir=os.path.abspath(args.data_dir))
    runs: dict[str, list[dict]] = {"baseline": [], "candidate": []}
    try:
        broker = broker_bench.BrokerProcess(root, "ASYNC_FLUSH", 256)
        try:
            for number in range(args.rounds):
                order = ["baseline", "candidate"]
                if number % 2:
                    order.reverse()
                for name in order:
                    broker.settle()
                    result = measure(trees[name], broker.endpoint, args, broker_bench.BATCH_TOPIC)
                    runs[name].append(result)
                    broker_bench.note(
                        f"round {number + 1} {name}: {result['msg_per_s']:,.0f} msg/s, "
                        f"{result['client_cpu_us_per_msg']:.1f} µs client CPU/msg"
                    )
        finally:
            broker.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    call = (
        f"send_batch() of {max(1, BATCH_WINDOW // args.senders)}" if args.send_batch else "send()"
    )
    print(
        f"BatchingProducer, {args.senders} senders calling {call}, {args.body} B bodies, "
        "ASYNC_FLUSH broker"
    )
    print(f"baseline  {trees['baseline']}\ncandidate {trees['candidate']}")
    print(f"{'round':>5} {'base msg/s':>11} {'cand msg/s':>11} {'ratio':>6} {'CPU/msg ratio':>14}")
    throughput, cpu = [], []
    for number, (base, cand) in enumerate(zip(runs["baseline"], runs["candidate"], strict=True)):
        throughput.append(cand["msg_per_s"] / base["msg_per_s"])
        cpu.append(cand["client_cpu_us_per_msg"] / base["client_cpu_us_per_msg"])
        print(
            f"{number + 1:>5} {base['msg_per_s']:>11,.0f} {cand['msg_per_s']:>11,.0f} "
            f"{throughput[-1]:>6.3f} {cpu[-1]:>14.3f}"
        )
    print(
        f"median candidate/baseline: throughput {statistics.median(throughput):.3f}, "
        f"client CPU per message {statistics.median(cpu):.3f}"
    )
    failures = sum(r["failed"] for rs in runs.values() for r in rs)
    if failures:
        print(f"{failures} sends failed during measured windows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
